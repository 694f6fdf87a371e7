"""The `user` capability: a simulated user the agent must talk to (multi-turn dialogue tasks).

`UserServer` runs on the environment's side (`env.add_user()`); a template opens one
`Dialogue` per episode with the user who answers (`scripted([...])`, a `ModelUser`, or
any function of the messages so far) and publishes its binding with the prompt:

```python
user = env.add_user()

@env.template
async def refund(order: str):
    dialogue = user.open(scripted(["It is order 42.", "Yes, refund it."]))
    answer = yield {"prompt": "Help the customer.", "bindings": {"user": dialogue.binding}}
    yield 1.0 if "refund" in dialogue.transcript().lower() else 0.0
```

The agent side talks through `UserClient(run.binding("user"))` (`proctor.agents`).

Protocol (user/1). A connection on the server's Unix socket (in a 0700 directory,
reached only through the control channel's tunnel) carries one request line and gets
one reply line, both UTF-8 JSON objects:

    request  {"dialogue": str, "text": str}
    reply    {"reply": str | null}        null: the user ended the dialogue
    error    {"error": {"code": int, "message": str}}

A message sent after the user ended the dialogue gets `{"reply": null}` again; an
unknown dialogue id or a bad field gets code -32602, a line over 1 MiB -32600, a
user function that raised -32000 (its message names the cause).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import secrets
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from ._capability_server import CapabilityServer
from ._judge import Judge
from ._line_protocol import BAD_REQUEST, FAILED, TOO_LARGE, _LineError, read_request
from ._rewards import CURRENT_EPISODE

__all__ = ["Dialogue", "Message", "ModelUser", "UserFn", "UserServer", "scripted"]

MAX_LINE = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a dialogue: `role` is `agent` (what the agent said) or `user`."""

    role: Literal["agent", "user"]
    text: str
    at: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"role": self.role, "text": self.text, "at": self.at}


UserFn = Callable[[Sequence[Message]], "Awaitable[str | None] | str | None"]
"""A simulated user: given the dialogue so far (ending with the agent's message), its
reply, or None to end the dialogue."""


def scripted(lines: Sequence[str], *, done: Callable[[str], bool] | None = None) -> UserFn:
    """A user who answers with `lines` in order, then ends the dialogue.

    Args:
        lines: the replies, one per agent message.
        done: ends the dialogue early when it is true of the agent's latest message
            (e.g. the agent said goodbye).
    """
    replies = list(lines)

    def reply(messages: Sequence[Message]) -> str | None:
        if done is not None and messages and done(messages[-1].text):
            return None
        asked = sum(1 for m in messages if m.role == "agent")
        return replies[asked - 1] if 0 < asked <= len(replies) else None

    return reply


class ModelUser:
    """A user played by a model with a persona and a goal.

    Each agent message asks the model (through `endpoint`, an OpenAI-compatible chat
    endpoint, e.g. a `Judge`) for the user's next line; a reply containing `stop` ends
    the dialogue (the text before it is not sent). The model sees the dialogue with
    roles swapped: the agent's messages as `user`, its own as `assistant`.

    Without `endpoint`, made while a task run starts (in the template's body or a
    setup hook), it asks the run's user model: a proxy session the driver opened for
    this rollout (`proctor run --user-model`, a batch's `user_model`), whose secret is
    all the environment sees; its turns are priced on the run and marked
    `data["user"]` on the trace. A driver that resumes the run sends its own session
    (`tasks.user`), which the next message asks.

    Args:
        persona: who the user is.
        goal: what the user wants from the conversation.
        endpoint: where the model answers, or a function returning it when first asked
            (default: the run's user model).
        model: the model to ask (default: the endpoint's).
        stop: the marker the model writes when the user is done.
        max_turns: the dialogue ends after this many replies to the agent.
    """

    def __init__(
        self,
        persona: str,
        goal: str,
        endpoint: Judge | Callable[[], Judge] | None = None,
        *,
        model: str | None = None,
        stop: str = "###DONE###",
        max_turns: int = 10,
    ) -> None:
        self.persona = persona
        self.goal = goal
        self.endpoint = endpoint
        self._episode = CURRENT_EPISODE.get()  # its user model, read when asked
        self.model = model
        self.stop = stop
        self.max_turns = max_turns

    def system_prompt(self) -> str:
        """What the model is told it is."""
        return (
            f"You play a user talking to an assistant. You are: {self.persona}\n"
            f"Your goal: {self.goal}\nReply with the user's next message only. When your goal"
            f" is met or cannot be, write {self.stop} (alone, or after a last short message)."
        )

    async def __call__(self, messages: Sequence[Message]) -> str | None:
        """The user's next message, or None when the dialogue is over."""
        if sum(1 for m in messages if m.role == "agent") > self.max_turns:
            return None
        endpoint = self._endpoint()
        chat: list[dict[str, Any]] = [{"role": "system", "content": self.system_prompt()}]
        chat += [
            {"role": "user" if m.role == "agent" else "assistant", "content": m.text}
            for m in messages
        ]
        text = await endpoint.complete(chat, model=self.model)
        if self.stop in text:
            return None
        return text.strip()

    def _endpoint(self) -> Judge:
        if isinstance(self.endpoint, Judge):
            return self.endpoint
        if self.endpoint is not None:
            return self.endpoint()
        params = None if self._episode is None else self._episode.user_model
        try:
            endpoint = Judge.from_params(params) if params else None
        except ValueError as exc:
            raise ValueError(f"the run's user model (tasks.start's `user` param): {exc}") from None
        if endpoint is None:
            raise RuntimeError(
                "ModelUser has no endpoint and the run has no user model: run with "
                "`--user-model` (a batch: `user_model`), or pass endpoint="
            )
        return endpoint


