"""A reply resolved against its request: tokens, usage, ids, what every format renders.

Tokens are fake but stable: text splits into word-like pieces (a space joins the word
after it, as BPE vocabularies do), a piece's id is its CRC-32 modulo a vocabulary size,
and its logprob derives from the same hash. So the same text always yields the same
ids and logprobs, and `completion_tokens` equals the number of ids returned.

Prompt ids (vLLM's `return_token_ids`) come from a toy chat template: each message is a
role token (`<|user|>`) and its pieces (text, then each tool call's name and
arguments), and the prompt ends with `<|assistant|>`. An assistant message renders to
exactly the ids it was generated as, so a conversation's next prompt extends the last
prompt and completion, as a real template does.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from ._fake_model_reply import FakeToolCall, Reply
from ._fake_model_request import FakeRequest

__all__ = ["Call", "Turn", "groups", "make_turn", "token_id"]

VOCAB = 151_936
_PIECE = re.compile(r" ?[^\W\d_]+| ?\d{1,3}| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")
# Alternatives offered in top_logprobs after the sampled token.
_ALTERNATIVES = (
    " the", ",", " a", ".", " and", " to", " of", "\n", " is", " in",
    " that", " it", " for", ":", " you", " with", " on", " this", " be", "(",
)  # fmt: skip


def pieces(text: str) -> list[str]:
    """Split `text` into fake tokens that join back to it."""
    return _PIECE.findall(text)


def token_id(piece: str) -> int:
    """The fake vocabulary id of a token."""
    return zlib.crc32(piece.encode()) % VOCAB


@dataclass(slots=True)
class Call:
    """A tool call with its ids and tokens settled."""

    name: str
    arguments: str
    call_id: str
    item_id: str
    name_tokens: list[str]
    arg_tokens: list[str]
    native: bool = False

    @property
    def tokens(self) -> list[str]:
        """The call's tokens: its name, then its arguments."""
        return self.name_tokens + self.arg_tokens


@dataclass(slots=True)
class Turn:
    """Everything a wire format needs to render one reply to one request."""

    id: str
    created: int
    model: str
    text: str | None
    tokens: list[str]
    calls: list[Call]
    finish: str
    input_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    chunks: int | None
    chunk_delay: float
    include_usage: bool = False
    top_logprobs: int | None = None
    as_token_ids: bool = False
    prompt_ids: list[int] | None = None  # set when the request asks for token ids
    reasoning: str | None = None
    compaction: str | None = None

    def logprobs(self, tokens: list[str], *, with_bytes: bool = True) -> list[dict[str, Any]]:
        """Logprob entries for `tokens` (vLLM's `token_id:N` form when asked)."""
        return [self._entry(t, with_bytes) for t in tokens]

    @property
    def all_tokens(self) -> list[str]:
        """Every visible output token: the text's, then each call's."""
        return self.tokens + [t for call in self.calls for t in call.tokens]

    def token_ids(self, tokens: list[str]) -> list[int]:
        """The ids of `tokens`."""
        return [token_id(t) for t in tokens]

    def _entry(self, token: str, with_bytes: bool) -> dict[str, Any]:
        crc = zlib.crc32(token.encode())
        logprob = -((crc >> 8) % 1000) / 400
        top = [(token, logprob)] if self.top_logprobs else []
        alternatives = (a for a in _ALTERNATIVES if a != token)
        for rank, alt in zip(range(1, self.top_logprobs or 0), alternatives, strict=False):
            top.append((alt, logprob - 0.75 * rank))
        entry = self._token(token, logprob, with_bytes)
        entry["top_logprobs"] = [self._token(t, lp, with_bytes) for t, lp in top]
        return entry

    def _token(self, token: str, logprob: float, with_bytes: bool) -> dict[str, Any]:
        shown = f"token_id:{token_id(token)}" if self.as_token_ids else token
        if with_bytes:
            return {"token": shown, "logprob": logprob, "bytes": list(token.encode())}
        return {"token": shown, "logprob": logprob}


