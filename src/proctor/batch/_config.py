"""`BatchConfig`: what a batch runs, validated before anything else happens.

A config is a JSON or TOML file (`load_config`, in `_config_load`). Unknown fields are
rejected everywhere, and an error names the field path and the line of the file it is
on. Relative paths in a config are relative to the file's folder. The runtime a config
names is built by `_config_runtime.build_runtime`.
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from .._errors import BatchConfigError
from ._config_computer import ComputerAgentEntry, FrameConfig
from ._config_ids import _MAX_ID, Assignment, _clean, rollout_id
from ._config_model import PlacementFields, model_name, model_string
from ._config_substrates import (
    LEASE,
    ComposeRuntimeConfig,
    ContainerRuntimeConfig,
    Lease,
    LocalRuntimeConfig,
    RayRuntimeConfig,
    RuntimeConfig,
    SandboxRuntimeConfig,
    Seconds,
    SubprocessRuntimeConfig,
    UrlRuntimeConfig,
    _Model,
    _no_secret_names,
    isolated_runtime,
)

if TYPE_CHECKING:
    from ..engine import Timeouts
    from ..proxy import ModelLimits

__all__ = [
    "AgentEntry",
    "Assignment",
    "BatchConfig",
    "BatchConfigError",
    "CommandAgentEntry",
    "ComposeRuntimeConfig",
    "ComputerAgentEntry",
    "ConfigProblem",
    "ContainerRuntimeConfig",
    "ExecutorConfig",
    "FrameConfig",
    "LimitsConfig",
    "LocalExecutorConfig",
    "LocalRuntimeConfig",
    "PythonAgentEntry",
    "RayExecutorConfig",
    "RayRuntimeConfig",
    "RuntimeConfig",
    "SandboxRuntimeConfig",
    "SubprocessRuntimeConfig",
    "TasksetConfig",
    "TimeoutsConfig",
    "ToolAgentEntry",
    "UrlRuntimeConfig",
    "isolated_runtime",
    "rollout_id",
]

MAX_ROLLOUTS = 1_000_000
_RENAMED = "max_concurrency is deprecated: name it max_concurrent (same meaning)"
_RAY_CONCURRENCY = (
    "executor.concurrency is deprecated and ignored: max_concurrent bounds the rollouts "
    "in flight across every Ray shard"
)
"""The default `max_rollouts`: about 300 MB of assignments in the runner, a plan
document of about 200 MB, and far more rollouts than one runner finishes in a day."""
_INTERPRETERS = re.compile(r"(python[\d.]*|node|bash|sh|uv|uvx|npx|deno|bun|ruby|perl)")

PositiveInt = Annotated[int, Field(ge=1)]


class ConfigProblem(BaseModel):
    """One thing wrong in a config file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str | None = None
    """The config file, when the config came from one."""
    line: int | None = None
    """The line the field (or its enclosing object) is on, when known."""
    path: str = ""
    """The field path, such as `agents[0].max_steps`; empty for the whole file."""
    message: str

    def describe(self) -> str:
        """`FILE:LINE: PATH: MESSAGE`, leaving out what is unknown."""
        where = ":".join(str(p) for p in (self.file, self.line) if p is not None)
        return ": ".join(p for p in (where, self.path, self.message) if p)


# -- taskset ----------------------------------------------------------------------------


class TasksetConfig(_Model):
    """Where the rows come from, and which environment serves them."""

    source: str
    """Any `Taskset.from_file` source: `.json`, `.jsonl`, `.py` or a folder."""
    slugs: list[str] | None = None
    """Keep only these rows (in the taskset's order); a slug it lacks is an error."""
    env_source: str | None = None
    """Python source defining the environment; default: `source` when it is Python."""
    env: str | None = None
    """Which environment, when the source defines several."""
    limit: PositiveInt | None = None
    """Only the source's first this many rows (`slugs` then picks among them); a source
    that generates rows without end (a verifiers taskset) needs one."""


# -- agents -----------------------------------------------------------------------------


class _AgentBase(_Model):
    name: str | None = None
    """Names the agent in rollout ids; default: derived from the model or command."""
    enabled: bool = True
    """A disabled entry stays in the assignment table but runs nothing."""


