"""`AsyncResource`: something started, then closed with `aclose()`; or used as `async with`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

__all__ = ["AsyncResource"]


class AsyncResource(ABC):
    """A resource closed by `aclose()`; `async with` starts it and closes it on the way out.

    Entering calls `start()` (nothing by default: binding a port, starting a child are
    a subclass's) and returns the resource itself; leaving calls `aclose()`, whatever
    the way out.
    """

    __slots__ = ()

    async def start(self) -> None:  # noqa: B027 (a hook: most resources start nothing)
        """Bring the resource up; `async with` calls it on entering."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release everything the resource holds."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
