"""Two `web` rows: order on a local page in the rollout's browser.

`proctor run examples/computer/web/tasks.py --max-concurrent 1` runs them offline with
`OfflineAgent` (a `ComputerAgent` on a scripted fake model);
`--agent examples/computer/web/policy.py:PlaywrightAgent` solves them with Playwright
over CDP instead. Rollouts in the default local runtime share one browser tab, hence
one at a time; `--runtime subprocess` gives each rollout a browser of its own. The
sibling imports work because the loader puts this folder on `sys.path`.
"""

from __future__ import annotations

from policy import OfflineAgent as agent

from env import order, web
from proctor import Taskset

__all__ = ["agent", "tasks", "web"]

tasks = Taskset(
    "web",
    [order(name="Grace Hopper", size="large"), order(name="Edsger Dijkstra", size="small")],
)
