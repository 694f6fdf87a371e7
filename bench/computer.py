"""What computer use costs: action-to-frame round trips through the tunnel, frames per
second, memory after 1,000 frames, and how many desktops 2 cores hold.

    .venv/bin/python bench/computer.py [--frames 300] [--memory-frames 1000]
        [--concurrency 1,2,4,8] [--peers-python .venv-peers/bin/python] [--json PATH]

Every proctor row is a real rollout under `SubprocessRuntime` (a child server per
rollout, the agent's `DesktopClient` on `run.binding("desktop")`, so each request goes
driver -> forwarder -> `tunnel.open` -> the server's action socket) against
`bench/envs/computer_env.py`: a Tk canvas filling the screen, text and colour like a
real desktop, where each click draws a rectangle, so no frame equals the last. One
round trip is `act([click at a random point])` returning the frame after it.

- floor: in this process, no protocol and no tunnel: Xvfb, `XShmGetImage` through
  proctor's ctypes binding and Pillow's PNG encode (level 1), the same frame sizes;
- xwd: the naive way, `xwd -root` as a process per frame, decoded and encoded as PNG;
- png / jpeg: the round trip at 1280x800 and 1920x1080 (jpeg: quality 70, scale 0.5);
- memory: the server's and Xvfb's resident set after `--memory-frames` PNG frames;
- concurrency: N rollouts at once, each doing the round trip; the p50 per N and the
  frames per second of them all (the answer to "how many desktops do 2 cores hold":
  the largest N whose p50 stays under 100 ms).

HUD is measured in the same run, interleaved with proctor's rows (`bench/_hud_computer.py`
under the peers python, hud==0.6.21, each section in a fresh interpreter with a scrubbed
environment as `bench/rollouts.py` does): the same Tk canvas on its own Xvfb, served by
x11vnc on 127.0.0.1 as HUD's docs start it, and HUD's `ClaudeComputerTool` (an `RFBTool`
on `RFBClient`) doing the same click-to-PNG round trips, memory after the same frames
and the same concurrency. x11vnc as documented can serve a stale screen to HUD's client
(see `_hud_computer.py`), so HUD is measured twice: as documented, and with `x11vnc
-threads`, whose frames show the clicks; the ratio table has both, the memory and
concurrency comparisons use `-threads`. `fresh_%`: the share of frames that differ from
the one before (each click draws a box); a frame taken before the app redrew equals the
last one too, so it falls when the app lags the round trip (proctor's `settle_ms` waits
for that), and on HUD's documented rows when x11vnc's copy is stale.
Without x11vnc or the peers python, HUD's rows say what is missing.

Only local sockets are used. The load average before and after and the cores are
printed with the tables; on a loaded machine, compare rows within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import pct
from rollouts import hud_environ

from proctor import SubprocessRuntime, Task
from proctor.agents import Run
from proctor.engine import rollout
from proctor.env import DesktopClient, DesktopServer
from proctor.env._computer_actions import FrameOptions

BENCH = Path(__file__).resolve().parent
ENV = BENCH / "envs" / "computer_env.py"
APP = BENCH / "envs" / "computer_app.py"
PEERS = BENCH.parent / ".venv-peers" / "bin" / "python"
SIZES = [(1280, 800), (1920, 1080)]
JPEG = {"format": "jpeg", "quality": 70, "scale": 0.5}


def _row(name: str, samples: list[float], size: int | None = None, **extra: Any) -> dict[str, Any]:
    row = {
        "row": name,
        "p50_ms": round(pct(samples, 0.5) * 1e3, 2),
        "p99_ms": round(pct(samples, 0.99) * 1e3, 2),
        "fps": round(len(samples) / sum(samples), 1),
        "frame_kb": None if size is None else round(size / 1024, 1),
    }
    return {**row, **extra}


def _fresh(fresh: int, n: int) -> int:
    return round(100 * fresh / n)


class Hud:
    """HUD's side, each section a fresh `_hud_computer.py` under the peers python; or
    why it cannot run (then its rows carry that reason instead of numbers)."""

    def __init__(self, python: Path, tmp: Path) -> None:
        self.python, self.tmp = python, tmp
        self.missing = None
        if not python.exists():
            self.missing = f"no peers python at {python} (make peers)"
        elif shutil.which("x11vnc") is None:
            self.missing = "x11vnc is not installed (apt-get install x11vnc)"
        self.env = hud_environ(dict(os.environ), tmp)
        self.runs = 0

    def run(self, section: str, **params: Any) -> dict[str, Any]:
        if self.missing:
            return {"error": self.missing}
        self.runs += 1
        out, log = self.tmp / f"hud.{self.runs}.json", self.tmp / f"hud.{self.runs}.log"
        argv = [str(self.python), str(BENCH / "_hud_computer.py"), "--section", section]
        argv += ["--params", json.dumps(params), "--out", str(out)]
        try:
            with open(log, "wb") as sink:
                subprocess.run(
                    argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink,
                    env=self.env, cwd=self.tmp, timeout=1800,
                )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        if not out.exists():
            tail = log.read_text(errors="replace").strip().splitlines()[-1:]
            return {"error": f"_hud_computer.py {section} left no results: {tail}"}
        result: dict[str, Any] = json.loads(out.read_text())["section"]
        return result


def _hud_row(name: str, got: dict[str, Any]) -> dict[str, Any]:
    if "error" in got:
        return {"row": name, "p50_ms": "n/a", "note": got["error"][:200]}
    row = _row(name, got["samples"], int(statistics.median(got["sizes"])))
    return {**row, "fresh_%": _fresh(got["fresh"], len(got["samples"]))}


async def floor(width: int, height: int, frames: int) -> dict[str, Any]:
    """XShmGetImage + PNG in this process, on a desktop showing the same canvas."""
    async with DesktopServer(width, height) as desktop:
        await _show_canvas(desktop, width, height)
        x = desktop._live()  # the capture primitive itself, without the action server
        from proctor.env._frames import encode_bgrx

        samples, size = [], 0
        for _ in range(frames):
            t0 = time.perf_counter()
            data, _, _ = encode_bgrx(x.capture(width, height), width, height, FrameOptions())
            samples.append(time.perf_counter() - t0)
            size = len(data)
        xwd = _xwd_samples(desktop, max(10, frames // 10))
    return {"floor": _row(f"floor {width}x{height}", samples, size), "xwd": xwd}


def _xwd_samples(desktop: DesktopServer, n: int) -> dict[str, Any] | None:
    if shutil.which("xwd") is None:
        return None
    from PIL import Image

    env = {**os.environ, **desktop.environ}
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        raw = subprocess.run(["xwd", "-root", "-silent"], env=env, capture_output=True).stdout
        header = int.from_bytes(raw[:4], "big")
        w, h = int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
        ncolors = int.from_bytes(raw[76:80], "big")
        pixels = raw[header + ncolors * 12 :]
        image = Image.frombuffer("RGB", (w, h), pixels, "raw", "BGRX", 0, 1)
        image.save(io.BytesIO(), "PNG", compress_level=1)
        samples.append(time.perf_counter() - t0)
    return _row(f"xwd + PNG {desktop.width}x{desktop.height}", samples)


async def _show_canvas(desktop: DesktopServer, width: int, height: int) -> None:
    ready = Path(desktop.environ["XAUTHORITY"]).parent / "ready"
    await desktop.launch([sys.executable, str(APP), str(width), str(height), str(ready)])
    for _ in range(400):  # 20 s
        if ready.exists():
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)


async def through_tunnel(
    width: int, height: int, frames: int, frame: dict[str, Any], rollouts: int = 1
) -> tuple[list[float], list[int], int, list[dict[str, Any]]]:
    """`rollouts` concurrent rollouts, each doing `frames` click-to-frame round trips;
    the samples, frame sizes, how many frames differ from the one before, the grades."""
    samples: list[float] = []
    sizes: list[int] = []
    fresh = 0

    async def agent(run: Run) -> None:
        nonlocal fresh
        rng = random.Random(run.trace_id)
        last = None
        async with DesktopClient(run.binding("desktop").url, **frame) as client:
            for i in range(frames + 5):
                action = {"type": "click", "x": rng.randrange(width), "y": rng.randrange(height)}
                t0 = time.perf_counter()
                got = await client.act([action])
                assert got is not None
                if i >= 5:  # the first few warm the connection and the encoder
                    samples.append(time.perf_counter() - t0)
                    sizes.append(len(got.data))
                    fresh += got.data != last
                last = got.data
        run.answer = "done"

    runtime = SubprocessRuntime(ENV, env={"PROCTOR_BENCH_DESKTOP": f"{width}x{height}"})
    async with runtime:
        runs = await asyncio.gather(
            *(
                rollout(Task(env="computer-bench", id="frames"), agent, runtime=runtime)
                for _ in range(rollouts)
            )
        )
    for run in runs:
        if run.error is not None:
            raise SystemExit(f"rollout failed: {run.error}")
    return samples, sizes, fresh, [run.grade.info for run in runs if run.grade is not None]


HUD_MODES = (("hud png", False), ("hud png x11vnc -threads", True))


async def main(args: argparse.Namespace, hud: Hud) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    versus: list[dict[str, Any]] = []
    for width, height in SIZES:
        size = f"{width}x{height}"
        measured = await floor(width, height, args.frames)
        rows.append(measured["floor"])
        if measured["xwd"] is not None:
            rows.append(measured["xwd"])
        for name, frame in (("png", {}), ("jpeg q70 x0.5", JPEG)):
            samples, sizes, fresh, _ = await through_tunnel(width, height, args.frames, frame)
            row = _row(f"proctor {name} {size}", samples, int(statistics.median(sizes)))
            row["x_floor"] = round(row["p50_ms"] / measured["floor"]["p50_ms"], 2)
            row["fresh_%"] = _fresh(fresh, len(samples))
            rows.append(row)
            if name == "png":
                png = row
        for name, threads in HUD_MODES:
            got = hud.run("frames", width=width, height=height, frames=args.frames, threads=threads)
            rows.append(_hud_row(f"{name} {size}", got))
        versus += _versus(size, png, rows[-1], rows[-2])
    _, _, _, infos = await through_tunnel(1280, 800, args.memory_frames, {})
    memory = {k.replace("_kb", "_mb"): round(v / 1024, 1) for k, v in infos[0].items()}
    hud_memory: dict[str, Any] = {}
    for name, threads in HUD_MODES:
        got = hud.run(
            "frames", width=1280, height=800, frames=args.memory_frames, threads=threads, rss=True
        )
        hud_memory[name] = got.get("error") or {
            k.replace("_kb", "_mb"): round(v / 1024, 1) for k, v in got["rss_kb"].items()
        }
    concurrency = []
    for n in args.concurrency:
        t0 = time.perf_counter()
        samples, _, _, _ = await through_tunnel(1280, 800, args.frames // 2, {}, rollouts=n)
        wall = time.perf_counter() - t0
        row: dict[str, Any] = {
            "desktops": n,
            "p50_ms": round(pct(samples, 0.5) * 1e3, 2),
            "p99_ms": round(pct(samples, 0.99) * 1e3, 2),
            "frames_per_s_total": round(len(samples) / wall, 1),
        }
        got = hud.run(
            "concurrency", width=1280, height=800, frames=args.frames // 2, threads=True, n=n
        )
        if "error" in got:
            row["hud"] = got["error"][:120]
        else:
            hud_p50 = pct(got["samples"], 0.5) * 1e3
            hud_fps = len(got["samples"]) / got["wall_s"]
            row["hud_p50_ms"] = round(hud_p50, 2)
            row["hud_p99_ms"] = round(pct(got["samples"], 0.99) * 1e3, 2)
            row["hud_frames_per_s_total"] = round(hud_fps, 1)
            row["p50_vs_hud"] = round(row["p50_ms"] / hud_p50, 2)
            row["fps_vs_hud"] = round(row["frames_per_s_total"] / hud_fps, 2)
        row["load"] = round(os.getloadavg()[0], 2)
        concurrency.append(row)
    return {
        "rows": rows,
        "versus": versus,
        "memory_mb_after_frames": memory,
        "hud_memory_mb_after_frames": hud_memory,
        "concurrency": concurrency,
    }


def _versus(
    size: str, proctor: dict[str, Any], fresh: dict[str, Any], stale: dict[str, Any]
) -> list[dict[str, Any]]:
    """proctor / HUD per figure: against x11vnc -threads (frames that show the clicks),
    and against x11vnc as HUD documents it."""
    out = []
    for key, label in (("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("fps", "frames/s")):
        row: dict[str, Any] = {"png": f"{label} {size}", "proctor": proctor[key]}
        for name, hud in (("hud -threads", fresh), ("hud documented", stale)):
            value = hud.get(key, "n/a")
            row[name] = value
            ok = isinstance(value, float) and value > 0
            row[f"proctor/{name}"] = round(proctor[key] / value, 2) if ok else "n/a"
        out.append(row)
    return out


def _memory_line(result: dict[str, Any]) -> str:
    """The desktop's side, proctor's server + Xvfb against x11vnc + Xvfb (HUD encodes in
    the agent's process, listed above as client)."""
    mine = result["memory_mb_after_frames"]
    proctor = mine["server_rss_mb"] + mine["xvfb_rss_mb"]
    hud = result["hud_memory_mb_after_frames"].get("hud png x11vnc -threads")
    if not isinstance(hud, dict):
        return f"  desktop side: proctor {proctor:.1f} MB; HUD n/a"
    theirs = hud["x11vnc_rss_mb"] + hud["xvfb_rss_mb"]
    return (
        f"  desktop side (server + Xvfb vs x11vnc -threads + Xvfb): proctor {proctor:.1f} MB,"
        f" HUD {theirs:.1f} MB, proctor/HUD {proctor / theirs:.2f}"
    )


def _desktops_held(rows: list[dict[str, Any]], key: str) -> int | None:
    held = [r["desktops"] for r in rows if isinstance(r.get(key), float) and r[key] < 100]
    return max(held) if held else None


def _table(rows: list[dict[str, Any]]) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    widths = {k: max(len(k), *(len(str(r.get(k, ""))) for r in rows)) for k in keys}
    lines = ["  ".join(k.ljust(widths[k]) for k in keys)]
    lines += ["  ".join(str(r.get(k, "")).ljust(widths[k]) for k in keys) for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--memory-frames", type=int, default=1000)
    parser.add_argument(
        "--concurrency", type=lambda s: [int(n) for n in s.split(",")], default=[1, 2, 4, 8]
    )
    parser.add_argument("--peers-python", type=Path, default=PEERS, help="HUD's python")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="proctor-bench-computer-") as tmp:
        hud = Hud(args.peers_python.absolute(), Path(tmp))  # its children run elsewhere
        result = asyncio.run(main(args, hud))
    after = os.getloadavg()
    print(f"cores: {os.cpu_count()}  load before: {before[0]:.2f}  after: {after[0]:.2f}")
    print(f"HUD: {hud.missing or f'hud 0.6.21 under {args.peers_python}, x11vnc on 127.0.0.1'}\n")
    print("proctor / HUD, PNG click-to-frame, same run (times: < 1 is proctor faster)")
    print(_table(result["versus"]), "\n")
    print(_table(result["rows"]), "\n")
    print(f"after {args.memory_frames} PNG frames at 1280x800 (MB):")
    print("  proctor:", result["memory_mb_after_frames"])
    for name, got in result["hud_memory_mb_after_frames"].items():
        print(f"  {name}:", got)
    print(_memory_line(result))
    print()
    print(_table(result["concurrency"]))
    held = {k: _desktops_held(result["concurrency"], k) or "none" for k in ("p50_ms", "hud_p50_ms")}
    print(
        f"desktops held with p50 under 100 ms: proctor {held['p50_ms']}, "
        f"HUD (x11vnc -threads) {held['hud_p50_ms']}"
    )
    if args.json:
        args.json.write_text(
            json.dumps({**result, "load_before": before, "load_after": after}, indent=1)
        )
