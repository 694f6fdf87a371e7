"""Two `support` rows, one per kind of simulated user, and the offline agent.

`proctor run examples/support/tasks.py` runs the scripted customer;
`SUPPORT_USER_URL=http://127.0.0.1:PORT/v1 proctor run examples/support/tasks.py`
adds the customer a model plays (any OpenAI-compatible server, e.g.
`python -m proctor.testing.fake_model` with `fake_user.policy`, as the tests do).
"""

from __future__ import annotations

import os

from policy import OfflineAgent as agent

from env import refund, support
from proctor import Taskset

__all__ = ["agent", "support", "tasks"]

_rows = [refund(order="4417", item="teapot")]
if os.environ.get("SUPPORT_USER_URL"):
    _rows.append(refund(order="5120", item="lamp", user="model"))

tasks = Taskset("support", _rows)
