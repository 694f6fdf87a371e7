"""`FakeModelServer`: OpenAI and Anthropic wire formats from a script, with faults on command."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeAlias

from .._http import Abort, HttpServer, Request, Response
from .._resource import AsyncResource
from ._fake_model_anthropic import compaction_problem, messages_body, messages_events
from ._fake_model_errors import error_response
from ._fake_model_images import images_of
from ._fake_model_openai import chat_body, chat_events, responses_body, responses_events
from ._fake_model_reply import FakeToolCall, Fault, Reply
from ._fake_model_request import Api, FakeRequest, json_body
from ._fake_model_turn import Turn, make_turn

__all__ = ["FakeModelServer", "Policy", "echo"]

ReplyLike: TypeAlias = Reply | str
Policy: TypeAlias = Callable[[FakeRequest], ReplyLike | Awaitable[ReplyLike]]

_ROUTES: dict[str, Api] = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/v1/models": "models",
}
_JSON = ("content-type", "application/json")
_SSE = [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache")]
# A reset mid-body waits this long after the partial body, so the client reads it
# before the reset (a reset can discard data the peer has not read yet).
_RESET_AFTER = 0.02
_BROKEN_ARGUMENTS = '{"path": "/tmp'
ANTHROPIC_MAX_BODY = 32 * 1024 * 1024
"""The Messages API's request size limit, which the fake answers 413 beyond."""


def echo(request: FakeRequest) -> Reply:
    """The default policy: answer "echo: " and the start of the last message's text."""
    last = request.last_message
    text = last.get("content") if last else None
    return Reply(text=f"echo: {text[:200] if isinstance(text, str) else ''}")


