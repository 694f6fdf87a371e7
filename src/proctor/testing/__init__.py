"""Test helpers shipped with proctor: conformance suites and in-memory fakes.

`check_runtime(provider, task)` holds any provider to the runtime contract (up,
reachable, graded, and torn down on success, error, timeout and cancellation);
`check_env_server(url)` holds any server to control channel v1. Both drive
`conformance_env`, an environment shipped here for the purpose. `memory_pair`
connects two asyncio protocols without a socket.
"""

from ..channel._memory import memory_pair
from . import conformance_env
from ._check_runtime import RuntimeReport, check_runtime
from ._check_server import check_env_server

__all__ = [
    "RuntimeReport",
    "check_env_server",
    "check_runtime",
    "conformance_env",
    "memory_pair",
]
