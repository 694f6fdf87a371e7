"""Runtimes: where an environment is brought up for a rollout."""

from .._public import publish
from ._base import Endpoint, Runtime, RuntimeLike, UrlRuntime
from ._container import ContainerRuntime, ContainerSpec
from ._image import python_image
from ._local import LocalRuntime, find_environment
from ._ray import RayRuntime
from ._sandbox import SandboxRuntime
from ._subprocess import TOKEN_ENV, SubprocessRuntime

__all__ = [
    "TOKEN_ENV",
    "ContainerRuntime",
    "ContainerSpec",
    "Endpoint",
    "LocalRuntime",
    "RayRuntime",
    "Runtime",
    "RuntimeLike",
    "SandboxRuntime",
    "SubprocessRuntime",
    "UrlRuntime",
    "find_environment",
    "python_image",
]

publish(
    globals(),
    __all__,
    __name__,
    deprecated={
        "Provider": "proctor.runtimes.Runtime",
        "ProviderLike": "proctor.runtimes.RuntimeLike",
    },
)
