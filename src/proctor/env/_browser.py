"""The `browser` capability: chromium per environment server, as CDP and as computer/1.

`BrowserServer.start()` launches Debian's chromium with a fresh profile in a private
0700 folder, speaking CDP on a pipe only (`--remote-debugging-pipe`: no port of its
own), and serves a bridge on a loopback TCP port that admits only this process's uid:

- HTTP `GET /json/version` and a WebSocket at `/devtools/browser/<id>`, so Playwright's
  `connect_over_cdp(url)` and raw CDP clients work on the URL `run.binding(name)` gives;
  each WebSocket is its own CDP connection (`_cdp.CdpMux` shares the pipe);
- protocol computer/1 (a connection whose first byte is `{`), the same actions and
  frames as a desktop, on the browser's first page: `Page.captureScreenshot` for frames
  and `Input.dispatch*` for input.

Without `allow_network`, every request but loopback goes to a dead proxy. Chromium gets
the parent-death signal and its own process group; `aclose()` kills it and removes the
profile.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import resource
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from .._peer import loopback_peer_uid
from ._browser_input import cdp_key, perform
from ._capability_server import CapabilityServer
from ._cdp import CdpError, CdpMux, InternalClient
from ._computer_actions import Action, FrameOptions
from ._computer_server import serve_computer
from ._desktop import _open_log, _stop, _tail, die_with_parent
from ._websocket import WebSocket, accept_key

__all__ = ["BrowserServer"]

MAX_HEAD = 16 * 1024
HEAD_TIMEOUT = 10.0
START_TIMEOUT = 30.0
FLAGS = (
    "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
    "--disable-gpu", "--disable-quic", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
    "--disable-features=Translate,MediaRouter,OptimizationHints", "--mute-audio",
)  # fmt: skip
_HOST = re.compile(r"[A-Za-z0-9.\-]+(:\d+)?|\[[0-9A-Fa-f:]+\](:\d+)?")


class BrowserServer(CapabilityServer):
    """Chromium with a CDP bridge and a computer/1 action server (see the module doc).

    Args:
        width: viewport width in pixels.
        height: viewport height in pixels.
        headless: run without a display (`--headless=new`).
        allow_network: let pages reach beyond loopback.
        live_view: allow `subscribe` on the action protocol.
        sandbox: chromium's own sandbox: None uses it where it can run (not as root,
            and only where user namespaces can be made), True insists, False never.
        chromium: the chromium binary.
        args: more chromium flags.
    """

    kind = "browser"
    tcp = True  # `url`: http://127.0.0.1:<port>, CDP over HTTP/WebSocket and computer/1

    def __init__(
        self,
        width: int = 1280,
        height: int = 800,
        *,
        headless: bool = True,
        allow_network: bool = False,
        live_view: bool = False,
        sandbox: bool | None = None,
        chromium: str = "chromium",
        args: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.width = width
        self.height = height
        self.headless = headless
        self.allow_network = allow_network
        self.live_view = live_view
        self.sandbox = sandbox
        self.chromium = chromium
        self.args = list(args)
        self.lock = asyncio.Lock()
        self.version: dict[str, Any] = {}
        self._proc: asyncio.subprocess.Process | None = None
        self._mux: CdpMux | None = None
        self._pipes: list[asyncio.BaseTransport] = []
        self._cdp: InternalClient | None = None
        self._session: str | None = None
        self._id = uuid.uuid4().hex
        self._cursor = [0, 0]

    def __repr__(self) -> str:
        return f"<BrowserServer {self._where() or 'stopped'}>"

    async def start(self) -> str:
        """Launch chromium, attach to its first page and serve the bridge; returns the URL.

        Raises:
            OSError: chromium is missing or did not come up.
        """
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            # V8 and PartitionAlloc reserve terabytes of address space up front.
            raise OSError(
                f"chromium cannot start under an address-space limit (RLIMIT_AS {limit} bytes);"
                " lift it, e.g. SandboxRuntime(limits={'memory': None})"
            )
        self._make_dir()
        try:
            await self._launch()
            await self._attach()
            self.version = await self._internal().call("Browser.getVersion")
            await self._listen()
        except BaseException:
            await self.aclose()
            raise
        return self.url

    async def aclose(self) -> None:
        """Stop serving, kill chromium's process group and remove its profile."""
        await self._stop_listening()
        for pipe in self._pipes:
            pipe.close()
        self._pipes.clear()
        proc, self._proc = self._proc, None
        if proc is not None:
            await _stop(proc)
        self._remove_dir()
        self._cdp = self._mux = None
        self._session = None

    async def goto(self, url: str) -> None:
        """Open `url` in the first page (task code setting the scene) and wait for its load.

        Raises:
            CdpError: the browser refused the navigation or is gone.
        """
        session = await self._page()
        cdp = self._internal()
        await cdp.call("Page.enable", session=session)
        loaded = cdp.expect("Page.loadEventFired", session)
        navigated = await cdp.call("Page.navigate", {"url": url}, session=session)
        if navigated.get("errorText"):
            raise CdpError(f"{url}: {navigated['errorText']}")
        async with asyncio.timeout(START_TIMEOUT):
            await loaded

    # -- the computer/1 backend ------------------------------------------------------------

    def known_key(self, name: str) -> bool:
        """Whether `name` is a key the browser can press (names as on a desktop)."""
        return cdp_key(name) is not None

    async def perform(self, actions: list[Action]) -> None:
        """Dispatch the actions as CDP input events on the first page."""
        session = await self._page()
        cdp = self._internal()

        async def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
            return await cdp.call(method, params, session=session)

        await perform(call, actions, self._cursor)

    async def frame(self, options: FrameOptions) -> tuple[bytes, int, int]:
        """The page's viewport through `Page.captureScreenshot`."""
        params: dict[str, Any] = {"format": options.format}
        if options.format == "jpeg":
            params["quality"] = options.quality
        width, height = self.width, self.height
        if options.scale < 1.0:
            params["clip"] = {"x": 0, "y": 0, "width": width, "height": height}
            params["clip"]["scale"] = options.scale
            width, height = round(width * options.scale), round(height * options.scale)
        shot = await self._internal().call(
            "Page.captureScreenshot", params, session=await self._page()
        )
        return base64.b64decode(shot["data"]), width, height

    async def cursor(self) -> tuple[int, int]:
        """Where the last mouse event put the pointer."""
        return self._cursor[0], self._cursor[1]

    async def look(self) -> bytes:
        """A small, rough screenshot of the page (a quarter scale JPEG), for `settle_ms`."""
        image, _, _ = await self.frame(FrameOptions("jpeg", 30, 0.25))
        return image

    # -- chromium ----------------------------------------------------------------------------

    def _internal(self) -> InternalClient:
        if self._cdp is None:
            raise CdpError("the browser is stopped")
        return self._cdp

    async def _launch(self) -> None:
        assert self._dir is not None
        flags = [*FLAGS, f"--user-data-dir={self._dir}/profile"]
        flags.append(f"--window-size={self.width},{self.height}")
        if self.headless:
            flags.append("--headless=new")
        if not await self._own_sandbox():
            flags.append("--no-sandbox")
        if not self.allow_network:  # loopback bypasses proxies; the rest meets a closed port
            flags.append("--proxy-server=http://127.0.0.1:9")
        to_chrome, from_chrome = os.pipe(), os.pipe()
        log = _open_log(os.path.join(self._dir, "chromium.log"))
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *[self.chromium, *flags, *self.args, "about:blank"],
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
                close_fds=False,  # fds 3 and 4 are made in the child; ours are not inheritable
                start_new_session=True,
                preexec_fn=_pipes_at_3_and_4(to_chrome[0], from_chrome[1]),
            )
        finally:
            log.close()
            os.close(to_chrome[0])
            os.close(from_chrome[1])
        loop = asyncio.get_running_loop()
        self._mux = mux = CdpMux()
        reading, _ = await loop.connect_read_pipe(lambda: mux, os.fdopen(from_chrome[0], "rb", 0))
        writing, _ = await loop.connect_write_pipe(
            asyncio.Protocol, os.fdopen(to_chrome[1], "wb", 0)
        )
        self._pipes = [reading, writing]
        mux.attach_output(writing)
        self._cdp = InternalClient(mux)

    async def _own_sandbox(self) -> bool:
        """Whether chromium's own sandbox can run here: not as root (chromium refuses),
        and only where this process may make a user namespace (inside a bubblewrap
        sandbox it may not: that sandbox is then the only wall)."""
        if self.sandbox is not None:
            return self.sandbox
        if os.geteuid() == 0:
            return False
        try:
            probe = await asyncio.create_subprocess_exec(
                "unshare", "--user", "true",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
        except OSError:
            return False
        return await probe.wait() == 0

    async def _attach(self) -> None:
        """Wait for the first page and attach to it (`_session`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        while self._session is None:
            try:
                await self._page()
            except CdpError:
                if loop.time() > deadline or (self._proc and self._proc.returncode is not None):
                    assert self._dir is not None
                    tail = _tail(os.path.join(self._dir, "chromium.log"))
                    raise OSError(
                        f"{self.chromium} did not come up: {tail or 'no output'}"
                    ) from None
                await asyncio.sleep(0.05)

    async def _page(self) -> str:
        """The session on the first page, attached (again, if it went) on demand."""
        cdp = self._internal()
        if self._session is not None and self._session not in cdp.detached:
            return self._session
        targets = (await cdp.call("Target.getTargets"))["targetInfos"]
        page = next((t for t in targets if t["type"] == "page"), None)
        if page is None:
            raise CdpError("the browser has no page open")
        attached = await cdp.call(
            "Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}
        )
        session: str = attached["sessionId"]
        size = {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False}
        await cdp.call("Emulation.setDeviceMetricsOverride", size, session=session)
        self._session = session
        return session

    # -- the bridge --------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A loopback port is open to every local user: only this process's uid gets in.
        uid = loopback_peer_uid(
            writer.get_extra_info("sockname"), writer.get_extra_info("peername")
        )
        if uid != os.geteuid():
            writer.transport.abort()
            return
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                first = await reader.read(1)
            if first == b"{":
                await serve_computer(self, reader, writer, first)
            elif first:
                await self._http(first, reader, writer)
        except (
            TimeoutError,
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
        ):
            pass
        finally:
            writer.close()

    async def _http(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        async with asyncio.timeout(HEAD_TIMEOUT):
            head = first + await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD:
            return _respond(writer, 431, b"request head too large")
        request, *lines = head.decode("latin-1").split("\r\n")
        method, _, rest = request.partition(" ")
        path = rest.split(" ", 1)[0].split("?", 1)[0].rstrip("/")
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)
        }
        host = headers.get("host", "")
        host = host if _HOST.fullmatch(host) else self.url.removeprefix("http://")
        if method == "GET" and path == "/json/version":
            return _respond(writer, 200, orjson.dumps(self._version(host)), "application/json")
        if (
            path == f"/devtools/browser/{self._id}"
            and headers.get("upgrade", "").lower() == "websocket"
        ):
            key = headers.get("sec-websocket-key", "")
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + f"Sec-WebSocket-Accept: {accept_key(key)}\r\n\r\n".encode()
            )
            return await self._relay(WebSocket(reader, writer))
        return _respond(writer, 404, b"not found")

    def _version(self, host: str) -> dict[str, Any]:
        return {
            "Browser": self.version.get("product", ""),
            "Protocol-Version": self.version.get("protocolVersion", "1.3"),
            "User-Agent": self.version.get("userAgent", ""),
            "V8-Version": self.version.get("jsVersion", ""),
            "webSocketDebuggerUrl": f"ws://{host}/devtools/browser/{self._id}",
        }

    async def _relay(self, ws: WebSocket) -> None:
        """One CDP connection on the shared pipe until either side closes."""
        mux = self._mux
        assert mux is not None
        client = _SocketClient(ws)
        mux.clients.add(client)
        try:
            while (payload := await ws.receive()) is not None:
                try:
                    message = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    break
                if not isinstance(message, dict):
                    break
                mux.send(client, message)
        finally:
            mux.forget(client)
            ws.close()


def _pipes_at_3_and_4(commands: int, replies: int) -> Callable[[], None]:
    """A `preexec_fn`: chromium reads CDP on fd 3 and writes on fd 4; dies with us."""
    die = die_with_parent()

    def preexec() -> None:
        # Both are copied away first: either may itself be fd 3 or 4.
        high_in, high_out = os.dup(commands), os.dup(replies)
        os.dup2(high_in, 3)
        os.dup2(high_out, 4)
        os.close(high_in)
        os.close(high_out)
        if die is not None:
            die()

    return preexec


class _SocketClient:
    """A WebSocket speaking for the whole browser (as Playwright does)."""

    broadcast = True

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws

    def deliver(self, message: dict[str, Any]) -> None:
        self.ws.send(orjson.dumps(message))


def _respond(
    writer: asyncio.StreamWriter, status: int, body: bytes, kind: str = "text/plain"
) -> None:
    reason = {200: "OK", 404: "Not Found", 431: "Request Header Fields Too Large"}[status]
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
