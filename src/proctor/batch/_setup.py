"""What a batch needs before its first rollout: rows, agents, proxies, the runtime.

`Setup.build` turns a `BatchConfig` into live objects (nothing is started yet);
`Setup.open` starts the runtime and the proxies on an exit stack.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import BatchConfigError
from ._config import (
    BatchConfig,
    CommandAgentEntry,
    ComposeRuntimeConfig,
    ComputerAgentEntry,
    ConfigProblem,
    ContainerRuntimeConfig,
    PythonAgentEntry,
    ToolAgentEntry,
    UrlRuntimeConfig,
)
from ._config_runtime import build_runtime
from ._lease import LeasedRuntime, leased
from ._plan_models import credentials

if TYPE_CHECKING:
    from ..proxy import InterceptionProxy, SharedBudget
    from ..records import Task
    from ..runtimes import Runtime

__all__ = ["Setup", "redactor", "secret_values"]

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CRED|AUTH", re.I)
_REDACTED = b"[redacted]"
_SORTED = orjson.OPT_SORT_KEYS


@dataclass(slots=True)
class Setup:
    """The live pieces of a batch, built from its config."""

    config: BatchConfig
    batch_id: str
    rows: dict[str, bytes]
    """Slug -> the row's canonical JSON (what a `Task` is made from when its rollout
    starts: 150 bytes a row held instead of a 1 KB model, for 100,000-row batches)."""
    agents: dict[str, Any]
    models: dict[str, str | None]
    """Agent name -> the model string its proxy forwards to (None: no proxy)."""
    runtime: Runtime
    budget: SharedBudget
    proxies: dict[str, InterceptionProxy] = field(default_factory=dict)
    """Model string -> its interception proxy (one per upstream model)."""

    @classmethod
    def build(cls, config: BatchConfig, batch_id: str, out: str, spent: float = 0.0) -> Setup:
        """Load the rows and agents and build the runtime and proxies (not started);
        server children's output goes to `OUT/environment.log`.

        Raises:
            BatchConfigError: the taskset or an agent cannot be loaded.
        """
        from ..proxy import InterceptionProxy, SharedBudget

        agents, models = {}, {}
        for entry, name in zip(config.agents, config.agent_names(), strict=True):
            if entry.enabled:
                agents[name] = _agent(config, entry, out)
                models[name] = entry.model
        budget = SharedBudget(config.cost_cap, spent)
        limits = config.limits.to_limits()
        upstreams = [*(m for m in models.values() if m is not None), config.judge]
        upstreams.append(config.user_model)
        proxies = {
            model: InterceptionProxy(model, limits=limits, budget=budget)
            for model in dict.fromkeys(m for m in upstreams if m is not None)
        }
        log = os.path.join(out, "environment.log")
        runtime = build_runtime(config, batch=batch_id, log=log)
        runtime = leased(config, runtime, batch_id, out, log) or runtime
        tasks = _tasks(config)
        if config.repeats >= 2:
            _load_environment(config, {task.env for task in tasks.values()})
        return cls(config, batch_id, _rows(tasks), agents, models, runtime, budget, proxies)

    async def open(self, stack: AsyncExitStack) -> None:
        """Start the runtime (if it has a lifetime, and unless Ray shards enter it
        themselves) and every proxy on `stack`."""
        if hasattr(self.runtime, "__aenter__") and self.config.executor.kind != "ray":
            await stack.enter_async_context(self.runtime)  # type: ignore[arg-type]
        for proxy in self.proxies.values():
            await stack.enter_async_context(proxy)

    def task(self, slug: str) -> Task:
        """The row `slug` as a `Task` (made afresh: rows are kept as JSON)."""
        from ..records import Task

        return Task.model_validate_json(self.rows[slug])

    @property
    def judge(self) -> InterceptionProxy | None:
        """The proxy `graders.judge` rewards call (`judge` in the config), if any."""
        judge = self.config.judge
        return None if judge is None else self.proxies[judge]

    @property
    def user(self) -> InterceptionProxy | None:
        """The proxy simulated users ask (`user_model` in the config), if any."""
        model = self.config.user_model
        return None if model is None else self.proxies[model]

    def proxy_for(self, agent: str) -> InterceptionProxy | None:
        """The proxy the agent's model turns go through, if it names a model."""
        model = self.models.get(agent)
        return None if model is None else self.proxies[model]

    @property
    def adoptable(self) -> bool:
        """Whether an in-flight rollout's substrate outlives the runner and can be found
        again: served elsewhere, or a container (a Compose project's `main`) reached
        through its Unix socket."""
        rt = self.config.runtime
        if isinstance(rt, ContainerRuntimeConfig):
            return rt.network == "none"
        return isinstance(rt, UrlRuntimeConfig | ComposeRuntimeConfig) or isinstance(
            self.runtime, LeasedRuntime
        )

    def release(self, target: str) -> Callable[[], Awaitable[None]] | None:
        """What stops an adopted rollout's substrate (its container, or its Compose
        project), if anything must."""
        if isinstance(self.runtime, LeasedRuntime):
            return functools.partial(self.runtime.release, target)
        if not isinstance(self.config.runtime, ContainerRuntimeConfig | ComposeRuntimeConfig):
            return None
        runtime: Any = self.runtime
        return functools.partial(runtime.release, target)

    def claim(self, targets: set[str]) -> None:
        """Keep the servers a dead runner left at `targets` for their rollouts to
        continue, and stop the others (under a lease; elsewhere nothing holds them)."""
        if isinstance(self.runtime, LeasedRuntime):
            self.runtime.claim(targets)

    def death(self, target: str) -> asyncio.Future[str] | None:
        """What resolves with the cause if an adopted rollout's server dies (a leased
        one: the supervisor tells), if anything tells."""
        if isinstance(self.runtime, LeasedRuntime):
            return self.runtime.died(target)
        return None

    def gone(self, target: str) -> str | None:
        """Why the server at `target` a dead runner left cannot be adopted, if it
        cannot: under a lease, one the supervisor no longer holds."""
        if isinstance(self.runtime, LeasedRuntime) and target not in self.runtime.orphans:
            grace = f"runtime.lease = {self.runtime.grace:g} s"
            return f"its server is gone: it died, or the lease ({grace}) lapsed before this resume"
        return None

    def server_token(self, target: str | None = None) -> str | None:
        """The token of a server served elsewhere (from its variable), or of the
        leased server at `target` a dead runner left, if any."""
        if isinstance(self.runtime, LeasedRuntime) and target is not None:
            return self.runtime.token_for(target)
        rt = self.config.runtime
        if isinstance(rt, UrlRuntimeConfig) and rt.token_env:
            return os.environ.get(rt.token_env)
        return None


