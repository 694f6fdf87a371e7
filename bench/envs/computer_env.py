"""The desktop `bench/computer.py` drives: a busy Tk canvas filling the screen
(`computer_app.py`).

Its size comes from `PROCTOR_BENCH_DESKTOP` (`1280x800`). Each click draws a rectangle
where it lands, so every frame differs from the last (no unchanged-screen shortcut);
the canvas holds text and colour like a real desktop, so PNG frames are of real size.
The grade reports the server's and Xvfb's resident memory after the agent's frames.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import sys
import tempfile
from pathlib import Path

from proctor import Environment, Grade

WIDTH, HEIGHT = map(int, os.environ.get("PROCTOR_BENCH_DESKTOP", "1280x800").split("x"))

APP = Path(__file__).resolve().parent / "computer_app.py"  # the Tk canvas itself

env = Environment("computer-bench")
desktop = env.add_desktop(WIDTH, HEIGHT)


def _rss_kb(pid: int | str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@env.template
async def frames():
    folder = Path(tempfile.mkdtemp(prefix="computer-bench-"))
    ready = folder / "ready"
    app = await desktop.launch([sys.executable, str(APP), str(WIDTH), str(HEIGHT), str(ready)])
    try:
        for _ in range(400):  # 20 s
            if ready.exists():
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        yield "click around"
        xvfb = desktop._procs[0].pid
        info = {
            "server_rss_kb": _rss_kb("self"),
            "server_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "xvfb_rss_kb": _rss_kb(xvfb),
        }
        yield Grade(reward=1.0, info=info)
    finally:
        app.kill()
        await app.wait()
        shutil.rmtree(folder, ignore_errors=True)