class ToolAgentEntry(_AgentBase):
    """The built-in tool-calling agent (`proctor.agents.ToolAgent`) on a model."""

    kind: Literal["tool"]
    model: str
    """`provider/model[@base_url][?api=...]`, e.g. `openai/gpt-4.1-mini`."""
    max_steps: PositiveInt = 30
    system_prompt: str | None = None
    tool_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 120.0
    params: dict[str, Any] = Field(default_factory=dict)
    """Request parameters (`temperature`, `max_tokens`, ...)."""

    _model = field_validator("model")(model_string)

    def default_name(self) -> str:
        """The model string without its URL: `openai/gpt-4.1-mini`."""
        return model_name(self.model)


class CommandAgentEntry(PlacementFields, _AgentBase):
    """A harness command per rollout (`CommandAgent`) behind the interception proxy."""

    kind: Literal["command"]
    argv: Annotated[list[str], Field(min_length=1)]
    """The command; it gets `OPENAI_BASE_URL`/`OPENAI_API_KEY` for the proxy."""
    model: str
    """The upstream model the proxy forwards to."""
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    """Extra variables for the harness (names that look secret are refused)."""
    answer: Literal["stdout", "json"] = "stdout"
    kill_grace: Seconds = 2.0

    _model = field_validator("model")(model_string)
    _env = field_validator("env")(_no_secret_names)

    @field_validator("argv")
    @classmethod
    def _argv(cls, argv: list[str]) -> list[str]:
        if not argv[0]:
            raise ValueError("the command is empty")
        return argv

    def default_name(self) -> str:
        """The program (or an interpreter's script) and the model: `harness-openai/gpt-4.1`."""
        tool = Path(self.argv[0]).name
        if _INTERPRETERS.fullmatch(tool) and len(self.argv) > 1:
            tool = Path(self.argv[1]).stem
        return f"{tool}-{model_name(self.model)}"


class PythonAgentEntry(_AgentBase):
    """A Python agent by `module:attr` or `file.py:attr`, as `proctor run --agent` takes it."""

    kind: Literal["python"]
    agent: str
    """`module:attr` or `path/to/file.py:attr`; a class is instantiated with no arguments."""
    model: str | None = None
    """The upstream model behind the interception proxy (`run.model_env`), if it uses one."""

    _model = field_validator("model")(lambda v: v if v is None else model_string(v))

    @field_validator("agent")
    @classmethod
    def _spec(cls, spec: str) -> str:
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise ValueError(f"expected 'module:attr' or 'file.py:attr', got {spec!r}")
        return spec

    def default_name(self) -> str:
        """The attribute, and the model when one is named: `solver`."""
        attr = self.agent.rpartition(":")[2].rsplit(".", 1)[-1]
        return attr if self.model is None else f"{attr}-{model_name(self.model)}"


AgentEntry: TypeAlias = Annotated[
    ToolAgentEntry | CommandAgentEntry | PythonAgentEntry | ComputerAgentEntry,
    Field(discriminator="kind"),
]


class LocalExecutorConfig(_Model):
    """Agent loops share the runner's event loop."""

    kind: Literal["local"]


class RayExecutorConfig(_Model):
    """Agent loops on Ray shards across a cluster (`RayExecutor`)."""

    kind: Literal["ray"]
    address: str | None = None
    shards: PositiveInt | None = None
    concurrency: PositiveInt | None = None
    """Deprecated and ignored: `max_concurrent` bounds the rollouts across every shard."""
    resources: dict[str, Any] = Field(default_factory=dict)
    lease: Lease = LEASE
    """Seconds the shards outlive a runner that died (detached actors under a lease),
    so `--resume` follows their rollouts to their end; 0 turns it off."""


ExecutorConfig: TypeAlias = Annotated[
    LocalExecutorConfig | RayExecutorConfig, Field(discriminator="kind")
]


# -- budgets ----------------------------------------------------------------------------


class TimeoutsConfig(_Model):
    """Deadlines per phase in seconds, as `proctor.engine.Timeouts` applies them."""

    rollout: Seconds | None = None
    connect: Seconds = 60.0
    start: Seconds | None = None
    agent: Seconds | None = None
    grade: Seconds | None = None
    teardown: Seconds = 30.0

    def to_timeouts(self) -> Timeouts:
        """The engine's `Timeouts` with these deadlines."""
        from ..engine import Timeouts

        return Timeouts(**self.model_dump())


