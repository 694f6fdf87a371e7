"""`watched`: every service of a Compose project watched while its rollout runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator

from ._base import exit_cause
from ._compose_project import Project, run

__all__ = ["watched"]

log = logging.getLogger("proctor.runtimes.compose")


@contextlib.asynccontextmanager
async def watched(
    project: Project, main: asyncio.Future[str] | None
) -> AsyncIterator[asyncio.Future[str]]:
    """A future (`Endpoint.died`) that resolves with the cause when `main` dies (its
    own future, `main`) or another service of `project` does, until the block ends.

    Each service started is watched by the engine's `wait` on its container. One that
    exits with code 0 did its job (a migration, a seed) and is not a death; any other
    end is: killed, OOM-killed, or exited with an error code.
    """
    died: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def relay(future: asyncio.Future[str]) -> None:
        if not future.cancelled() and future.exception() is None and not died.done():
            died.set_result(future.result())

    if main is not None:
        main.add_done_callback(relay)
    watchers = [asyncio.create_task(_watch(project, name, died)) for name in project.started]
    try:
        yield died
    finally:
        if main is not None:
            main.remove_done_callback(relay)
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        died.cancel()  # a no-op once it resolved


async def _watch(project: Project, service: str, died: asyncio.Future[str]) -> None:
    """Wait for `service`'s container to end; say how on `died` unless it exited 0."""
    exe, container = project.options.exe, project.container(service)
    code, out, err = await run([*exe, "wait", container], limit=None)
    status = out.strip()
    if code != 0 or not status.lstrip("-").isdigit():  # the engine failed, not the service
        log.warning("project %s: cannot watch service %s: %s", project.id, service, err.strip())
        return
    exit_code = int(status)
    if exit_code == 0 or died.done():
        return
    what = f"project {project.id}: service {service}"
    cause = exit_cause(what, 128 - exit_code if 128 < exit_code < 128 + signal.NSIG else exit_code)
    with contextlib.suppress(Exception):  # the cause stays as good as it can be
        _, oom, _ = await run([*exe, "inspect", "--format", "{{.State.OOMKilled}}", container])
        if oom.strip() == "true":
            cause = f"{what} OOM-killed (out of memory)"
    if not died.done():
        died.set_result(cause)
