"""Two `form` rows: fill in the Tk sign-up form on a desktop and save it.

`proctor run examples/computer/form/tasks.py --max-concurrent 1` runs them offline with
`OfflineAgent` (a `ComputerAgent` on a scripted fake model). Rollouts in the default
local runtime share one display, hence one at a time; `--runtime subprocess` gives each
rollout a display of its own. The sibling imports work because the loader puts this
folder on `sys.path`.
"""

from __future__ import annotations

from policy import OfflineAgent as agent

from env import form, sign_up
from proctor import Taskset

__all__ = ["agent", "form", "tasks"]

tasks = Taskset(
    "form",
    [
        sign_up(name="Ada Lovelace", email="ada@example.org", subscribe=True),
        sign_up(name="Alan Turing", email="alan@example.org", subscribe=False),
    ],
)