class LimitsConfig(_Model):
    """Per-rollout budgets the interception proxy enforces (`proctor.proxy.ModelLimits`)."""

    max_turns: Annotated[int, Field(ge=0)] | None = None
    max_input_tokens: Annotated[int, Field(ge=0)] | None = None
    max_output_tokens: Annotated[int, Field(ge=0)] | None = None
    max_total_tokens: Annotated[int, Field(ge=0)] | None = None
    max_cost: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    """USD per rollout."""

    def to_limits(self) -> ModelLimits:
        """The interception proxy's `ModelLimits` with these budgets."""
        from ..proxy import ModelLimits

        return ModelLimits(**self.model_dump())


# -- the config -------------------------------------------------------------------------


class BatchConfig(_Model):
    """Everything a batch runs; `model_json_schema()` is `proctor batch schema`."""

    version: Literal[1] = 1
    """Config format version."""
    name: str | None = None
    """The batch's name; default: the config file's stem."""
    taskset: TasksetConfig
    agents: Annotated[list[AgentEntry], Field(min_length=1)]
    repeats: PositiveInt = 1
    """Rollouts per task and agent entry."""
    runtime: RuntimeConfig = Field(default_factory=lambda: isolated_runtime())
    """Default: `sandbox` where bubblewrap (`bwrap`) is on PATH, else `subprocess`."""
    executor: ExecutorConfig = Field(default_factory=lambda: LocalExecutorConfig(kind="local"))
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    cost_cap: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """USD for the whole batch: once reached, no new model turns and no new launches."""
    max_concurrent: PositiveInt
    """Rollouts in flight at most, across every agent (and every Ray shard). The key
    `max_concurrency` is accepted for one release, with a warning."""
    expected_rollouts: Annotated[int, Field(ge=0)]
    """The enabled rollouts this batch must have (the frozen sample count)."""
    task_suite: list[str] | None = None
    """The ordered slugs the taskset must hold, exactly."""
    environment_version: str | None = None
    """The version the served environment must report in `hello`."""
    launch_retries: Annotated[int, Field(ge=0)] = 1
    """Fresh substrates tried when one fails before its agent starts."""
    judge: str | None = None
    """The model `graders.judge` rewards call (a model string, as agents name one),
    through a proxy session opened for each grading phase; its key stays with the
    runner and its cost counts against `cost_cap`."""
    user_model: str | None = None
    """The model a simulated user with no endpoint of its own asks (`ModelUser`; a model
    string), through a proxy session each rollout of an environment serving a `user`
    capability gets from its start; its key stays with the runner, its turns are
    priced on the rollout (against `cost_cap`) and left out of samples."""
    durability: Literal["default", "strict"] = "default"
    """`strict` fsyncs every state change; `default` group-commits them."""
    max_rollouts: PositiveInt = MAX_ROLLOUTS
    """The most assignments (task x agent entry x repeat) the plan accepts: the plan
    and the runner hold every one in memory (about 300 bytes each)."""

    _path: Path | None = PrivateAttr(default=None)
    _deprecated: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _executor_shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("executor"), str):
            data = {**data, "executor": {"kind": data["executor"]}}
        return data

    @model_validator(mode="wrap")
    @classmethod
    def _renamed_keys(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> BatchConfig:
        """`max_concurrency` read as `max_concurrent`, with a DeprecationWarning and a
        note the plan shows (`deprecated`)."""
        notes = []
        if isinstance(data, dict) and "max_concurrency" in data:
            if "max_concurrent" in data:
                raise ValueError("max_concurrency is the old name of max_concurrent: give one")
            data = {k if k != "max_concurrency" else "max_concurrent": v for k, v in data.items()}
            notes.append(_RENAMED)
        config: BatchConfig = handler(data)
        executor = config.executor
        if isinstance(executor, RayExecutorConfig) and executor.concurrency is not None:
            notes.append(_RAY_CONCURRENCY)
        for note in notes:
            warnings.warn(note, DeprecationWarning, stacklevel=2)
        config._deprecated = notes
        return config

    @property
    def deprecated(self) -> list[str]:
        """What this config says the old way, each with the new way (the plan shows them)."""
        return list(self._deprecated)

    @property
    def path(self) -> Path | None:
        """The file this config was loaded from, if any."""
        return self._path

    @property
    def base_dir(self) -> Path:
        """The folder relative paths in this config start from."""
        return self._path.parent if self._path is not None else Path.cwd()

    def resolve(self, path: str) -> str:
        """`path` relative to `base_dir` (absolute paths pass through)."""
        return str(self.base_dir / path) if not os.path.isabs(path) else path

    def env_source(self) -> str | None:
        """The environment's Python source on this machine: `taskset.env_source`, else
        `taskset.source` when that is Python; None when neither is."""
        ts = self.taskset
        if ts.env_source is not None:
            return self.resolve(ts.env_source)
        source = Path(self.resolve(ts.source))
        if source.suffix == ".py" or (source.is_dir() and any(source.glob("*.py"))):
            return str(source)
        return None

    def resolve_agent(self, spec: str) -> str:
        """A Python agent's `file.py:attr` with the file relative to `base_dir`."""
        module, _, attr = spec.partition(":")
        if module.endswith(".py") or "/" in module:
            return f"{self.resolve(module)}:{attr}"
        return spec

    def agent_names(self) -> list[str]:
        """Each agent entry's name, given or derived, in order."""
        return [entry.name or entry.default_name() for entry in self.agents]

    def digest(self) -> str:
        """SHA-256 of the canonical JSON of this config (what `--resume` compares).

        `durability` is left out: it changes how the runner writes, not what it runs.
        """
        doc = self.model_dump(mode="json", exclude={"durability"})
        doc["max_concurrency"] = doc.pop("max_concurrent")  # the name batches recorded
        _drop_new_defaults(doc)
        canonical = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(canonical).hexdigest()

    def count(self, tasks: int) -> tuple[int, int]:
        """`(total, enabled)` assignments over `tasks` rows, counted, not built."""
        per_task = len(self.agents) * self.repeats
        enabled = sum(entry.enabled for entry in self.agents) * self.repeats
        return tasks * per_task, tasks * enabled

    def assignments(self, slugs: Sequence[str]) -> list[Assignment]:
        """Every task x agent entry x repeat, in that nesting, with its rollout id."""
        return list(self.iter_assignments(slugs))

    def iter_assignments(self, slugs: Sequence[str]) -> Iterator[Assignment]:
        """`assignments`, one at a time (a caller can stop, or yield to its loop)."""
        entries = list(zip(self.agents, self.agent_names(), strict=True))
        for slug in slugs:
            for entry, name in entries:
                prefix = f"{_clean(slug)}--{_clean(name)}--r"  # as `rollout_id` makes it
                for k in range(1, self.repeats + 1):
                    rid = f"{prefix}{k}"
                    yield Assignment(
                        rollout_id=rid if len(rid) <= _MAX_ID else rollout_id(slug, name, k),
                        task=slug,
                        agent=name,
                        model=entry.model,
                        repeat=k,
                        enabled=entry.enabled,
                    )


_LEASED = ("subprocess", "sandbox", "ray")  # the runtimes with a `lease`


def _drop_new_defaults(doc: dict[str, Any]) -> None:
    """Leave out fields added since layout 1 while they hold their defaults, so the
    digest of a config recorded before them is unchanged (and `--resume` accepts it)."""
    if doc.get("max_rollouts") == MAX_ROLLOUTS:
        del doc["max_rollouts"]
    if doc.get("user_model") is None:
        doc.pop("user_model", None)
    if doc["taskset"].get("limit") is None:
        doc["taskset"].pop("limit", None)
    if doc["runtime"].get("kind") == "local" and not doc["runtime"].get("trusted"):
        doc["runtime"].pop("trusted", None)
    if doc["runtime"].get("kind") in _LEASED and doc["runtime"].get("lease") in (None, LEASE):
        doc["runtime"].pop("lease", None)  # recorded before the lease (None), or its default
    if doc["executor"].get("kind") == "ray" and doc["executor"].get("lease") in (None, LEASE):
        doc["executor"].pop("lease", None)
    if doc["executor"].get("kind") == "ray" and doc["executor"].get("concurrency") is None:
        doc["executor"]["concurrency"] = 32  # the default it had, which it meant