class FakeModelServer(AsyncResource):
    """A local model server speaking OpenAI Chat Completions, OpenAI Responses and
    Anthropic Messages (`POST /v1/chat/completions`, `/v1/responses`, `/v1/messages`;
    `GET /v1/models`), streaming or not, from a script or a policy function.

    Every request lands on `requests` (unless `record` is off). Faults queued with
    `inject` are played, one per model request, before the policy is asked (so a failed
    attempt does not use up a scripted reply). A policy that raises, or a script that
    runs out, answers 400 (not retried by clients) and lands on `errors`.

    Requests are checked as the provider checks them: required fields, and image parts
    (where each API allows them, valid base64 of the stated media type: see
    `FakeRequest.images`), else 400; a body over `max_body` (Anthropic: 32 MiB by
    default) gets 413. Neither uses up a fault or a scripted reply.

    Usage:
        async with FakeModelServer([Reply.tool("shell", command="ls"), "done"]) as fake:
            client = openai.AsyncOpenAI(base_url=fake.url, api_key="x")
            fake.inject(Fault.status(429, retry_after=1))

    Args:
        policy: what to answer. None: `echo`. A `Reply` or string: always that. A
            callable: called with each `FakeRequest`, returning a `Reply` or string (or
            an awaitable of one). Any other iterable: its replies in turn.
        host: the address to bind.
        port: the port to bind; 0 picks a free one.
        models: the model ids `GET /v1/models` lists.
        record: keep each request on `requests`. Turn it off for long benchmark runs,
            where the log (each entry holds its parsed body) would grow without bound.
        max_body: the largest request body in bytes, for every API; None: Anthropic's
            32 MiB for Messages, no limit for the OpenAI APIs (the HTTP server's own
            64 MiB cap aside).
    """

    def __init__(
        self,
        policy: Policy | ReplyLike | Iterable[ReplyLike] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Iterable[str] = ("fake-model",),
        record: bool = True,
        max_body: int | None = None,
    ) -> None:
        self.requests: list[FakeRequest] = []
        self.max_body = max_body
        self.errors: list[Exception] = []
        self.models = tuple(models)
        self.record = record
        self._policy = _as_policy(policy)
        self._faults: deque[Fault] = deque()
        self._http = HttpServer(self._handle, host=host, port=port)
        self._tag = secrets.token_hex(4)
        self._serial = itertools.count(1)

    @property
    def url(self) -> str:
        """The OpenAI base URL, ending in `/v1` (after `start`)."""
        return self._http.url + "/v1"

    @property
    def origin(self) -> str:
        """`http://host:port`: the Anthropic base URL (its SDK appends `/v1/messages`)."""
        return self._http.url

    @property
    def pending_faults(self) -> tuple[Fault, ...]:
        """Injected faults not yet played, in order."""
        return tuple(self._faults)

    def inject(self, *faults: Fault, times: int = 1) -> None:
        """Queue `faults` (the sequence repeated `times` times) for the next requests."""
        for _ in range(times):
            self._faults.extend(faults)

    async def start(self) -> None:
        """Bind and start serving."""
        await self._http.start()

    async def aclose(self) -> None:
        """Stop serving; requests in flight get a few seconds to finish."""
        await self._http.aclose()

    # -- serving ---------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        serial = f"{self._tag}{next(self._serial):06d}"
        api = _ROUTES.get(request.path)
        anthropic = api == "messages" or "anthropic-version" in request.headers
        if api is None:
            return error_response(anthropic, 404, serial, f"Unknown path {request.path}.")
        method = "GET" if api == "models" else "POST"
        if request.method != method:
            return error_response(anthropic, 405, serial, f"Use {method}.")
        if api == "models":
            return self._models(anthropic)
        return await self._answer(request, api, serial, anthropic)

    async def _answer(self, request: Request, api: Api, serial: str, anthropic: bool) -> Response:
        """A model call: the next fault if one is queued, else the policy's reply."""
        body = json_body(request.body)
        limit = self.max_body or (ANTHROPIC_MAX_BODY if api == "messages" else None)
        too_large = limit is not None and len(request.body) > limit
        problem = None if too_large else _invalid(api, body) or images_of(api, body)[1]
        if problem is None and not too_large and api == "messages":
            problem = compaction_problem(request.headers.get("anthropic-beta"), body)
        fake = self._arrived(api, request, body, valid=problem is None and not too_large)
        fault = fake.fault
        if too_large:
            return error_response(anthropic, 413, serial)
        if problem is not None:
            return error_response(anthropic, 400, serial, problem)
        if fault is not None and fault.kind != "slow":
            return self._fault(fake, fault, serial, anthropic)
        reply = await self._reply(fake)
        if isinstance(reply, str):
            return error_response(anthropic, 400, serial, reply)
        return _render(fake, make_turn(fake, reply, serial), _id_header(anthropic, serial))

    def _arrived(self, api: Api, request: Request, body: Any, *, valid: bool) -> FakeRequest:
        """A model call as recorded, with the next queued fault if it is `valid`."""
        fault = self._faults.popleft() if self._faults and valid else None
        fake = FakeRequest(
            api,
            request.method,
            request.path,
            request.headers,
            request.body,
            body,
            time.time(),
            fault,
        )
        self._record(fake)
        return fake

    async def _reply(self, request: FakeRequest) -> Reply | str:
        """The policy's reply, after a `slow` fault's pause and then the reply's own
        delay; the error to answer 400 with if the policy raised."""
        if request.fault is not None:
            await asyncio.sleep(request.fault.seconds)
        try:
            reply = await self._policy(request)
        except Exception as exc:
            self.errors.append(exc)
            return f"fake model policy: {exc!r}"
        if reply.delay:
            await asyncio.sleep(reply.delay)
        return reply

    def _record(self, request: FakeRequest) -> None:
        if self.record:
            self.requests.append(request)

    def _fault(self, request: FakeRequest, fault: Fault, serial: str, anthropic: bool) -> Response:
        if fault.kind == "status":
            headers = fault.headers
            if fault.retry_after is not None:
                headers = (("retry-after", f"{fault.retry_after:g}"), *headers)
            return error_response(anthropic, fault.code, serial, fault.message, headers)
        if fault.kind == "missing_tool_calls":
            name = next(iter(request.tool_names), "tool")
            reply = (
                Reply(tool_calls=(FakeToolCall(name, _BROKEN_ARGUMENTS),))
                if fault.broken_arguments
                else Reply(finish_reason="tool_calls")
            )
            return _render(
                request, make_turn(request, reply, serial), _id_header(anthropic, serial)
            )
        if fault.kind == "reset" and not fault.mid_body:
            raise Abort
        payload = _payload(request, make_turn(request, echo(request), serial))
        return _cut(payload) if fault.kind == "reset" else _malformed(payload)

    def _models(self, anthropic: bool) -> Response:
        if anthropic:
            listing: list[dict[str, Any]] = [
                {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                for m in self.models
            ]
            first, last = (self.models[0], self.models[-1]) if self.models else (None, None)
            body = {"data": listing, "has_more": False, "first_id": first, "last_id": last}
            return Response.json(body)
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "proctor"} for m in self.models
        ]
        return Response.json({"object": "list", "data": data})


