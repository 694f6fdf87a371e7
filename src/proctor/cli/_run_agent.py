"""The agent `proctor run` rolls out: `--agent`'s Python object, the built-in
tool-calling agent on `--model`, or a `--harness` command behind an interception proxy;
the `--judge-model` proxy graders call and the `--user-model` proxy simulated users ask."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from ._common import CLIError

if TYPE_CHECKING:
    from ..proxy import InterceptionProxy

__all__ = ["agent_label", "build_agent", "judge_proxy", "user_proxy"]


def build_agent(
    args: argparse.Namespace, source: str, env_source: str
) -> tuple[Any, InterceptionProxy | None]:
    """The agent `--agent`, `--model` or `--harness` names, and the harness's proxy."""
    from .._loader import load_agent
    from ..agents import agent_from_fn

    if (args.harness_env or args.no_jail or args.placement or args.ship) and not args.harness:
        raise CLIError("--harness-env, --no-jail, --placement and --ship apply to --harness")
    if args.model or args.harness:
        return _model_agent(args)
    return load_agent(args.agent, source, env_source, wrap=agent_from_fn), None


def _model_spec(option: str, model: str) -> Any:
    """The parsed model string, its key present (never passed as an argument).

    Raises:
        CLIError: a bad model string, or a missing key for a provider over HTTPS.
    """
    from ..models import parse_model

    try:
        spec = parse_model(model)
    except ValueError as exc:
        raise CLIError(f"{option}: {exc}") from None
    if (
        spec.api_key_env
        and not os.environ.get(spec.api_key_env)
        and spec.base_url.startswith("https://")
    ):
        raise CLIError(f"{option} {model}: set {spec.api_key_env} (keys never go in arguments)")
    return spec


def judge_proxy(model: str | None) -> InterceptionProxy | None:
    """`--judge-model`: a proxy in front of the judge's model."""
    if model is None:
        return None
    from ..proxy import InterceptionProxy

    return InterceptionProxy(_model_spec("--judge-model", model))


def user_proxy(model: str | None) -> InterceptionProxy | None:
    """`--user-model`: a proxy in front of the model simulated users play."""
    if model is None:
        return None
    from ..proxy import InterceptionProxy

    return InterceptionProxy(_model_spec("--user-model", model))


def _model_agent(args: argparse.Namespace) -> tuple[Any, InterceptionProxy | None]:
    """`--model` alone: a `ToolAgent`; with `--harness`: a `CommandAgent` behind a proxy.

    Raises:
        CLIError: conflicting or incomplete options, a bad model string, a missing key.
    """
    import shlex

    from .._errors import ModelError

    if args.agent != "builtin":
        raise CLIError("--agent cannot be combined with --model or --harness")
    if not args.model:
        raise CLIError("--harness needs --model: the upstream its proxy forwards to")
    spec = _model_spec("--model", args.model)
    from ..proxy import InterceptionProxy, ModelLimits

    limits = ModelLimits(
        max_turns=args.max_turns, max_total_tokens=args.max_tokens, max_cost=args.max_cost
    )
    # Both go through an interception proxy: one place for budgets and retries, and the
    # record keeps every request (what training samples are rebuilt from).
    proxy = InterceptionProxy(spec, limits=limits)
    if args.harness is None:
        from ..agents import ToolAgent

        try:
            return ToolAgent(args.model, max_steps=args.max_turns or 30), proxy
        except ModelError as exc:
            raise CLIError(f"--model: {exc}") from None
    from ..agents import CommandAgent

    argv = shlex.split(args.harness)
    if not argv:
        raise CLIError("--harness: empty command")
    try:
        agent = CommandAgent(
            argv,
            pass_env=args.harness_env,
            jail=not args.no_jail,
            placement=args.placement or "jail",
            ship=args.ship,
        )
    except ValueError as exc:  # --ship without --placement substrate, or no such file
        raise CLIError(f"--harness: {exc}") from None
    return agent, proxy


def agent_label(args: argparse.Namespace, agent: Any) -> str:
    """Which agent ran: `ToolAgent('gpt-4.1-mini', ...)`, `path.py:attr`, or the
    builtin agent's class."""
    if args.model or args.harness:
        return repr(agent)
    if args.agent == "builtin":
        own_repr = "__repr__" in vars(type(agent))
        shown = repr(agent) if own_repr else type(agent).__name__
        return f"builtin ({shown})"
    return str(args.agent)
