"""`AsyncResource`: `async with` starts the resource and closes it, whatever the way out."""

from __future__ import annotations

import pytest

from proctor._resource import AsyncResource


class _Probe(AsyncResource):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def start(self) -> None:
        self.calls.append("start")

    async def aclose(self) -> None:
        self.calls.append("aclose")


async def test_entering_starts_and_returns_the_resource_leaving_closes_it() -> None:
    probe = _Probe()
    async with probe as entered:
        assert entered is probe and probe.calls == ["start"]
    assert probe.calls == ["start", "aclose"]


async def test_an_error_inside_still_closes_and_goes_on() -> None:
    probe = _Probe()
    with pytest.raises(KeyError):
        async with probe:
            raise KeyError("boom")
    assert probe.calls == ["start", "aclose"]


def test_a_resource_must_say_how_it_closes() -> None:
    class Unclosable(AsyncResource):
        pass

    with pytest.raises(TypeError, match="aclose"):
        Unclosable()  # type: ignore[abstract]