class Dialogue:
    """One episode's conversation between the agent and its simulated user.

    `messages` holds both sides in order; `done` is set once the user ended it.
    """

    def __init__(self, user: UserFn, *, opening: str | None = None) -> None:
        self.id = secrets.token_urlsafe(16)
        self.user = user
        self.messages: list[Message] = []
        self.done = False
        self._lock = asyncio.Lock()
        if opening is not None:
            self.messages.append(Message("user", opening, time.time()))

    def __repr__(self) -> str:
        return f"<Dialogue {len(self.messages)} messages{' done' if self.done else ''}>"

    @property
    def binding(self) -> dict[str, str]:
        """The per-episode binding data the agent needs (`{"dialogue": id}`)."""
        return {"dialogue": self.id}

    def transcript(self) -> str:
        """The dialogue as text, one `role: text` line per message."""
        return "\n".join(f"{m.role}: {m.text}" for m in self.messages)

    def to_list(self) -> list[dict[str, Any]]:
        """The messages, JSON-ready (e.g. for a grade's `info`)."""
        return [m.to_dict() for m in self.messages]

    async def send(self, text: str) -> str | None:
        """Record the agent's `text` and return the user's reply (None: dialogue over)."""
        async with self._lock:
            if self.done:
                return None
            self.messages.append(Message("agent", text, time.time()))
            reply = self.user(list(self.messages))
            if inspect.isawaitable(reply):
                reply = await reply
            if reply is None:
                self.done = True
                return None
            if not isinstance(reply, str):
                raise TypeError(f"the user gave {type(reply).__name__}, not a str or None")
            self.messages.append(Message("user", reply, time.time()))
            return reply


class UserServer(CapabilityServer):
    """Serves simulated users on a private Unix socket (protocol in the module doc; `url`:
    `unix:///<private folder>/user.sock`).

    Dialogues are opened by task code (`open`) and found by their id; ids are random,
    so one agent cannot reach another episode's user by guessing. The server holds
    them weakly: a dialogue its task let go of (an episode that ended, or was
    abandoned) is gone without `close`. Stopping ends every conversation in flight (a
    user still thinking is cancelled).
    """

    kind = "user"
    max_line = MAX_LINE

    def __init__(self) -> None:
        super().__init__()
        self._dialogues: weakref.WeakValueDictionary[str, Dialogue] = weakref.WeakValueDictionary()

    def __repr__(self) -> str:
        return f"<UserServer {len(self._dialogues)} dialogues>"

    def open(self, user: UserFn, *, opening: str | None = None) -> Dialogue:
        """A new dialogue with `user`; `opening` is a first message from the user.

        Opened while a task run starts, it is that run's: rewards naming `dialogue`
        get its messages."""
        dialogue = Dialogue(user, opening=opening)
        self._dialogues[dialogue.id] = dialogue
        episode = CURRENT_EPISODE.get()
        if episode is not None:  # the `dialogue` rewards of this task run get it
            episode.dialogues.append(dialogue)
        return dialogue

    def close(self, dialogue: Dialogue) -> None:
        """Forget `dialogue` (its messages stay on the object)."""
        self._dialogues.pop(dialogue.id, None)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reply: dict[str, Any] | None = None
        try:
            try:
                line = await reader.readline()
            except (ValueError, asyncio.LimitOverrunError):
                line = b""
                reply = _error(TOO_LARGE, f"a request line is at most {MAX_LINE} bytes")
            if line:  # answered in a task of its own, which `aclose` cancels
                answer = self._in_flight(self._answer(line))
                await asyncio.wait({answer})
                if answer.cancelled():
                    return
                reply = answer.result()
            if reply is not None:
                writer.write(orjson.dumps(reply) + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = read_request(line)
        except _LineError as exc:
            return _error(exc.code, str(exc))
        text, key = request.get("text"), request.get("dialogue")
        if not isinstance(text, str) or not isinstance(key, str):
            return _error(BAD_REQUEST, "the request needs `dialogue` and `text` strings")
        dialogue = self._dialogues.get(key)
        if dialogue is None:
            return _error(BAD_REQUEST, "no such dialogue (the task opened none with this id)")
        try:
            return {"reply": await dialogue.send(text)}
        except Exception as exc:
            return _error(FAILED, f"the simulated user failed: {type(exc).__name__}: {exc}")


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
