"""Plan check: can each harness be placed where its entry says, with what it needs?

A `command` agent's `placement` and `needs` (`CommandAgent(placement=, needs=)`) against
the runtime and the task set, before anything launches: `substrate` needs a runtime
that can host a harness (a cold sandbox, a container, a Compose project's `main`),
`needs.network` a substrate with a route beyond loopback (a Compose project's network
is internal: it has none), `needs.image` every task's container image, `needs.api` the
model's API family, `needs.capabilities` the environment's capabilities (known when
the plan started the environment to ask it: a container or URL runtime; the agent
checks them again at each rollout's start).
"""

from __future__ import annotations

import os
from typing import Any

from ._config import BatchConfig, CommandAgentEntry, ContainerRuntimeConfig, SandboxRuntimeConfig

__all__ = ["placement_problems"]

_HOSTS = ("sandbox", "container", "compose")
_APIS = {"openai-chat": "chat", "openai-responses": "responses", "anthropic-messages": "messages"}


def placement_problems(
    config: BatchConfig, rows: list[dict[str, Any]], env: dict[str, Any] | None
) -> list[str]:
    """One line per harness need the runtime or the task set cannot meet."""
    problems: list[str] = []
    for entry in config.agents:
        if isinstance(entry, CommandAgentEntry) and entry.enabled:
            where = f"agent {entry.name or entry.default_name()!r}"
            problems += [f"{where}: {p}" for p in _entry_problems(config, entry, rows, env)]
    return problems


def _entry_problems(
    config: BatchConfig,
    entry: CommandAgentEntry,
    rows: list[dict[str, Any]],
    env: dict[str, Any] | None,
) -> list[str]:
    rt, needs = config.runtime, entry.needs
    problems = []
    placed = entry.placement == "substrate"
    if placed and rt.kind not in _HOSTS:
        problems.append(
            f"placement 'substrate': runtime {rt.kind!r} cannot host a harness (a sandbox, "
            "container or compose runtime can); use placement 'jail'"
        )
    if placed and isinstance(rt, SandboxRuntimeConfig) and rt.warm:
        problems.append("placement 'substrate': a warm sandbox cannot host a harness; warm = false")
    if entry.ship and not placed:
        problems.append("ship copies files into the substrate: only with placement 'substrate'")
    for path in entry.ship:
        if not os.path.isfile(config.resolve(path)):
            problems.append(f"ship: {config.resolve(path)} is not a file")
    if needs.network and placed and rt.kind == "compose":
        problems.append(
            "needs a network: a Compose project's network is internal (it reaches its own "
            "services and the proxy only)"
        )
    elif needs.network and (not placed or getattr(rt, "network", "none") == "none"):
        problems.append(
            "needs a network: place it in a substrate with one (runtime network other than "
            "'none'); the jail and a 'none' substrate reach only the proxy"
        )
    if needs.image is not None:
        if not placed or not isinstance(rt, ContainerRuntimeConfig):
            problems.append(f"needs image {needs.image!r}: only a harness placed in a container")
        else:
            for row in rows:
                image = rt.image or (row.get("runtime_config") or {}).get("image")
                if image != needs.image:
                    problems.append(
                        f"needs image {needs.image!r}; task {row['slug']!r} runs {image!r}"
                    )
                    break
    if needs.api is not None:
        from ..models import parse_model

        api = parse_model(entry.model).api
        if _APIS[needs.api] != api:
            problems.append(f"speaks {needs.api}, but model {entry.model!r} is served as {api!r}")
    declared = None if env is None else env.get("capabilities")
    if needs.capabilities and env is not None and declared is not None:
        missing = sorted(set(needs.capabilities) - set(declared))
        if missing:
            problems.append(
                f"needs capabilities {', '.join(missing)}; environment {env.get('name')!r} "
                f"declares {', '.join(declared) or 'none'}"
            )
    return problems
