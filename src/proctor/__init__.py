"""proctor: build agent environments, run graded and traced rollouts at scale.

The public API is re-exported here and loaded lazily, so `import proctor` stays cheap
(pydantic loads only when a `Task` or `Taskset` is first touched).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__version__ = "0.1.0"

_EXPORTS = {
    # errors (one tree: see proctor._errors)
    "BatchConfigError": "._errors",
    "ChannelClosed": "._errors",
    "CdpError": "._errors",
    "ChannelError": "._errors",
    "CorruptIndexError": "._errors",
    "ConnectError": "._errors",
    "ConnectTimeout": "._errors",
    "ConnectionLost": "._errors",
    "FrameTooLarge": "._errors",
    "HttpConnectError": "._errors",
    "HttpError": "._errors",
    "HttpReadError": "._errors",
    "HttpTimeout": "._errors",
    "ModelError": "._errors",
    "ModelRequestError": "._errors",
    "ParseError": "._errors",
    "PayloadTooLarge": "._errors",
    "ProctorError": "._errors",
    "ProtocolError": "._errors",
    "RemoteError": "._errors",
    "RetriesExhausted": "._errors",
    "RolloutError": "._errors",
    "RolloutTimeout": "._errors",
    "RuntimeLaunchError": "._errors",
    "SourceError": "._errors",
    "StoreError": "._errors",
    "SubstrateLost": "._errors",
    "TaskCancelled": "._errors",
    "TaskError": "._errors",
    "TasksetError": "._errors",
    "TeardownError": "._errors",
    "TemplateError": "._errors",
    "WorkerLost": "._errors",
    # records: what every layer passes around
    "Grade": ".records",
    "Step": ".records",
    "SubScore": ".records",
    "Task": ".records",
    "Trace": ".records",
    # authoring an environment
    "Answer": ".env",
    "Capability": ".env",
    "Environment": ".env",
    "GroupMember": ".env",
    "Judge": ".env",
    "Template": ".env",
    "WorkspaceDiff": ".env",
    "graders": ".env",
    # the wire
    "EnvClient": ".channel",
    "EnvServer": ".channel",
    "Manifest": ".channel",
    "connect": ".channel",
    # runtimes: where an environment is brought up
    "ComposeRuntime": ".runtimes",
    "ContainerRuntime": ".runtimes",
    "Endpoint": ".runtimes",
    "LocalRuntime": ".runtimes",
    "RayRuntime": ".runtimes",
    "Runtime": ".runtimes",
    "SandboxRuntime": ".runtimes",
    "SubprocessRuntime": ".runtimes",
    "UrlRuntime": ".runtimes",
    # models and the interception proxy
    "ModelClient": ".models",
    "RetryPolicy": ".models",
    "model_client": ".models",
    "InterceptionProxy": ".proxy",
    "ModelLimits": ".proxy",
    # agents and the run they act on
    "Agent": ".agents",
    "CommandAgent": ".agents",
    "ComputerAgent": ".agents",
    "Run": ".agents",
    "ScriptedAgent": ".agents",
    "ToolAgent": ".agents",
    "agent_from_fn": ".agents",
    # the engine and the taskset front
    "Job": ".engine",
    "RayExecutor": ".engine",
    "Timeouts": ".engine",
    "rollout": ".engine",
    "Taskset": ".tasks",
}

__all__ = sorted(_EXPORTS)

# Old names kept for one minor release, each with a warning naming its replacement.
# `Runtime` changed meaning instead: it is the contract now, and `Runtime(url)` raises
# a TypeError naming `UrlRuntime`.
_DEPRECATED = {
    "Client": "proctor.EnvClient",
    "EvaluationResult": "proctor.Grade",
    "Limits": "proctor.ModelLimits",
    "Provider": "proctor.Runtime",
    "Server": "proctor.EnvServer",
}


if TYPE_CHECKING:
    from ._errors import (
        BatchConfigError,
        CdpError,
        ChannelClosed,
        ChannelError,
        ConnectError,
        ConnectionLost,
        ConnectTimeout,
        CorruptIndexError,
        FrameTooLarge,
        HttpConnectError,
        HttpError,
        HttpReadError,
        HttpTimeout,
        ModelError,
        ModelRequestError,
        ParseError,
        PayloadTooLarge,
        ProctorError,
        ProtocolError,
        RemoteError,
        RetriesExhausted,
        RolloutError,
        RolloutTimeout,
        RuntimeLaunchError,
        SourceError,
        StoreError,
        SubstrateLost,
        TaskCancelled,
        TaskError,
        TasksetError,
        TeardownError,
        TemplateError,
        WorkerLost,
    )
    from .agents import (
        Agent,
        CommandAgent,
        ComputerAgent,
        Run,
        ScriptedAgent,
        ToolAgent,
        agent_from_fn,
    )
    from .channel import EnvClient, EnvServer, Manifest, connect
    from .engine import Job, RayExecutor, Timeouts, rollout
    from .env import (
        Answer,
        Capability,
        Environment,
        GroupMember,
        Judge,
        Template,
        WorkspaceDiff,
        graders,
    )
    from .models import ModelClient, RetryPolicy, model_client
    from .proxy import InterceptionProxy, ModelLimits
    from .records import Grade, Step, SubScore, Task, Trace
    from .runtimes import (
        ComposeRuntime,
        ContainerRuntime,
        Endpoint,
        LocalRuntime,
        RayRuntime,
        Runtime,
        SandboxRuntime,
        SubprocessRuntime,
        UrlRuntime,
    )
    from .tasks import Taskset
else:
    from ._public import lazy_exports

    __getattr__, _ = lazy_exports(__name__, _EXPORTS, deprecated=_DEPRECATED)

    def __dir__() -> list[str]:
        """The public names only (not this module's own imports and helpers)."""
        return sorted([*__all__, "__version__"])
