"""`ComputerAgent`: a model drives a desktop or browser through one forced, strict
`computer_action` tool, or its provider's native computer tool (`docs/computer-agent.md`)."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import ModelError, RemoteError, RetriesExhausted
from ..env import DesktopClient, Frame, validate_actions
from ..models import ContextPolicy, ImagePart, TextPart, ToolSpec, drop_frames
from ._computer_checkpoint import checkpoint, restore
from ._computer_native import (
    ANTHROPIC_BETA,
    NATIVE_NAME,
    anthropic_tool,
    from_anthropic,
    from_openai,
    openai_tool,
)
from ._computer_tool import DONE, action_tool, forced_choice, reference_image
from ._model_turn import traced_turn
from ._run_tools import family
from ._tool_agent import _budget_spent, _through

if TYPE_CHECKING:
    from ..agents._run import Run
    from ..env import Capability
    from ..models import ModelClient, ModelResponse, ToolCall

__all__ = ["ComputerAgent", "ComputerStats"]

SYSTEM_PROMPT = (
    "You operate a computer through your computer tool. Each turn you see the task, any "
    "reference image, and the current screen; answer with one call of the tool holding "
    "the actions to run next."
)
_SUFFIX = {"png": ".png", "jpeg": ".jpg"}
_MEDIA = {"png": "image/png", "jpeg": "image/jpeg"}


@dataclass(slots=True)
class ComputerStats:
    """What a `ComputerAgent` rollout did: in `run.metrics`, and on the last `assistant`
    step of `run.trace` as `data["computer"]`.

    Attributes:
        actions: actions run (the budget counts these).
        batches: valid batches run.
        invalid_batches: batches refused over the whole rollout (the lifetime count).
        invalid_streak: batches refused in a row at the end.
        frames: frames written (distinct files: a frame seen twice is one file).
    """

    actions: int = 0
    batches: int = 0
    invalid_batches: int = 0
    invalid_streak: int = 0
    frames: set[str] = field(default_factory=set)

    def to_dict(self) -> dict[str, int]:
        """The counters as JSON (`frames`: how many)."""
        counts = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**counts, "frames": len(self.frames)}


class ComputerAgent:
    """Drive a run's desktop (or browser) capability with a model, one batch per turn.

    Every turn the model sees the prompt, the task's reference image (if it gave one)
    and the current frame, and must call `computer_action` (the tool choice forces it;
    OpenAI's APIs hold it to the strict schema, the others are checked the same way
    here) with a non-empty batch of computer/1 actions that fits the actions left.
    The batch is validated whole; a valid one runs in order and only the frame after
    it returns, as an image file named by its digest in the rollout's frames folder.

    An invalid batch runs nothing and comes back as an error result saying why;
    `max_invalid` in a row end the rollout (`stop_reason="invalid_actions"`), a valid
    batch resets the streak. A response without the call, or with arguments that are
    not JSON, is malformed: the client retries it (`RetryPolicy.max_malformed` in a
    row), then the rollout ends with `stop_reason="malformed_responses"`. When
    `max_actions` have run the rollout ends with `stop_reason="action_budget"`. With
    `done`, the model ends it itself with a last action `{"type": "done"}`. In every
    case the task is then graded on the screen's final state; the counters
    (`ComputerStats`: actions, batches, invalid_batches, invalid_streak, frames) go to
    `run.metrics` and the last `assistant` step's data (`computer`).

    With `native`, the model gets its provider's own computer-use tool instead:
    Anthropic's `computer_20250124` on the Messages API (a client given here must send
    the `anthropic-beta: computer-use-2025-01-24` header; one made from a model string
    does) or OpenAI's `computer_use_preview` on the Responses API (its model wants
    `truncation="auto"` in `params`). Each call is mapped onto computer/1 actions
    (`docs/computer.md`) under the same budget and invalid-streak rules and answered
    with a screenshot, also when refused; the tool is offered, not forced, and a turn
    without a call is the answer.

    The task gives a reference image as `reference_image` in its first yield: a
    `data:` URL, or `{"media_type": "image/png", "data": <base64>}`.

    Before and after every model turn the history goes to `run.save_checkpoint`, each
    frame by its file name in the frames folder; a run with `restored` set continues
    from it, reading its frames back from that folder, and answers a batch a restart
    interrupted with the current screen (it is not run again).

    Args:
        model: a `ModelClient`, or a model string (a client is made per run).
        capability: the capability to drive (default: the run's first `computer`
            capability, else its first `cdp` one).
        max_actions: the rollout's action budget.
        max_invalid: invalid batches in a row that end the rollout.
        done: offer the `done` action.
        strict: ask for strict schema adherence where the API has it (OpenAI).
        system_prompt: the system message (None: none).
        context: history compaction; by default the last 3 frames are kept (the
            reference and the newest always are).
        frame: frame options (`format`, `quality`, `scale`) for `DesktopClient`.
        settle_ms: after each batch, wait at most this long for the screen to change
            and hold still before its frame is taken (apps redraw after the input); 0:
            take it at once.
        frames_dir: where frames are kept, in a folder per trace id; None: a temporary
            folder removed when the rollout ends.
        keep_frames: keep the `frames_dir` folder when the rollout ends (False: remove
            it then; a runner killed mid-rollout leaves it, so a resumed rollout
            continues with its frames).
        params: provider parameters for every call (`temperature`, `max_tokens`, ...).
        native: use the provider's native computer-use tool instead of `computer_action`.
    """

    records_turns = True
    """Its model turns land on the trace from here, not from an interception proxy."""

    def __init__(
        self,
        model: ModelClient | str,
        *,
        capability: str | None = None,
        max_actions: int = 5_000,
        max_invalid: int = 10,
        done: bool = True,
        strict: bool = True,
        system_prompt: str | None = SYSTEM_PROMPT,
        context: ContextPolicy | None = None,
        frame: Mapping[str, Any] | None = None,
        settle_ms: int = 300,
        frames_dir: str | Path | None = None,
        keep_frames: bool = True,
        params: Mapping[str, Any] | None = None,
        native: bool = False,
    ) -> None:
        for name, value in (("max_actions", max_actions), ("max_invalid", max_invalid)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, not {value!r}")
        if isinstance(settle_ms, bool) or not isinstance(settle_ms, int) or settle_ms < 0:
            raise ValueError(f"settle_ms must be an integer >= 0, not {settle_ms!r}")
        self.model = model
        self.capability = capability
        self.max_actions = max_actions
        self.max_invalid = max_invalid
        self.done = done
        self.system_prompt = system_prompt
        self.context = context if context is not None else ContextPolicy(max_frames=3)
        self.frame = dict(frame or {})
        self.settle_ms = settle_ms
        self.frames_dir = Path(frames_dir) if frames_dir is not None else None
        self.keep_frames = keep_frames
        self.params = dict(params or {})
        self.native = native
        self.tool = action_tool(done=done, strict=strict)

    def __repr__(self) -> str:
        name = self.model if isinstance(self.model, str) else self.model.model
        return f"ComputerAgent({name!r}, max_actions={self.max_actions})"

    async def __call__(self, run: Run) -> None:
        async with AsyncExitStack() as stack:
            client = await self._client(run, stack)
            cap = _capability(run, self.capability)
            desktop = DesktopClient(cap.url, **self.frame)
            stack.push_async_callback(desktop.aclose)
            folder = self._folder(run, stack)
            state = _Rollout(self, run, client, desktop, folder)
            try:
                await state.drive()
            finally:
                run.metrics.update(state.stats.to_dict())

    def _folder(self, run: Run, stack: AsyncExitStack) -> Path:
        if self.frames_dir is not None:
            folder = self.frames_dir / run.trace_id
            folder.mkdir(parents=True, exist_ok=True)
            if not self.keep_frames:
                stack.callback(shutil.rmtree, folder, ignore_errors=True)
            return folder
        folder = Path(tempfile.mkdtemp(prefix="proctor-frames-"))
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        return folder

    async def _client(self, run: Run, stack: AsyncExitStack) -> ModelClient:
        if not isinstance(self.model, str):
            return self.model
        from ..models import RetryPolicy, model_client

        session = run.proxy_session
        headers = {"anthropic-beta": ANTHROPIC_BETA} if self.native else None
        if session is None:
            client = model_client(self.model, headers=headers)
        else:
            client = model_client(
                _through(self.model, session.base_url),
                api_key=session.secret,
                retry=RetryPolicy(max_transport=1),
                headers=headers,
                profile=self.model if self.model.startswith("profile:") else None,
            )
        stack.push_async_callback(client.aclose)
        return client


class _Rollout:
    """One rollout's state: the history, the counters, the frames folder."""

    def __init__(
        self,
        agent: ComputerAgent,
        run: Run,
        client: ModelClient,
        desktop: DesktopClient,
        folder: Path,
    ) -> None:
        self.agent = agent
        self.run = run
        self.client = client
        self.desktop = desktop
        self.folder = folder
        self.stats = ComputerStats()
        self.api = api = getattr(client, "api", "chat")
        if agent.native and api not in ("messages", "responses"):
            raise ValueError(
                "ComputerAgent(native=True) needs the Anthropic Messages or the OpenAI "
                f"Responses API, not {api!r}"
            )
        self.params = dict(agent.params)
        if not agent.native:
            self.params["tool_choice"] = forced_choice(api)
        self.tool = agent.tool
        self.size = (0, 0)

    async def drive(self) -> None:
        info = await self.desktop.info()
        self.size = (int(info["width"]), int(info["height"]))
        if self.agent.native and self.api == "messages":
            self.tool = ToolSpec(NATIVE_NAME, native=anthropic_tool(*self.size))
        elif self.agent.native:
            kind = "browser" if info.get("kind") == "browser" else "linux"
            self.tool = ToolSpec(NATIVE_NAME, native=openai_tool(*self.size, kind))
        step, messages, pending = await self._start()
        if pending:
            messages += await self._interrupted(pending)
        while True:
            step += 1
            messages = self._compact(messages)
            self._save(messages, step - 1, in_flight=True)
            try:
                response = await self._turn(messages, step)
            except ModelError as exc:
                reason = _budget_spent(self.run)
                if (
                    reason is None
                    and isinstance(exc, RetriesExhausted)
                    and exc.cause == "malformed"
                ):
                    reason = "malformed_responses"
                if reason is None:
                    raise
                return self._end(reason, step - 1)
            messages.append(response.message)
            if not response.tool_calls:  # native only: the answer
                return self._end("answer", step, response.content)
            self._save(messages, step, pending=response.tool_calls)
            results, finished = await self._answer(response.tool_calls)
            messages += results
            if finished is not None:
                return self._end(finished, step, response.content)

    async def _start(self) -> tuple[int, list[dict[str, Any]], list[ToolCall]]:
        """Turns done, the history and the calls to answer: fresh, or from the run's
        checkpoint (`run.restored`), its frames read from the frames folder."""
        if not self.run.restored:
            return 0, await self._opening(), []
        turns, messages, stats, pending = restore(self.run.restored, self.folder)
        for name in ("actions", "batches", "invalid_batches", "invalid_streak"):
            setattr(self.stats, name, int(stats.get(name, 0)))
        self.stats.frames = set(stats.get("digests") or ())
        return turns, messages, pending

    async def _interrupted(self, calls: list[ToolCall]) -> list[dict[str, Any]]:
        """Answer the calls a restart left unanswered with the screen as it is now: their
        actions may have run in part, so they are not run again (nor counted)."""
        frame = self._image(await self.desktop.screenshot())
        note = "Interrupted by a restart while this ran: it may have run in part. The screen now:"
        content = [_dict(note), _dict(frame)]
        results = []
        for call in calls:
            self.run.trace.add("tool_result", content, id=call.id, name=call.name)
            results.append({"role": "tool", "tool_call_id": call.id, "content": content})
        return results

    def _save(
        self,
        messages: list[dict[str, Any]],
        turns: int,
        *,
        in_flight: bool = False,
        pending: list[ToolCall] | None = None,
    ) -> None:
        stats = {**self.stats.to_dict(), "digests": sorted(self.stats.frames)}
        state = checkpoint(
            messages,
            self.folder,
            turns=turns,
            stats=stats,
            in_flight=in_flight,
            pending=pending or (),
        )
        self.run.save_checkpoint(state)

    async def _opening(self) -> list[dict[str, Any]]:
        run, agent = self.run, self.agent
        prompt = run.prompt
        text = prompt if isinstance(prompt, str) else orjson.dumps(prompt).decode()
        parts: list[Any] = [TextPart(text)]
        ref = reference_image(run.start_result.get("reference_image"))
        if ref is not None:
            media_type, data = ref
            suffix = ".png" if media_type == "image/png" else ".jpg"
            path, digest = self._keep(data, suffix)
            parts += ["Reference image:", ImagePart.file(path, sha256=digest, reference=True)]
        frame = await self.desktop.screenshot()
        parts += [f"Current screen ({frame.width}x{frame.height}):", self._image(frame)]
        messages: list[dict[str, Any]] = []
        if agent.system_prompt is not None:
            messages.append({"role": "system", "content": agent.system_prompt})
        messages.append({"role": "user", "content": [_dict(p) for p in parts]})
        return messages

    def _compact(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from ..models import compact

        policy = self.agent.context
        messages = compact(messages, policy)
        if policy.max_frames is not None:
            messages, _ = drop_frames(messages, max_frames=policy.max_frames)
        return messages

    async def _turn(self, messages: list[dict[str, Any]], step: int) -> ModelResponse:
        return await traced_turn(
            self.run,
            self.client,
            messages,
            [self.tool],
            step=step,
            require_tool_call=not self.agent.native,
            **self.params,
        )

    async def _answer(self, calls: list[ToolCall]) -> tuple[list[dict[str, Any]], str | None]:
        """A tool message per call (each must answer), and why the rollout ends, if it does.

        Only the first call runs; any further call in the same turn is refused.
        """
        results: list[dict[str, Any]] = []
        finished: str | None = None
        for i, call in enumerate(calls):
            t0 = time.time()
            self.run.trace.add(
                "tool_call", {"name": call.name, "arguments": call.arguments}, id=call.id
            )
            content: str | list[Any]
            if i > 0:
                content, is_error = f"not run: one {self.tool.name} call per turn", True
            else:
                content, is_error, finished = await self._batch(call)
            content = content if isinstance(content, str) else [_dict(p) for p in content]
            self.run.trace.add(
                "tool_result", content, start=t0, id=call.id, name=call.name, is_error=is_error
            )
            results.append({"role": "tool", "tool_call_id": call.id, "content": content})
        return results, finished

    async def _batch(self, call: ToolCall) -> tuple[str | list[Any], bool, str | None]:
        """Run one call's batch: (the result content, whether it is an error, an end)."""
        stats, agent = self.stats, self.agent
        left = agent.max_actions - stats.actions
        actions, done, problem = self._check(call, left)
        if problem is not None:
            return await self._refused(problem, left)
        frame = None
        if actions:
            try:
                frame = await self.desktop.act(actions, settle_ms=agent.settle_ms)
            except RemoteError as exc:
                if exc.code != -32602:  # -32000: an action failed while running
                    raise
                return await self._refused(exc.message, left)  # the server's: nothing ran
        elif not done:  # a native screenshot or cursor_position
            frame = await self.desktop.screenshot()
        stats.invalid_streak = 0
        stats.batches += 1
        stats.actions += len(actions)
        left -= len(actions)
        if frame is None:
            return f"Done after {len(actions)} more action(s).", False, DONE
        note = f"Ran {len(actions)} action(s); cursor at {frame.cursor}; {left} actions left."
        end = DONE if done else ("action_budget" if left <= 0 else None)
        return [note, self._image(frame)], False, end

    def _check(self, call: ToolCall, left: int) -> tuple[list[dict[str, Any]], bool, str | None]:
        """The batch's actions (done stripped), whether it ends with `done`, a problem."""
        if call.name != self.tool.name:
            return [], False, f"unknown tool {call.name!r}: call {self.tool.name}"
        if self.agent.native:
            parse = from_anthropic if self.api == "messages" else from_openai
            try:
                return self._fits(parse(call.arguments), False, left)
            except ValueError as exc:
                return [], False, str(exc)
        extra = sorted(set(call.arguments) - {"actions"})
        if extra:
            return [], False, f"unknown argument {extra[0]!r}"
        actions = call.arguments.get("actions")
        if not isinstance(actions, list) or not actions:
            return [], False, "actions must be a non-empty list"
        done = self.agent.done and actions[-1] == {"type": DONE}
        actions = actions[:-1] if done else actions
        for i, item in enumerate(actions):
            if isinstance(item, dict) and item.get("type") == DONE:
                return [], False, f"actions[{i}]: done must be the last action"
        return self._fits(actions, done, left)

    def _fits(
        self, actions: list[dict[str, Any]], done: bool, left: int
    ) -> tuple[list[dict[str, Any]], bool, str | None]:
        if len(actions) > left:
            return [], False, f"{len(actions)} actions, but only {left} are left in the budget"
        if actions:
            try:
                validate_actions(actions, *self.size, known_key=_any_key)
            except ValueError as exc:
                return [], False, str(exc)
        return actions, done, None

    async def _refused(self, problem: str, left: int) -> tuple[str | list[Any], bool, str | None]:
        """Count an invalid batch; the observation (with a screenshot for a native call,
        which is answered with one whatever happened), and the end when the streak is up."""
        stats, limit = self.stats, self.agent.max_invalid
        stats.invalid_batches += 1
        stats.invalid_streak += 1
        text = (
            f"Invalid batch, nothing ran: {problem}. "
            f"({stats.invalid_streak} invalid in a row; the rollout ends at {limit}; "
            f"{left} actions left.)"
        )
        end = "invalid_actions" if stats.invalid_streak >= limit else None
        if not self.agent.native:
            return text, True, end
        return [text, self._image(await self.desktop.screenshot())], True, end

    def _image(self, frame: Frame) -> ImagePart:
        path, digest = self._keep(frame.data, _SUFFIX.get(frame.format, ".png"))
        return ImagePart.file(path, media_type=_MEDIA.get(frame.format), sha256=digest)

    def _keep(self, data: bytes, suffix: str) -> tuple[Path, str]:
        """Write `data` once into the frames folder, named by its digest."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.folder / f"{digest}{suffix}"
        if digest not in self.stats.frames and not path.exists():
            partial = path.with_suffix(".part")
            partial.write_bytes(data)
            partial.replace(path)
        self.stats.frames.add(digest)
        return path, digest

    def _end(self, reason: str, steps: int, text: str | None = None) -> None:
        run = self.run
        if reason not in (DONE, "answer"):
            run.stop_reason = run.stop_reason or reason
        run.trace.content = text
        run.trace.add(
            "assistant",
            text,
            stop_reason=reason,
            steps=steps,
            computer=self.stats.to_dict(),
        )


def _capability(run: Run, name: str | None) -> Capability:
    """The capability to drive.

    Raises:
        ValueError: the named one is missing, or the run has no computer/cdp capability.
    """
    if name is not None:
        return run.binding(name)
    manifest = run.client.manifest if run.client is not None else None
    bindings = list(manifest.bindings) if manifest is not None else []
    for wanted in ("computer", "cdp"):
        for binding in bindings:
            if family(binding.protocol) == wanted:
                return run.binding(binding.name)
    raise ValueError("ComputerAgent: the environment has no desktop or browser capability")


def _malformed(exc: ModelError) -> bool:
    """The model kept answering without a usable `computer_action` call."""
    return isinstance(exc, RetriesExhausted) and exc.cause == "malformed"


def _any_key(name: str) -> bool:
    """Key names are the server's to check (it refuses an unknown one before running)."""
    return True


def _dict(part: Any) -> Any:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    return part.to_dict()