def _rows(tasks: dict[str, Task]) -> dict[str, bytes]:
    """The taskset's rows (filtered by slug), each as its canonical JSON."""
    # A copy of each: an orjson result keeps a 4 KB buffer for as long as it lives.
    return {
        slug: bytes(memoryview(orjson.dumps(task.model_dump(mode="json"), option=_SORTED)))
        for slug, task in tasks.items()
    }


def _tasks(config: BatchConfig) -> dict[str, Task]:
    from ..tasks import Taskset

    try:
        taskset = Taskset.from_file(
            config.resolve(config.taskset.source), limit=config.taskset.limit
        )
    except Exception as exc:
        raise _problem("taskset.source", f"{type(exc).__name__}: {exc}") from exc
    rows = {task.slug: task for task in taskset}
    wanted = config.taskset.slugs
    return rows if wanted is None else {slug: rows[slug] for slug in wanted if slug in rows}


def _load_environment(config: BatchConfig, names: set[str]) -> None:
    """Define the rows' environment in this process too (if the taskset's import did
    not), so its group rewards can run here once a group has ended."""
    from .._loader import find_environment
    from ..env import registered

    source = config.env_source()
    if source is None or all(registered(name) for name in names):
        return
    try:
        find_environment(source, config.taskset.env)
    except Exception as exc:
        raise _problem("taskset.env_source", f"{type(exc).__name__}: {exc}") from exc


