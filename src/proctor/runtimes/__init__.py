"""Runtimes: where an environment is brought up for a rollout."""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "TOKEN_ENV",
    "ComposeRuntime",
    "ContainerRuntime",
    "ContainerSpec",
    "Endpoint",
    "LocalRuntime",
    "RayRuntime",
    "Runtime",
    "RuntimeLike",
    "SandboxRuntime",
    "SubprocessRuntime",
    "SubstrateEntry",
    "UrlRuntime",
    "find_environment",
    "python_image",
]
_EXPORTS = {
    "TOKEN_ENV": "._subprocess",
    "ComposeRuntime": "._compose",
    "ContainerRuntime": "._container",
    "ContainerSpec": "._container",
    "Endpoint": "._base",
    "LocalRuntime": "._local",
    "RayRuntime": "._ray",
    "Runtime": "._base",
    "RuntimeLike": "._base",
    "SandboxRuntime": "._sandbox",
    "SubprocessRuntime": "._subprocess",
    "SubstrateEntry": "._enter",
    "UrlRuntime": "._base",
    "find_environment": "._local",
    "python_image": "._image",
}

if TYPE_CHECKING:
    from ._base import Endpoint, Runtime, RuntimeLike, UrlRuntime
    from ._compose import ComposeRuntime
    from ._container import ContainerRuntime, ContainerSpec
    from ._enter import SubstrateEntry
    from ._image import python_image
    from ._local import LocalRuntime, find_environment
    from ._ray import RayRuntime
    from ._sandbox import SandboxRuntime
    from ._subprocess import TOKEN_ENV, SubprocessRuntime
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        _EXPORTS,
        deprecated={
            "Provider": "proctor.runtimes.Runtime",
            "ProviderLike": "proctor.runtimes.RuntimeLike",
        },
    )
