"""The runtime a batch config names (`build_runtime`), built but not yet entered."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .._errors import BatchConfigError
from ._config import (
    BatchConfig,
    ComposeRuntimeConfig,
    ConfigProblem,
    ContainerRuntimeConfig,
    RayRuntimeConfig,
    SandboxRuntimeConfig,
    SubprocessRuntimeConfig,
    UrlRuntimeConfig,
)

if TYPE_CHECKING:
    from ..runtimes import Runtime

__all__ = ["build_runtime"]


def build_runtime(
    config: BatchConfig, *, batch: str | None = None, log: str | None = None
) -> Runtime:
    """The runtime provider `config.runtime` names, not yet entered.

    Args:
        config: the batch config; paths resolve against its folder.
        batch: the label of the batch's substrates (containers, Ray actors, and
            `PROCTOR_BATCH_ID` in every server child's environment).
        log: the file subprocess and sandbox servers' output is appended to.

    Raises:
        BatchConfigError: the runtime needs an environment source on this machine and
            the config names none, or a `token_env` is unset.
    """
    rt = config.runtime
    if isinstance(rt, UrlRuntimeConfig):
        return _url_runtime(rt)
    if isinstance(rt, ContainerRuntimeConfig):
        return _container_runtime(config, rt, batch)
    if isinstance(rt, ComposeRuntimeConfig):
        return _compose_runtime(config, rt, batch)
    source = config.env_source()
    if source is None:
        raise BatchConfigError(
            [
                ConfigProblem(
                    path="taskset.env_source",
                    message=f"the {rt.kind} runtime needs the environment's Python source",
                )
            ]
        )
    return _source_runtime(config, source, batch, log)


def _labelled(env: dict[str, str], batch: str | None) -> dict[str, str]:
    """The child's extra environment, with the batch label `reconcile` looks for."""
    from ._reconcile import BATCH_ENV

    return env if batch is None else {**env, BATCH_ENV: batch}


def _source_runtime(
    config: BatchConfig, source: str, batch: str | None, log: str | None
) -> Runtime:
    from ..runtimes import LocalRuntime, RayRuntime, SandboxRuntime, SubprocessRuntime

    rt, name = config.runtime, config.taskset.env
    if isinstance(rt, SubprocessRuntimeConfig):
        return SubprocessRuntime(
            source, python=rt.python, env=_labelled(rt.env, batch), env_name=name,
            command=rt.command, cwd=rt.cwd and config.resolve(rt.cwd),
            startup_timeout=rt.startup_timeout, stop_timeout=rt.stop_timeout, warm=rt.warm,
            log=log,
        )  # fmt: skip
    if isinstance(rt, SandboxRuntimeConfig):
        return SandboxRuntime(
            source, env_name=name, network=rt.network, warm=rt.warm, python=rt.python,
            env=_labelled(rt.env, batch), binds=[config.resolve(p) for p in rt.binds],
            writable=[config.resolve(p) for p in rt.writable], limits=rt.limits,
            startup_timeout=rt.startup_timeout, stop_timeout=rt.stop_timeout, bwrap=rt.bwrap,
            log=log,
        )  # fmt: skip
    if isinstance(rt, RayRuntimeConfig):
        return RayRuntime(
            source, address=rt.address, resources=rt.resources, batch=batch,
            startup_timeout=rt.startup_timeout, stop_timeout=rt.stop_timeout,
        )  # fmt: skip
    return LocalRuntime(source, env_name=name)


def _container_runtime(
    config: BatchConfig, rt: ContainerRuntimeConfig, batch: str | None
) -> Runtime:
    from ..runtimes import ContainerRuntime

    extra = {} if rt.ulimits is None else {"ulimits": rt.ulimits}
    return ContainerRuntime(
        rt.image, rt.source, command=rt.command, env_name=rt.env_name or config.taskset.env,
        engine=rt.engine, network=rt.network, port=rt.port, env=_labelled(rt.env, batch),
        mounts=rt.mounts,
        resources=rt.resources, batch=batch, labels=rt.labels, oci_runtime=rt.oci_runtime,
        args=rt.args, startup_timeout=rt.startup_timeout, stop_timeout=rt.stop_timeout,
        **extra,
    )  # fmt: skip


def _compose_runtime(config: BatchConfig, rt: ComposeRuntimeConfig, batch: str | None) -> Runtime:
    from ..runtimes import ComposeRuntime

    try:
        return ComposeRuntime(
            rt.file and config.resolve(rt.file), rt.source, command=rt.command,
            env_name=rt.env_name or config.taskset.env, main=rt.main, engine=rt.engine,
            variables=rt.variables, capabilities=rt.capabilities, resources=rt.resources,
            batch=batch, labels=rt.labels, oci_runtime=rt.oci_runtime,
            startup_timeout=rt.startup_timeout, stop_timeout=rt.stop_timeout,
            build_timeout=rt.build_timeout,
        )  # fmt: skip
    except ValueError as exc:
        raise BatchConfigError([ConfigProblem(path="runtime.file", message=str(exc))]) from None


def _url_runtime(rt: UrlRuntimeConfig) -> Runtime:
    from ..runtimes import UrlRuntime

    token = os.environ.get(rt.token_env) if rt.token_env else None
    if rt.token_env and not token:
        message = f"{rt.token_env} is not set (the server's token)"
        raise BatchConfigError([ConfigProblem(path="runtime.token_env", message=message)])
    return UrlRuntime(rt.url, token=token)
