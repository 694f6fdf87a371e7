"""The run's user model: a session on the `user` interception proxy for a rollout whose
environment serves simulated users (user/1), so a `ModelUser` asks it (docs/users.md);
a resumed rollout's driver opens its own and hands it over (`tasks.user`)."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from ..agents import JudgeEndpoint, Run
from ..records import Step, Trace

if TYPE_CHECKING:
    from ..proxy import InterceptionProxy

__all__ = ["open_user_model", "renew_user_model"]


def open_user_model(run: Run, proxy: InterceptionProxy, stack: AsyncExitStack) -> None:
    """Open the run's user-model session when its environment serves a `user` capability
    (else none: a rollout without simulated users costs nothing), set `run.user` (sent
    with `tasks.start`) and close it with `stack`.

    Its turns land on the run's trace as they come, marked `data["user"] = True`:
    priced into `run.cost`, left out of training samples like a judge's; each is handed
    to `run.on_user_turn` too, when a recorder set one (a batch keeps it durable).
    """
    client = run.client
    manifest = None if client is None else client.manifest
    if manifest is None or not any(b.protocol == "user" for b in manifest.bindings):
        return
    steps = _UserSteps(run)
    session = proxy.open_session(f"{run.trace_id}-user", trace=Trace(run.trace_id, steps))
    upstream = proxy.upstreams.get("openai")
    model = None if upstream is None else upstream.model
    run.user = JudgeEndpoint(session.base_url, session.secret, model)

    def close() -> None:
        run.user = None
        session.close()
        for step in steps:  # a retried turn's step had its data replaced
            _mark(step)

    stack.callback(close)


async def renew_user_model(run: Run, proxy: InterceptionProxy, stack: AsyncExitStack) -> None:
    """Open the run's user-model session on a continued (adopted) session and send it
    with `tasks.user`: the task's simulated users held the endpoint of the driver that
    started it, which died with it (docs/wire.md)."""
    open_user_model(run, proxy, stack)
    if run.user is not None and run.client is not None:
        await run.client.call("tasks.user", {"user": run.user.to_params()})


class _UserSteps(list["Step"]):
    """The steps the session records: each marked as the user model's and appended to
    the run's trace too, as it comes (the dashboard shows it live), then told to the
    run's `on_user_turn`."""

    def __init__(self, run: Run) -> None:
        super().__init__()
        self.run = run

    def append(self, step: Step) -> None:
        _mark(step)
        super().append(step)
        run = self.run
        run.trace.steps.append(step)
        if run.on_user_turn is not None and step.data is not None:
            run.on_user_turn(step.data)


def _mark(step: Step) -> None:
    step.data = {**(step.data or {}), "user": True}
