"""The `support` environment: a customer writes in about a broken order; the agent must
talk to them (a simulated user) to learn which order it is, confirm, and refund it.

The user is scripted by default (`user="scripted"`); `user="model"` plays the customer
with a model given a persona and a goal (`ModelUser`): the run's user model, which the
driver serves through a proxy session of the rollout's own (`proctor run --user-model
MODEL`, a batch's `user_model`), so this process never holds a key (`docs/users.md`).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from proctor import Environment
from proctor.env import Dialogue, Message, ModelUser, UserFn, scripted
from proctor.records import Grade, SubScore

__all__ = ["OPENING", "refund", "support"]

support = Environment("support")
users = support.add_user()

OPENING = "Hi, something I ordered arrived broken. Can you help?"


@support.template
async def refund(
    order: str, item: str, user: str = "scripted"
) -> AsyncGenerator[dict[str, Any] | Grade, str]:
    """Refund a customer's broken order, found out by talking to the customer."""
    dialogue = users.open(_customer(order, item, user), opening=OPENING)
    answer = yield {
        "prompt": (
            "You are a support agent. A customer wrote: "
            f"{OPENING!r}\nTalk to them to find the order number and confirm before you"
            " refund. When done, answer `REFUND <order number>`."
        ),
        "bindings": {"user": dialogue.binding},
    }
    users.close(dialogue)
    yield _grade(dialogue, order, answer)


def _customer(order: str, item: str, kind: str) -> UserFn:
    if kind == "scripted":
        return scripted([f"It's order {order}: the {item} arrived broken.", "Yes, please."])
    if kind == "model":
        return ModelUser(  # no endpoint: the run's user model
            persona=f"a customer whose order {order} (a {item}) arrived broken",
            goal=f"get order {order} refunded; confirm when asked",
        )
    raise ValueError(f"user must be 'scripted' or 'model', not {kind!r}")


@refund.metric
def customer_messages(dialogue: Sequence[Message]) -> float:
    """How many times the customer spoke (the opening included): `dialogue` is the
    episode's whole conversation, both sides."""
    return float(sum(1 for m in dialogue if m.role == "user"))


def _grade(dialogue: Dialogue, order: str, answer: object) -> Grade:
    """Full marks for asking, confirming the right order and refunding it."""
    said = [m.text for m in dialogue.messages if m.role == "agent"]
    asked = 1.0 if said else 0.0
    confirmed = 1.0 if any(re.search(rf"\b{order}\b", text) for text in said) else 0.0
    refunded = 1.0 if str(answer).strip() == f"REFUND {order}" else 0.0
    parts = {"asked": asked, "confirmed": confirmed, "refunded": refunded}
    return Grade(
        reward=sum(parts.values()) / len(parts),
        subscores=[SubScore(name, value, 1.0) for name, value in parts.items()],
        info={"dialogue": dialogue.to_list()},
    )
