"""proctor: build agent environments, run graded and traced rollouts at scale.

The public API is re-exported here and loaded lazily, so `import proctor` stays cheap
(pydantic loads only when a `Task` or `Taskset` is first touched).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    # errors
    "ChannelClosed": "._errors",
    "ChannelError": "._errors",
    "ConnectError": "._errors",
    "ConnectTimeout": "._errors",
    "ConnectionLost": "._errors",
    "HttpError": "._errors",
    "ModelError": "._errors",
    "ModelRequestError": "._errors",
    "PayloadTooLarge": "._errors",
    "ProctorError": "._errors",
    "ProtocolError": "._errors",
    "RemoteError": "._errors",
    "RetriesExhausted": "._errors",
    "RolloutError": "._errors",
    "RolloutTimeout": "._errors",
    "RuntimeLaunchError": "._errors",
    "SourceError": "._errors",
    "TaskCancelled": "._errors",
    "TaskError": "._errors",
    "TasksetError": "._errors",
    "TeardownError": "._errors",
    "TemplateError": "._errors",
    "WorkerLost": "._errors",
    # authoring
    "Answer": ".env",
    "Capability": ".env",
    "Environment": ".env",
    "Template": ".env",
    "graders": ".env",
    # records and tasks
    "Grade": ".records",
    "Step": ".records",
    "SubScore": ".records",
    "Task": ".records",
    "Trace": ".records",
    "Taskset": ".tasks",
    # wire
    "Client": ".channel",
    "Manifest": ".channel",
    "Server": ".channel",
    "connect": ".channel",
    # runtimes
    "ContainerRuntime": ".runtimes",
    "Endpoint": ".runtimes",
    "LocalRuntime": ".runtimes",
    "Provider": ".runtimes",
    "RayRuntime": ".runtimes",
    "Runtime": ".runtimes",
    "SandboxRuntime": ".runtimes",
    "SubprocessRuntime": ".runtimes",
    # engine
    "Job": ".engine",
    "RayExecutor": ".engine",
    "Timeouts": ".engine",
    "rollout": ".engine",
    # agents
    "Agent": ".agents",
    "CommandAgent": ".agents",
    "Run": ".agents",
    "ScriptedAgent": ".agents",
    "ToolAgent": ".agents",
    "agent_from_fn": ".agents",
    # models and the interception proxy
    "InterceptionProxy": ".proxy",
    "Limits": ".proxy",
    "ModelClient": ".models",
    "RetryPolicy": ".models",
    "model_client": ".models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'proctor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:
    from ._errors import (
        ChannelClosed,
        ChannelError,
        ConnectError,
        ConnectionLost,
        ConnectTimeout,
        HttpError,
        ModelError,
        ModelRequestError,
        PayloadTooLarge,
        ProctorError,
        ProtocolError,
        RemoteError,
        RetriesExhausted,
        RolloutError,
        RolloutTimeout,
        RuntimeLaunchError,
        SourceError,
        TaskCancelled,
        TaskError,
        TasksetError,
        TeardownError,
        TemplateError,
        WorkerLost,
    )
    from .agents import Agent, CommandAgent, Run, ScriptedAgent, ToolAgent, agent_from_fn
    from .channel import Client, Manifest, Server, connect
    from .engine import Job, RayExecutor, Timeouts, rollout
    from .env import Answer, Capability, Environment, Template, graders
    from .models import ModelClient, RetryPolicy, model_client
    from .proxy import InterceptionProxy, Limits
    from .records import Grade, Step, SubScore, Task, Trace
    from .runtimes import (
        ContainerRuntime,
        Endpoint,
        LocalRuntime,
        Provider,
        RayRuntime,
        Runtime,
        SandboxRuntime,
        SubprocessRuntime,
    )
    from .tasks import Taskset
