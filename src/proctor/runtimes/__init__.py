"""Runtimes: where an environment is brought up for a rollout."""

from ._base import Endpoint, Provider, ProviderLike, Runtime
from ._container import ContainerRuntime
from ._image import python_image
from ._local import LocalRuntime, find_environment
from ._ray import RayRuntime
from ._sandbox import SandboxRuntime
from ._subprocess import SubprocessRuntime

__all__ = [
    "ContainerRuntime",
    "Endpoint",
    "LocalRuntime",
    "Provider",
    "ProviderLike",
    "RayRuntime",
    "Runtime",
    "SandboxRuntime",
    "SubprocessRuntime",
    "find_environment",
    "python_image",
]
