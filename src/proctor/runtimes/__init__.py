"""Runtimes: where an environment is brought up for a rollout."""

from ._base import Endpoint, Provider, ProviderLike, Runtime
from ._local import LocalRuntime, find_environment
from ._ray import RayRuntime
from ._subprocess import SubprocessRuntime

__all__ = [
    "Endpoint",
    "LocalRuntime",
    "Provider",
    "ProviderLike",
    "RayRuntime",
    "Runtime",
    "SubprocessRuntime",
    "find_environment",
]