def _as_policy(
    policy: Policy | ReplyLike | Iterable[ReplyLike] | None,
) -> Callable[[FakeRequest], Awaitable[Reply]]:
    """Turn any accepted policy form into one coroutine function."""
    if policy is None:
        policy = echo
    if isinstance(policy, Reply | str):
        fixed = _as_reply(policy)
        policy = lambda _request: fixed  # noqa: E731
    if not callable(policy):
        return _scripted(iter(policy))
    call = policy

    async def ask(request: FakeRequest) -> Reply:
        result = call(request)
        if inspect.isawaitable(result):
            result = await result
        return _as_reply(result)

    return ask


def _scripted(script: Iterator[ReplyLike]) -> Callable[[FakeRequest], Awaitable[Reply]]:
    served = 0

    async def ask(request: FakeRequest) -> Reply:
        nonlocal served
        try:
            reply = next(script)
        except StopIteration:
            raise LookupError(f"the script ran out after {served} replies") from None
        served += 1
        return _as_reply(reply)

    return ask


def _as_reply(value: object) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(text=value)
    raise TypeError(f"a policy returns a Reply or a str, not {type(value).__name__}")


def _invalid(api: Api, body: Any) -> str | None:
    """What the real API would refuse about this body, briefly; None when it is fine."""
    if not isinstance(body, dict):
        return "The request body is not a JSON object."
    required = {
        "chat": ("model", "messages"),
        "responses": ("model", "input"),
        "messages": ("model", "messages", "max_tokens"),
    }[api]
    for field in required:
        if field not in body:
            return f"Missing required parameter: '{field}'."
    if api == "chat" and "/routers/" in str(body["model"]) and "service_tier" in body:
        return "service_tier is not supported for router models."  # Fireworks
    thinking = body.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    if api == "messages" and isinstance(budget, int) and budget >= body["max_tokens"]:
        return "`max_tokens` must be greater than `thinking.budget_tokens`."
    return None


def _id_header(anthropic: bool, serial: str) -> list[tuple[str, str]]:
    return [("request-id" if anthropic else "x-request-id", serial)]


def _render(request: FakeRequest, turn: Turn, headers: list[tuple[str, str]]) -> Response:
    """The 200 response for `turn` in the request's API, streamed when asked."""
    payload = _payload(request, turn)
    if isinstance(payload, bytes):
        return Response(200, [_JSON, *headers], payload)
    return Response(200, _SSE + headers, paced(payload, turn.chunk_delay))


def _payload(request: FakeRequest, turn: Turn) -> bytes | list[bytes]:
    """`turn` in the request's API: a JSON body, or SSE frames when streaming."""
    api = request.api
    if request.stream:
        if api == "chat":
            return chat_events(turn)
        if api == "responses":
            return responses_events(turn, request.json)
        return messages_events(turn)
    if api == "chat":
        return chat_body(turn)
    if api == "responses":
        return responses_body(turn, request.json)
    return messages_body(turn)


async def paced(frames: list[bytes], delay: float) -> AsyncIterator[bytes]:
    """The frames (SSE or AWS events) as one write, or one at a time `delay` seconds apart."""
    if not delay:
        yield b"".join(frames)
        return
    for i, frame in enumerate(frames):
        if i:
            await asyncio.sleep(delay)
        yield frame


def _cut(payload: bytes | list[bytes]) -> Response:
    """Half of the body, then a connection reset."""
    if isinstance(payload, bytes):
        headers = [_JSON, ("content-length", str(len(payload)))]
    else:
        headers, payload = _SSE, b"".join(payload)

    async def half() -> AsyncIterator[bytes]:
        yield payload[: len(payload) // 2]
        await asyncio.sleep(_RESET_AFTER)
        raise Abort

    return Response(200, headers, half())


def _malformed(payload: bytes | list[bytes]) -> Response:
    """The body with its JSON cut short (when streaming, one event's JSON in the middle)."""
    if isinstance(payload, bytes):
        return Response(200, [_JSON], payload[: len(payload) // 2])
    frames = list(payload)
    middle = len(frames) // 2
    frames[middle] = frames[middle][: len(frames[middle]) // 2].rstrip(b"\n") + b"\n\n"
    return Response(200, _SSE, paced(frames, 0.0))