def _agent(config: BatchConfig, entry: Any, out: str) -> Any:
    if isinstance(entry, ToolAgentEntry):
        from ..agents import ToolAgent

        return ToolAgent(
            entry.model,
            max_steps=entry.max_steps,
            system_prompt=entry.system_prompt,
            tool_timeout=entry.tool_timeout,
            params=entry.params,
        )
    if isinstance(entry, ComputerAgentEntry):
        return _computer_agent(entry, out)
    if isinstance(entry, CommandAgentEntry):
        from ..agents import CommandAgent

        shipped = set(entry.ship)  # an argv item naming a shipped file names its copy
        return CommandAgent(
            [config.resolve(arg) if arg in shipped else arg for arg in entry.argv],
            cwd=config.resolve(entry.cwd) if entry.cwd else None,
            env=entry.env,
            answer=entry.answer,
            kill_grace=entry.kill_grace,
            placement=entry.placement,
            ship=[config.resolve(path) for path in entry.ship],
            needs=entry.needs.model_dump(),
        )
    assert isinstance(entry, PythonAgentEntry)
    from .._loader import load_agent
    from ..agents import agent_from_fn

    source = config.resolve(config.taskset.source)
    spec = config.resolve_agent(entry.agent)
    try:  # a plain function of the prompt is wrapped, as `proctor run --agent` does
        return load_agent(spec, source, config.env_source(), wrap=agent_from_fn)
    except Exception as exc:
        raise _problem("agents", f"{entry.agent}: {exc}") from exc


def _computer_agent(entry: ComputerAgentEntry, out: str) -> Any:
    """`ComputerAgent` as the entry says, its frames in `OUT/computer-frames/<trace id>/`
    while its rollout runs (so a resumed rollout continues with them)."""
    from ..agents import ComputerAgent
    from ..models import ContextPolicy

    prompt: dict[str, Any] = {}
    if entry.system_prompt is not None:
        prompt["system_prompt"] = entry.system_prompt
    return ComputerAgent(
        entry.model,
        capability=entry.capability,
        max_actions=entry.max_actions,
        max_invalid=entry.max_invalid,
        done=entry.done,
        strict=entry.strict,
        context=ContextPolicy(max_frames=entry.max_frames),
        frame=entry.frame.model_dump(),
        settle_ms=entry.settle_ms,
        frames_dir=os.path.join(out, "computer-frames"),
        keep_frames=False,
        params=entry.params,
        native=entry.native,
        **prompt,
    )


def _problem(path: str, message: str) -> BatchConfigError:
    return BatchConfigError([ConfigProblem(path=path, message=message)])


def secret_values(config: BatchConfig) -> list[bytes]:
    """The values of every secret the batch reads (keys, server token), longest first."""
    names = {c.variable for c in credentials(config)}
    names |= {name for name in os.environ if _SECRET_NAME.search(name)}
    rt = config.runtime
    if isinstance(rt, UrlRuntimeConfig) and rt.token_env:
        names.add(rt.token_env)
    values = {os.environ[n].encode() for n in names if len(os.environ.get(n, "")) >= 8}
    return sorted(values, key=len, reverse=True)


def redactor(secrets: list[bytes]) -> Callable[[bytes], bytes] | None:
    """A function masking `secrets` in what the store writes (None when there are none)."""
    if not secrets:
        return None

    def redact(data: bytes) -> bytes:
        for secret in secrets:
            if secret in data:
                data = data.replace(secret, _REDACTED)
        return data

    return redact
