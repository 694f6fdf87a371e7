"""The `form` environment: a Tk sign-up form on a virtual desktop, graded from the
form's saved state.

Each rollout gets a desktop (Xvfb, 640x400) with the app of `app.py` open on it; the
task asks for a name, an email and the Subscribe box, then Save. The grade reads the
JSON file the app saved: one subscore per field, the reward their mean.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from proctor import Environment, Grade

__all__ = ["APP", "form", "sign_up"]

APP = Path(__file__).with_name("app.py")
"""The Tk application, run from this file in the rollout's own folder."""

form = Environment("form")
desktop = form.add_desktop(640, 400)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


async def _poll(path: Path, done: Any, within: float) -> dict[str, Any] | None:
    """The state file's content once `done(state)` holds, else its last within `within`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    state = _read(path)
    while not (state is not None and done(state)) and loop.time() < deadline:
        await asyncio.sleep(0.05)
        state = _read(path)
    return state


@form.template
async def sign_up(name: str, email: str, subscribe: bool) -> AsyncGenerator[Any, Any]:
    """Fill in the sign-up form and save it."""
    folder = Path(tempfile.mkdtemp(prefix="form-example-"))
    state_file = folder / "state.json"
    app = await desktop.launch([sys.executable, str(APP), str(state_file)], cwd=str(folder))
    try:
        if await _poll(state_file, lambda s: True, within=30.0) is None:
            raise RuntimeError(f"the form app did not start (no {state_file})")
        box = "tick" if subscribe else "leave unticked"
        yield (
            f'Sign up in the form on the screen: name "{name}", email "{email}", '
            f"{box} the Subscribe box, then press Save."
        )
        want = {"name": name, "email": email, "subscribe": subscribe}
        # a click on Save may still be in the app's event queue: give it a moment
        saved = await _poll(state_file, lambda s: s.get("saved") is True, within=5.0) or {}
        scores = {key: float(saved.get(key) == value) for key, value in want.items()}
        yield Grade(  # the reward: the mean of the subscores
            subscores=[{"name": key, "value": value} for key, value in scores.items()],
            info={"saved": saved},
        )
    finally:
        app.kill()
        await app.wait()
        shutil.rmtree(folder, ignore_errors=True)
