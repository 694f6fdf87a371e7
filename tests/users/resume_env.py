"""The environment of the resume test: a customer played by the run's user model, and a
shell whose slow command the runner is killed during, between two of the dialogue's
messages."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from proctor import Environment
from proctor.env import ModelUser

env = Environment("chatty", version="1")
env.add_shell()
users = env.add_user()


@env.template
async def refund(order: str) -> AsyncGenerator[Any, Any]:
    customer = ModelUser(persona=f"a customer with order {order}", goal="get a refund")
    dialogue = users.open(customer)
    answer = yield {
        "prompt": "Ask the customer for the order, check the shell, confirm, then answer.",
        "bindings": {"user": dialogue.binding},
    }
    said = [m.text for m in dialogue.messages if m.role == "user"]
    yield 1.0 if answer == f"REFUND {order}" and said == [order, "Yes, refund it."] else 0.0
