"""`Held`: what one rollout holds open, released in reverse."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any

__all__ = ["Held"]


class Held(AsyncExitStack):
    """A rollout's open resources: its substrate's lease (`lease`, or what releases an
    adopted session), its connection (`link`), then whatever the stack itself was given
    after them (a proxy session, a verifier's substrate and connection).

    `aclose` exits them in reverse, each even when one before it failed or was
    cancelled, as one `AsyncExitStack` would (the last failure raised, the earlier ones
    its context); the two fixed slots spare every rollout the stack's per-entry
    wrappers. Close it with `aclose`, not `async with`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lease: AbstractAsyncContextManager[Any] | None = None
        self.link: AbstractAsyncContextManager[Any] | None = None

    async def aclose(self) -> None:
        """Exit everything held, last entered first; idempotent."""
        link, lease = self.link, self.lease
        self.link = self.lease = None
        failure: BaseException | None = None
        # the stack's own entries (the stdlib's deque of them): none on most rollouts
        if self._exit_callbacks:  # type: ignore[attr-defined]
            try:
                await super().aclose()
            except BaseException as exc:
                failure = exc
        for cm in (link, lease):
            if cm is None:
                continue
            try:
                if failure is None:
                    await cm.__aexit__(None, None, None)
                else:
                    await cm.__aexit__(type(failure), failure, failure.__traceback__)
            except BaseException as exc:
                if failure is not None and exc is not failure:
                    _chain(exc, failure)
                failure = exc
        if failure is not None:
            try:
                raise failure
            finally:
                failure = None  # no frame -> traceback -> exception cycle left behind


def _chain(exc: BaseException, earlier: BaseException) -> None:
    """Make `earlier` the end of `exc`'s context chain (as `AsyncExitStack` does)."""
    seen = {id(exc)}
    while True:
        context = exc.__context__
        if context is None or context is earlier or id(context) in seen:
            break
        seen.add(id(context))
        exc = context
    if exc.__context__ is None:
        exc.__context__ = earlier
