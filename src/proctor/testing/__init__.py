"""Test helpers shipped with proctor: conformance suites and in-memory fakes.

`check_runtime(runtime, task)` holds any runtime to the contract (up,
reachable, graded, and torn down on success, error, timeout and cancellation);
`check_env_server(url)` holds any server to control channel v1. Both drive
`conformance_env`, an environment shipped here for the purpose. `memory_pair`
connects two asyncio protocols without a socket; `FakeClock` makes retry waits
instant. `FakeModelServer` speaks the OpenAI and Anthropic wire formats from scripted
`Reply`s and injects `Fault`s on command; `FakeBedrockServer` adds Bedrock Converse,
its model catalog and SigV4-signed chat completions, each signature checked.
"""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "RUNTIME_CHECKS",
    "FakeBedrockServer",
    "FakeClock",
    "FakeImage",
    "FakeModelServer",
    "FakeRequest",
    "FakeToolCall",
    "Fault",
    "Reply",
    "RuntimeReport",
    "check_env_server",
    "check_runtime",
    "conformance_env",
    "memory_pair",
]
_EXPORTS = {
    "RUNTIME_CHECKS": "._check_runtime",
    "FakeBedrockServer": "._fake_bedrock",
    "FakeClock": "._clock",
    "FakeImage": "._fake_model_images",
    "FakeModelServer": "._fake_model",
    "FakeRequest": "._fake_model_request",
    "FakeToolCall": "._fake_model_reply",
    "Fault": "._fake_model_reply",
    "Reply": "._fake_model_reply",
    "RuntimeReport": "._check_runtime",
    "check_env_server": "._check_server",
    "check_runtime": "._check_runtime",
    "conformance_env": ".conformance_env",
    "memory_pair": "..channel._memory",
}

if TYPE_CHECKING:
    from ..channel._memory import memory_pair
    from . import conformance_env
    from ._check_runtime import RUNTIME_CHECKS, RuntimeReport, check_runtime
    from ._check_server import check_env_server
    from ._clock import FakeClock
    from ._fake_bedrock import FakeBedrockServer
    from ._fake_model import FakeModelServer
    from ._fake_model_images import FakeImage
    from ._fake_model_reply import FakeToolCall, Fault, Reply
    from ._fake_model_request import FakeRequest
else:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
