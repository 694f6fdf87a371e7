"""`stockdb`: the example's database service, SQLite over HTTP (standard library only).

`GET /stock/ITEM` answers the count (404 if unknown), `PUT /stock/ITEM` with a number
as the body sets it. `python stockdb.py --check` is its healthcheck: it exits 0 once
the server answers on port 8080.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = 8080
_db = sqlite3.connect(":memory:", check_same_thread=False)
_db.execute("CREATE TABLE stock (item TEXT PRIMARY KEY, count INTEGER NOT NULL)")
_lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            return self._reply(200, b"ok")
        with _lock:
            row = _db.execute("SELECT count FROM stock WHERE item = ?", (self._item(),)).fetchone()
        self._reply(404, b"unknown") if row is None else self._reply(200, str(row[0]).encode())

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            count = int(body)
        except ValueError:
            return self._reply(400, b"not a number")
        with _lock:
            _db.execute("INSERT OR REPLACE INTO stock VALUES (?, ?)", (self._item(), count))
        self._reply(204, b"")

    def _item(self) -> str:
        return self.path.removeprefix("/stock/")

    def _reply(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    if sys.argv[1:] == ["--check"]:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2):
            return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 ignores it otherwise
    ThreadingHTTPServer(("0.0.0.0", PORT), _Handler).serve_forever()


if __name__ == "__main__":
    main()
