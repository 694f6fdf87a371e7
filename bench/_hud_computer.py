"""The HUD side of `bench/computer.py` (run under the peers python, hud==0.6.21).

HUD's computer use is VNC: the environment runs Xvfb and x11vnc (HUD's docs,
`docs/v6/reference/capabilities.mdx`: `x11vnc -display :0 -rfbport 5900 -localhost
-forever -nopw`; hud-evals/cua-template adds `-shared`), and the agent's provider tool, an
`RFBTool` on `RFBClient` (asyncvnc), clicks and screenshots over RFB, encoding the frame
as PNG in the agent's process. Each desktop here is that stack: the bench's Tk canvas
(`envs/computer_app.py`) on its own Xvfb (24-bit, no TCP, a private cookie) and x11vnc
on 127.0.0.1 only (`-localhost -noipv6`, a free port, `-forever -shared -nopw`), driven
by HUD's `ClaudeComputerTool.execute({"action": "left_click", ...})`, which clicks and
returns the screenshot after it: the same action-to-frame round trip as proctor's
`act([click])`, without a tunnel (the agent dials x11vnc directly).

`threads`: x11vnc as documented, asked by asyncvnc (full, non-incremental update requests
only), can serve a stale copy of the screen: on a quiet machine (Debian's x11vnc 0.9.16)
0 of 19 frames changed, nor 3 s after a click, while `xwd` showed each click drawn and a
new connection saw them; under load most frames did change. With `-threads` x11vnc
polls the screen on its own and the frames show the clicks; both are measured.
Each round trip's frame is compared with the one before: `fresh` counts those that differ.

Sections (each in a fresh interpreter, `_common.main`): `frames` (one desktop, N round
trips; with `rss`, the resident memory of x11vnc, Xvfb and this client after them) and
`concurrency` (N desktops, their round trips at once from one event loop, as HUD's
`Taskset.run` drives rollouts). `computer.py` starts it with a scrubbed environment; the
same settings are enforced here before `hud` is imported.
"""

from __future__ import annotations

import os
import sys

for _var in ("HUD_API_KEY",):
    os.environ.pop(_var, None)
os.environ["HUD_TELEMETRY_ENABLED"] = "false"
os.environ["HUD_CLI_ANALYTICS_ENABLED"] = "false"
os.environ["HUD_SKIP_VERSION_CHECK"] = "1"
for _var in ("TELEMETRY", "API", "WEB", "GATEWAY", "RUNTIME", "RL"):
    os.environ[f"HUD_{_var}_URL"] = "http://127.0.0.1:9"
if not os.environ.get("PROCTOR_BENCH_SCRUBBED"):
    sys.exit("run me through bench/computer.py (it sets a private HOME)")

import asyncio  # noqa: E402
import base64  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from _common import ENVS, main  # noqa: E402

APP = ENVS / "computer_app.py"
WARMUP = 5  # round trips not timed, as on proctor's side
START_TIMEOUT = 20.0


