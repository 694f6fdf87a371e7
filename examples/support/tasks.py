"""Two `support` rows, one per kind of simulated user, and the offline agent.

`proctor run examples/support/tasks.py` runs the scripted customer;
`SUPPORT_MODEL_USER=1 proctor run examples/support/tasks.py --user-model MODEL` adds
the customer a model plays (a batch: `user_model` in its config).
"""

from __future__ import annotations

import os

from policy import OfflineAgent as agent

from env import refund, support
from proctor import Taskset

__all__ = ["agent", "support", "tasks"]

_rows = [refund(order="4417", item="teapot")]
if os.environ.get("SUPPORT_MODEL_USER"):
    _rows.append(refund(order="5120", item="lamp", user="model"))

tasks = Taskset("support", _rows)