def make_turn(request: FakeRequest, reply: Reply, serial: str) -> Turn:
    """Settle ids, tokens, usage and the request's output options for `reply`."""
    body = request.json
    tokens = pieces(reply.text) if reply.text else []
    calls = [_call(tc, serial, i, request.api) for i, tc in enumerate(reply.tool_calls)]
    input_tokens = reply.input_tokens
    if input_tokens is None:
        input_tokens = max(1, (len(request.body) + 3) // 4)
    turn = Turn(
        id=serial,
        created=int(request.time),
        model=reply.model or request.model or "fake-model",
        text=reply.text,
        tokens=tokens,
        calls=calls,
        finish=reply.finish_reason or ("tool_calls" if calls else "stop"),
        input_tokens=input_tokens,
        cached_tokens=reply.cached_tokens,
        cache_write_tokens=reply.cache_write_tokens,
        output_tokens=(
            reply.output_tokens
            if reply.output_tokens is not None
            else len(tokens) + sum(len(c.tokens) for c in calls) + reply.reasoning_tokens
        ),
        reasoning_tokens=reply.reasoning_tokens,
        chunks=reply.chunks,
        chunk_delay=reply.chunk_delay,
        reasoning=reply.reasoning,
        compaction=reply.compaction if compacting(body) else None,
    )
    _apply_options(turn, request, body)
    if turn.prompt_ids is not None and reply.input_tokens is None:
        turn.input_tokens = len(turn.prompt_ids)
    return turn


def compacting(body: Any) -> bool:
    """Whether a Messages request enables server-side compaction (`compact_*` edit)."""
    management = body.get("context_management") if isinstance(body, dict) else None
    edits = management.get("edits") if isinstance(management, dict) else None
    return any(
        isinstance(e, dict) and str(e.get("type", "")).startswith("compact_") for e in edits or ()
    )


def _call(call: FakeToolCall, serial: str, i: int, api: str) -> Call:
    arguments = call.arguments
    text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    prefix = "toolu_" if api == "messages" else "call_"
    return Call(
        name=call.name,
        arguments=text,
        call_id=call.id or f"{prefix}{serial}_{i}",
        item_id=f"fc_{serial}_{i}",
        name_tokens=pieces(call.name),
        arg_tokens=pieces(text),
        native=call.native,
    )


def _apply_options(turn: Turn, request: FakeRequest, body: dict[str, Any]) -> None:
    """Read streaming usage, logprobs and token-id options from the request body."""
    if request.api == "chat":
        options = body.get("stream_options")
        turn.include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        if body.get("logprobs"):
            turn.top_logprobs = int(body.get("top_logprobs") or 0)
            turn.as_token_ids = bool(body.get("return_tokens_as_token_ids"))
        if body.get("return_token_ids"):
            turn.prompt_ids = _prompt_ids(request.messages)
    elif request.api == "responses" and "message.output_text.logprobs" in (
        body.get("include") or ()
    ):
        turn.top_logprobs = int(body.get("top_logprobs") or 0)


def _prompt_ids(messages: list[dict[str, Any]]) -> list[int]:
    """The toy chat template's ids for `messages`, ending with the assistant's turn."""
    ids: list[int] = []
    for message in messages:
        ids.append(token_id(f"<|{message.get('role')}|>"))
        ids += [token_id(p) for p in _message_pieces(message)]
    ids.append(token_id("<|assistant|>"))
    return ids


def _message_pieces(message: dict[str, Any]) -> list[str]:
    """A message's tokens: its text, then each tool call's name and arguments."""
    content = message.get("content")
    out = pieces(content) if isinstance(content, str) else []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            out += pieces(str(function.get("name") or ""))
            out += pieces(str(function.get("arguments") or ""))
    return out


def groups(tokens: list[str], chunks: int | None) -> list[list[str]]:
    """Split `tokens` into at most `chunks` consecutive runs (one per token when None)."""
    if chunks is None or chunks >= len(tokens):
        return [[t] for t in tokens]
    size = -(-len(tokens) // chunks)
    return [tokens[i : i + size] for i in range(0, len(tokens), size)]