def _rss_kb(pid: int | str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _xauth_entry(cookie: bytes) -> bytes:
    """One Xauthority record for any address and display (FamilyWild, empty number)."""

    def field(value: bytes) -> bytes:
        return struct.pack(">H", len(value)) + value

    return (
        struct.pack(">H", 0xFFFF)
        + field(b"")
        + field(b"")
        + field(b"MIT-MAGIC-COOKIE-1")
        + field(cookie)
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check: Any, what: str, procs: list[subprocess.Popen[bytes]]) -> Any:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise OSError(f"{what}: {dead[0].args[0]} exited {dead[0].returncode}")
        time.sleep(0.02)
    raise OSError(f"{what}: not within {START_TIMEOUT:g} s")


class Desktop:
    """Xvfb + the Tk canvas + x11vnc on 127.0.0.1, as HUD's computer-use images run them."""

    def __init__(self, width: int, height: int, threads: bool) -> None:
        self.width, self.height, self.threads = width, height, threads
        self.folder = Path(tempfile.mkdtemp(prefix="hud-computer-"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.port = 0

    def start(self) -> Desktop:
        auth = self.folder / "Xauthority"
        auth.touch(0o600)
        auth.write_bytes(_xauth_entry(os.urandom(16)))
        read_fd, write_fd = os.pipe()
        screen = ["-screen", "0", f"{self.width}x{self.height}x24"]
        argv = ["Xvfb", "-displayfd", str(write_fd), *screen, "-nolisten", "tcp"]
        xvfb = self._spawn("xvfb", [*argv, "-auth", str(auth), "-noreset"], pass_fds=(write_fd,))
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            number = pipe.readline().strip()  # Xvfb writes it once it accepts clients
        if not number:
            raise OSError(f"Xvfb did not start: {xvfb.args}")
        env = {**os.environ, "DISPLAY": f":{int(number)}", "XAUTHORITY": str(auth)}
        ready = self.folder / "ready"
        app = [sys.executable, str(APP), str(self.width), str(self.height), str(ready)]
        self._spawn("app", app, env=env)
        _wait(ready.exists, "the Tk canvas", list(self.procs.values()))
        for attempt in range(3):  # a free port can be taken between the probe and x11vnc
            self.port = _free_port()
            vnc = ["x11vnc", "-display", env["DISPLAY"], "-auth", str(auth), "-localhost"]
            vnc += ["-noipv6", "-rfbport", str(self.port), "-forever", "-shared", "-nopw"]
            vnc += ["-threads"] if self.threads else []
            proc = self._spawn(f"x11vnc{attempt}", vnc, env=env)
            try:
                _wait(self._listening, "x11vnc", [proc])
                self.procs["x11vnc"] = proc
                break
            except OSError:
                if attempt == 2:
                    log = (self.folder / f"x11vnc{attempt}.log").read_text(errors="replace")
                    raise OSError(f"x11vnc did not start: {log.strip()[-300:]}") from None
        time.sleep(0.3)  # the canvas has drawn, as proctor's side waits
        return self

    def _spawn(self, name: str, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        with open(self.folder / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.folder, **kw
            )
        self.procs[name] = proc
        return proc

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def rss_kb(self) -> dict[str, int]:
        return {
            "x11vnc_rss_kb": _rss_kb(self.procs["x11vnc"].pid),
            "xvfb_rss_kb": _rss_kb(self.procs["xvfb"].pid),
        }

    def stop(self) -> None:
        for proc in reversed(self.procs.values()):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


async def _agent(desktop: Desktop, frames: int, seed: int) -> dict[str, Any]:
    """HUD's computer tool on an RFB capability: `frames` click-to-screenshot round trips.

    `fresh`: how many frames differ from the one before (each click draws a box, so a
    frame that shows the desktop as it is never equals the last)."""
    from hud.agents.claude.tools.computer import ClaudeComputerTool
    from hud.capabilities import Capability, RFBClient

    client = await RFBClient.connect(Capability.rfb(url=f"rfb://127.0.0.1:{desktop.port}"))
    tool = ClaudeComputerTool(spec=ClaudeComputerTool.default_spec("bench"), client=client)
    rng = random.Random(seed)
    samples: list[float] = []
    sizes: list[int] = []
    fresh, last = 0, None
    try:
        for i in range(frames + WARMUP):
            point = [rng.randrange(desktop.width), rng.randrange(desktop.height)]
            t0 = time.perf_counter()
            got = await tool.execute({"action": "left_click", "coordinate": point})
            elapsed = time.perf_counter() - t0
            if got.isError:
                raise RuntimeError(f"HUD click failed: {got.content}")
            frame = got.content[0].data  # base64 PNG; only the last one is kept
            if i >= WARMUP:
                samples.append(elapsed)
                sizes.append(len(base64.b64decode(frame)))
                fresh += frame != last
            last = frame
    finally:
        await client.close()
    return {"samples": samples, "sizes": sizes, "fresh": fresh}


def _desktops(p: dict[str, Any], n: int) -> list[Desktop]:
    desktops: list[Desktop] = []
    try:
        for _ in range(n):
            desktops.append(Desktop(p["width"], p["height"], p["threads"]))
            desktops[-1].start()
    except BaseException:
        for d in desktops:
            d.stop()
        raise
    return desktops


def frames(p: dict[str, Any]) -> dict[str, Any]:
    """One desktop, `frames` round trips; `rss` adds the processes' memory after them."""
    (desktop,) = _desktops(p, 1)
    try:
        out = asyncio.run(_agent(desktop, p["frames"], 0))
        if p.get("rss"):
            out["rss_kb"] = {
                **desktop.rss_kb(),
                "client_rss_kb": _rss_kb("self"),
                "client_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            }
        return out
    finally:
        desktop.stop()


def concurrency(p: dict[str, Any]) -> dict[str, Any]:
    """`n` desktops, each with its own client, all doing round trips at once; the wall
    time covers starting and stopping the desktops, as a rollout's does on proctor's side."""
    t0 = time.perf_counter()
    desktops = _desktops(p, p["n"])
    try:

        async def together() -> list[dict[str, Any]]:
            return await asyncio.gather(
                *(_agent(d, p["frames"], i) for i, d in enumerate(desktops))
            )

        runs = asyncio.run(together())
    finally:
        for d in desktops:
            d.stop()
    return {
        "samples": [s for run in runs for s in run["samples"]],
        "fresh": sum(run["fresh"] for run in runs),
        "wall_s": time.perf_counter() - t0,
    }


if __name__ == "__main__":
    main({"frames": frames, "concurrency": concurrency}, "hud")
