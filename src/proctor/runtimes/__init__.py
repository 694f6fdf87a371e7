"""Runtimes: where an environment is brought up for a rollout."""

from ._base import Endpoint, Provider, ProviderLike, Runtime
from ._local import LocalRuntime, find_environment
from ._subprocess import SubprocessRuntime

__all__ = [
    "Endpoint",
    "LocalRuntime",
    "Provider",
    "ProviderLike",
    "Runtime",
    "SubprocessRuntime",
    "find_environment",
]
