"""`ToolAgent`: the standard tool-calling loop on any `ModelClient`."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import ModelError
from ._model_turn import traced_turn
from ._run_tools import run_tools
from ._tools import Tool, ToolResult, function_tool

if TYPE_CHECKING:
    from ..agents._run import Run
    from ..models import ContextPolicy, ModelClient, ModelResponse, ToolCall, ToolSpec

__all__ = ["ToolAgent"]

# A tool that enforces its own deadline (`Tool.own_timeout`: the shell server kills the
# command) gets this much longer, so its own, more informative, timeout result wins the
# race. Any other tool is cut off at the timeout itself.
_GRACE = 1.0


@dataclass(frozen=True, slots=True)
class _Settings:
    max_steps: int
    system_prompt: str | None
    tool_timeout: float

    def __post_init__(self) -> None:
        steps, timeout = self.max_steps, self.tool_timeout
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"max_steps must be an integer >= 1, not {steps!r}")
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ValueError(f"tool_timeout must be a positive number of seconds, not {timeout!r}")
        if self.system_prompt is not None and not isinstance(self.system_prompt, str):
            raise ValueError(f"system_prompt must be a string, not {self.system_prompt!r:.80}")


class ToolAgent:
    """Call the model, run the tools it asks for, feed back the results, until it answers.

    Tools are the run's capabilities (by protocol family: `shell`, `ssh`, `mcp`; HUD's
    `mcp/2025-11-25` is `mcp`), the tools its task declares, and `tools` given here.
    Every model call lands on `run.trace` as a `model_turn` step (the assistant message,
    with usage, cost, finish reason and retry attempts), each call as a `tool_call` and
    each result as a `tool_result`. A turn without tool
    calls is the answer: `trace.content`, plus an `assistant` step with
    `stop_reason="answer"`. After `max_steps` turns the loop stops with
    `stop_reason="max_steps"` and the last turn's text as the answer (still graded).

    A call to a tool that does not exist, or one that raises or overruns `tool_timeout`,
    becomes an error result the model reads, and the loop goes on. A `ModelError`
    propagates (the run fails in the agent phase) after a `model_turn` step with its
    `error`, `cause`, `status` and `attempts`. A task row's `agent_config` may override
    `max_steps`, `system_prompt` and `tool_timeout`.

    Args:
        model: a `ModelClient`, or a model string (`"openai/gpt-4.1-mini"`) for which a
            client is made per run and closed after it.
        max_steps: model calls per run at most.
        system_prompt: a system message put before the prompt.
        tool_timeout: seconds a tool call may take.
        tools: extra `Tool`s or Python functions (see `function_tool`).
        context: compact the history under this `ContextPolicy` (None: never).
        params: provider parameters for every call (`temperature`, `max_tokens`, ...).
    """

    def __init__(
        self,
        model: ModelClient | str,
        *,
        max_steps: int = 30,
        system_prompt: str | None = None,
        tool_timeout: float = 120.0,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        context: ContextPolicy | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.settings = _Settings(max_steps, system_prompt, tool_timeout)
        self.tools = [t if isinstance(t, Tool) else function_tool(t) for t in tools]
        self.context = context
        self.params = dict(params or {})

    def __repr__(self) -> str:
        name = self.model if isinstance(self.model, str) else self.model.model
        return f"ToolAgent({name!r}, max_steps={self.settings.max_steps})"

    records_turns = True
    """Its model turns land on the trace from here, not from an interception proxy."""

    async def __call__(self, run: Run) -> None:
        settings = self._settings(run)
        async with AsyncExitStack() as stack:
            client = await self._client(run, stack)
            tools = _by_name(
                [*await run_tools(run, stack, shell_timeout=settings.tool_timeout), *self.tools]
            )
            specs = [t.spec for t in tools.values()]
            done, messages, pending = _resume_point(run, settings)
            if pending:
                messages += [
                    await _call_tool(run, tools, c, settings.tool_timeout) for c in pending
                ]
            response: ModelResponse | None = None
            for step in range(done + 1, settings.max_steps + 1):
                messages = self._compact(messages, response)
                run.save_checkpoint({"turns": step - 1, "messages": messages, "in_flight": True})
                try:
                    response = await self._turn(run, client, messages, specs, step)
                except ModelError:
                    if _budget_spent(run) is None:
                        raise
                    return _stopped(run, messages, _budget_spent(run), step - 1)
                messages.append(response.message)
                if not response.tool_calls:
                    return _finish(run, response, "answer", step)
                run.save_checkpoint(
                    {"turns": step, "messages": messages, "pending": _calls(response)}
                )
                for call in response.tool_calls:
                    messages.append(await _call_tool(run, tools, call, settings.tool_timeout))
            if response is None:  # restored at max_steps: nothing left to ask
                return _stopped(run, messages, "max_steps", settings.max_steps)
            _finish(run, response, "max_steps", settings.max_steps)

    def _settings(self, run: Run) -> _Settings:
        """The settings with the task row's `agent_config` over them.

        Raises:
            ValueError: an override is out of range or of the wrong type.
        """
        base = self.settings
        overrides = run.task.agent_config or {}
        try:
            return _Settings(
                overrides.get("max_steps", base.max_steps),
                overrides.get("system_prompt", base.system_prompt),
                overrides.get("tool_timeout", base.tool_timeout),
            )
        except ValueError as exc:
            raise ValueError(f"agent_config: {exc}") from None

    async def _client(self, run: Run, stack: AsyncExitStack) -> ModelClient:
        """The model client: given, or made from the model string for this run.

        With a proxy session on the run (a batch), the client talks to the session, which
        forwards to the model, enforces the budgets and records every turn; the client
        does not retry (the proxy does).
        """
        if not isinstance(self.model, str):
            return self.model
        from ..models import model_client

        session = run.proxy_session
        if session is None:
            client = model_client(self.model)
        else:
            from ..models import RetryPolicy

            client = model_client(
                _through(self.model, session.base_url),
                api_key=session.secret,
                retry=RetryPolicy(max_transport=1, max_malformed=1),
                profile=self.model if self.model.startswith("profile:") else None,
            )
        stack.push_async_callback(client.aclose)
        return client

    def _compact(
        self, messages: list[dict[str, Any]], last: ModelResponse | None
    ) -> list[dict[str, Any]]:
        if self.context is None:
            return messages
        from ..models import compact, drop_frames

        tokens = last.usage.input_tokens if last is not None and last.usage.input_tokens else None
        messages = compact(messages, self.context, input_tokens=tokens)
        if self.context.max_frames is not None:  # old frames leave the history for good
            messages, _ = drop_frames(messages, max_frames=self.context.max_frames)
        return messages

    async def _turn(
        self,
        run: Run,
        client: ModelClient,
        messages: list[dict[str, Any]],
        specs: list[ToolSpec],
        step: int,
    ) -> ModelResponse:
        return await traced_turn(run, client, messages, specs, step=step, **self.params)


def _opening(prompt: Any, system_prompt: str | None) -> list[dict[str, Any]]:
    """The first messages: the system prompt, then the prompt (text or chat messages)."""
    if isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt):
        messages = [dict(m) for m in prompt]
    elif isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    else:
        messages = [{"role": "user", "content": orjson.dumps(prompt).decode()}]
    if system_prompt is not None and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def _by_name(tools: list[Tool]) -> dict[str, Tool]:
    """Tools by name.

    Raises:
        ValueError: two tools share a name.
    """
    named: dict[str, Tool] = {}
    for tool in tools:
        if tool.name in named:
            raise ValueError(f"two tools are named {tool.name!r}")
        named[tool.name] = tool
    return named


async def _call_tool(
    run: Run, tools: dict[str, Tool], call: ToolCall, limit: float
) -> dict[str, Any]:
    """Run one call, record it, and return the tool message for the history."""
    t0 = time.time()
    run.trace.add("tool_call", {"name": call.name, "arguments": call.arguments}, id=call.id)
    result = await _outcome(tools.get(call.name), call, limit, tools)
    content = result.message_content()
    run.trace.add(
        "tool_result",
        content,
        start=t0,
        id=call.id,
        name=call.name,
        is_error=result.is_error,
    )
    return {"role": "tool", "tool_call_id": call.id, "content": content}


async def _outcome(
    tool: Tool | None, call: ToolCall, limit: float, tools: dict[str, Tool]
) -> ToolResult:
    if tool is None:
        known = ", ".join(tools) or "none"
        return ToolResult(f"unknown tool {call.name!r} (available: {known})", is_error=True)
    deadline = asyncio.timeout(limit + (_GRACE if tool.own_timeout else 0.0))
    try:
        async with deadline:
            return await tool(call.arguments)
    except Exception as exc:
        if isinstance(exc, TimeoutError) and deadline.expired():
            return ToolResult(f"tool {call.name!r} timed out after {limit:g}s", is_error=True)
        return ToolResult(f"tool {call.name!r} failed: {type(exc).__name__}: {exc}", is_error=True)


def _resume_point(
    run: Run, settings: _Settings
) -> tuple[int, list[dict[str, Any]], list[ToolCall]]:
    """Turns done, the history and the tool calls to answer: fresh, or from
    `run.restored` (a checkpoint this agent saved, whose model turn had completed)."""
    state = run.restored
    if not state:
        return 0, _opening(run.prompt, settings.system_prompt), []
    if state.get("in_flight"):
        raise ValueError("this checkpoint has a model turn in flight; it cannot be continued")
    from ..models import ToolCall

    pending = [
        ToolCall(c["id"], c["name"], c["arguments"], c.get("raw_arguments", ""))
        for c in state.get("pending") or ()
    ]
    return int(state["turns"]), list(state["messages"]), pending


def _calls(response: ModelResponse) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "name": c.name, "arguments": c.arguments, "raw_arguments": c.raw_arguments}
        for c in response.tool_calls
    ]


def _budget_spent(run: Run) -> str | None:
    """The budget the proxy session refused a turn for, if it did."""
    return None if run.proxy_session is None else run.proxy_session.stop_reason


def _stopped(run: Run, messages: list[dict[str, Any]], reason: str | None, steps: int) -> None:
    """End without a final turn: the last assistant text is the answer (still graded)."""
    run.trace.content = _last_text(messages)
    run.trace.add("assistant", run.trace.content, stop_reason=reason, steps=steps)
    run.stop_reason = run.stop_reason or reason


def _last_text(messages: list[dict[str, Any]]) -> Any:
    for message in reversed(messages):
        if message.get("role") == "assistant":
            return message.get("content")
    return None


def _through(model: str, base_url: str) -> str:
    """The model string pointed at a proxy session (`base_url` ends in `/v1`)."""
    from ..models import parse_model

    spec = parse_model(model)
    if spec.api == "messages":
        return f"anthropic/{spec.model}@{base_url.removesuffix('/v1')}"
    api = "chat" if spec.api == "converse" else spec.api  # the proxy translates Converse
    return f"openai/{spec.model}@{base_url}?api={api}"


def _finish(run: Run, response: ModelResponse, reason: str, steps: int) -> None:
    run.trace.content = response.content
    run.trace.add("assistant", response.content, stop_reason=reason, steps=steps)
