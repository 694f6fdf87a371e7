"""`InterceptionProxy`: an OpenAI- and Anthropic-compatible HTTP server in front of the
real provider, one secret per rollout.

A harness in any language points its base URL at the proxy and uses its rollout's
secret as the API key. Each request is attributed by that secret, checked against the
rollout's budgets, forwarded under the retry contract of `proctor.models` (the harness
sees only latency for throttling and 5xx), streamed back as it arrives, and recorded
as one turn on the rollout's trace. Real provider keys stay inside the proxy.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import HttpError
from .._http import Abort, ClientResponse, HttpClient, HttpServer, Request, Response, SSEParser
from ..models import (
    Clock,
    ModelSpec,
    Retrier,
    RetryPolicy,
    StreamAccumulator,
    Usage,
    check_response,
    classify_status,
    cost,
    parse_model,
    parse_response,
    retry_after_from,
    usage_from,
)
from ._session import Limits, ProxySession, Replay

if TYPE_CHECKING:
    from ..engine._records import Trace

__all__ = ["InterceptionProxy", "Upstream"]

log = logging.getLogger("proctor.proxy")

_APIS = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages"}
# Request headers a harness may pass through to the provider (never its credentials).
_PASS_UP = frozenset({"accept", "anthropic-version", "anthropic-beta", "openai-beta", "user-agent"})
# Response headers passed back to the harness.
_PASS_DOWN = frozenset({"content-type", "x-request-id", "request-id", "openai-processing-ms"})
_ENDED_KEPT = 100_000
_SSE_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the proxy forwards one family of APIs.

    Args:
        base_url: the provider's base URL (`https://api.openai.com/v1`,
            `https://api.anthropic.com`, `http://127.0.0.1:8000/v1` for vLLM).
        kind: `openai` (chat, responses, models) or `anthropic` (messages).
        api_key: the real key; kept out of repr, traces and logs.
        model: when set, replaces the `model` of every forwarded request.
    """

    base_url: str
    kind: str = "openai"
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None

    @classmethod
    def of(cls, target: str | ModelSpec | Upstream, kind: str) -> Upstream:
        """An upstream from a base URL, a model string (`anthropic/claude-...`) or a spec.

        A model string's key is read from its provider's environment variable now.
        """
        if isinstance(target, Upstream):
            return target
        if isinstance(target, str) and target.startswith(("http://", "https://")):
            return cls(target, kind)
        spec = parse_model(target) if isinstance(target, str) else target
        key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
        return cls(spec.base_url, kind, key, spec.model)

    def url(self, path: str) -> str:
        """The provider URL for a proxy path such as `/v1/chat/completions`."""
        base = self.base_url.rstrip("/")
        if self.kind == "anthropic":
            return base.removesuffix("/v1") + path
        return base + path.removeprefix("/v1") if base.endswith("/v1") else base + path

    def auth(self) -> list[tuple[str, str]]:
        """The provider's authentication headers."""
        if self.api_key is None:
            return []
        if self.kind == "anthropic":
            return [("x-api-key", self.api_key)]
        return [("authorization", f"Bearer {self.api_key}")]


class InterceptionProxy:
    """Serve `/v1/chat/completions`, `/v1/responses`, `/v1/messages` and `/v1/models`
    for many rollouts at once, each identified by its own secret.

    Args:
        openai: upstream for the OpenAI APIs (a base URL, a model string or `Upstream`).
        anthropic: upstream for `/v1/messages`.
        limits: default budgets for sessions opened without their own.
        retry: the retry policy for forwarding (default `RetryPolicy()`).
        clock: time source for backoff waits (tests pass a fake one).
        host, port: where to listen (default 127.0.0.1, a free port).
    """

    def __init__(
        self,
        openai: str | ModelSpec | Upstream | None = None,
        anthropic: str | ModelSpec | Upstream | None = None,
        *,
        limits: Limits | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.upstreams: dict[str, Upstream] = {}
        if openai is not None:
            self.upstreams["openai"] = Upstream.of(openai, "openai")
        if anthropic is not None:
            self.upstreams["anthropic"] = Upstream.of(anthropic, "anthropic")
        self.limits = limits or Limits()
        self.retry = retry or RetryPolicy()
        self.clock = clock
        self._server = HttpServer(self._handle, host=host, port=port)
        self._client = HttpClient()
        self._sessions: dict[str, ProxySession] = {}
        self._ended: dict[str, None] = {}  # secrets of ended sessions, oldest first
        self._rng = random.Random()  # jitter; one per proxy (seeding one per turn is slow)

    def __repr__(self) -> str:
        return f"<InterceptionProxy {self.base_url} sessions={len(self._sessions)}>"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (`http://127.0.0.1:PORT/v1`)."""
        return self._server.url + "/v1"

    @property
    def sessions(self) -> list[ProxySession]:
        """The open sessions (an ended one is forgotten but for its secret, for 409s)."""
        return list(self._sessions.values())

    async def start(self) -> None:
        """Listen."""
        await self._server.start()

    async def aclose(self) -> None:
        """Close every session, stop listening and drop upstream connections."""
        for session in list(self._sessions.values()):
            session.close()
        await self._server.aclose()
        await self._client.aclose()

    async def __aenter__(self) -> InterceptionProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def open_session(
        self,
        rollout_id: str | None = None,
        *,
        limits: Limits | None = None,
        trace: Trace | None = None,
    ) -> ProxySession:
        """Register a rollout; its turns land on `trace` (if given) and `session.turns`."""
        session = ProxySession(
            rollout_id or uuid.uuid4().hex,
            self.base_url,
            limits or self.limits,
            trace,
            self._forget,
        )
        self._sessions[session.secret] = session
        return session

    def close_session(self, session: ProxySession) -> None:
        """End a rollout: its secret now gets 409 (same as `session.close()`)."""
        session.close()

    def _forget(self, session: ProxySession) -> None:
        """Drop an ended session, keeping only its secret (for 409s), the last so many."""
        self._sessions.pop(session.secret, None)
        self._ended[session.secret] = None
        while len(self._ended) > _ENDED_KEPT:
            del self._ended[next(iter(self._ended))]

    # -- request handling -------------------------------------------------------------

    async def _handle(self, req: Request) -> Response:
        path = req.path
        api = _APIS.get(path)
        if api is None:
            if path == "/v1/models" and req.method == "GET":
                return await self._models(req)
            return _error("chat", 404, f"no route for {req.method} {path}", "not_found")
        if req.method != "POST":
            return _error(api, 405, f"{path} takes POST", "method_not_allowed")
        session = self._session_of(req)
        if session is None or session.closed:
            if self._secret_of(req) in self._ended:
                return _error(api, 409, "this rollout has ended", "rollout_ended")
            return _error(api, 401, "unknown or missing API key", "invalid_api_key")
        upstream = self.upstreams.get("anthropic" if api == "messages" else "openai")
        if upstream is None:
            return _error(api, 404, f"this proxy has no upstream for {path}", "not_found")
        try:
            body = orjson.loads(req.body)
        except orjson.JSONDecodeError as exc:
            return _error(api, 400, f"request body is not JSON: {exc}", "invalid_json")
        if not isinstance(body, dict):
            return _error(api, 400, "request body must be a JSON object", "invalid_json")
        key = req.headers.get("idempotency-key")
        if key is not None:
            replay = await _previous(session, key)
            if replay is not None:
                return Response(replay.status, replay.headers, replay.body)
        reason = session.over_limit()
        if reason is not None:
            session.stop_reason = session.stop_reason or reason
            return _error(api, 400, f"rollout limit reached: {reason}", reason)
        session.admitted += 1
        fut: asyncio.Future[Replay] | None = None
        if key is not None:
            fut = session.pending[key] = asyncio.get_running_loop().create_future()
        turn = _Turn(self, session, upstream, api, path, body, req, key, fut)
        return await turn.forward()

    def _session_of(self, req: Request) -> ProxySession | None:
        return self._sessions.get(self._secret_of(req))

    @staticmethod
    def _secret_of(req: Request) -> str:
        auth = req.headers.get("authorization")
        if auth is not None and auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        return req.headers.get("x-api-key") or ""

    async def _models(self, req: Request) -> Response:
        session = self._session_of(req)
        if session is None:
            return _error("chat", 401, "unknown or missing API key", "invalid_api_key")
        upstream = self.upstreams.get("openai")
        if upstream is None:
            return Response.json({"object": "list", "data": []})
        try:
            async with await self._client.request(
                "GET", upstream.url("/v1/models"), headers=upstream.auth()
            ) as resp:
                data = await resp.read()
        except HttpError as exc:
            return _error("chat", 502, f"upstream unreachable: {exc}", "upstream_error")
        return Response(resp.status, _down_headers(resp), data)


class _Turn:
    """One admitted request: forward with retries, relay, record, commit."""

    def __init__(
        self,
        proxy: InterceptionProxy,
        session: ProxySession,
        upstream: Upstream,
        api: str,
        path: str,
        body: dict[str, Any],
        req: Request,
        key: str | None,
        fut: asyncio.Future[Replay] | None,
    ) -> None:
        self.proxy = proxy
        self.session = session
        self.upstream = upstream
        self.api = api
        self.body = body
        self.key = key
        self.fut = fut
        self.url = upstream.url(path)
        self.stream = bool(body.get("stream"))
        self.retrier = Retrier(proxy.retry, proxy.clock, proxy._rng)
        self.start = time.time()
        self.t0 = time.perf_counter()
        self.payload = self._rewrite(req.body)
        headers = [(k, v) for k, v in req.headers.items() if k.lower() in _PASS_UP]
        if api == "messages" and "anthropic-version" not in req.headers:
            headers.append(("anthropic-version", "2023-06-01"))
        headers.append(("content-type", "application/json"))
        self.headers = headers + upstream.auth()

    def _rewrite(self, raw: bytes) -> bytes:
        """The bytes to send: the harness's own, unless the model is pinned or a stream
        needs its usage (`stream_options.include_usage`) to be metered."""
        changed = False
        if self.upstream.model is not None and self.body.get("model") != self.upstream.model:
            self.body["model"] = self.upstream.model
            changed = True
        if self.stream and self.api == "chat":
            opts = self.body.get("stream_options")
            if not (isinstance(opts, dict) and opts.get("include_usage")):
                self.body["stream_options"] = {**(opts or {}), "include_usage": True}
                changed = True
        return orjson.dumps(self.body) if changed else raw

    async def forward(self) -> Response:
        try:
            return await self._forward()
        except asyncio.CancelledError:  # the harness hung up before an answer
            self._record(None, None, "client disconnected")
            self._release()
            raise

    async def _forward(self) -> Response:
        client = self.proxy._client
        clock = self.retrier.clock
        while True:
            t0 = clock.now()
            try:
                resp = await client.request(
                    "POST", self.url, headers=self.headers, body=self.payload
                )
            except HttpError as exc:
                wait = self._attempt("transport", None, str(exc), None, t0)
                if wait is None:
                    return self._give_up(502, f"upstream unreachable: {exc}")
                if not await self._backoff(wait):
                    return self._ended()
                continue
            if 200 <= resp.status < 300 and self.stream:
                return self._relay(resp)
            try:
                data = await resp.read()
            except HttpError as exc:
                await resp.aclose()
                wait = self._attempt("transport", resp.status, str(exc), None, t0)
                if wait is None:
                    return self._give_up(502, f"upstream broke off: {exc}")
                if not await self._backoff(wait):
                    return self._ended()
                continue
            if 200 <= resp.status < 300:
                try:
                    parsed = orjson.loads(data)
                    problem = check_response(self.api, parsed)
                except orjson.JSONDecodeError:
                    parsed, problem = None, "response body is not JSON"
                if problem is None:
                    self._attempt("ok", resp.status, None, None, t0)
                    return self._finish(resp, data, parsed, None)
                wait = self._attempt("malformed", resp.status, problem, None, t0)
                if wait is None:
                    return self._give_up(502, f"upstream kept answering malformed: {problem}")
                if not await self._backoff(wait):
                    return self._ended()
                continue
            cause = classify_status(resp.status, data)
            retry_after = retry_after_from(resp.headers, time.time())
            wait = self._attempt(cause, resp.status, _snippet(data), retry_after, t0)
            if wait is None or cause in ("oversize", "refused"):
                # The provider's own refusal goes back verbatim. The proxy cannot shrink a
                # harness's payload, so a 413 is never resent.
                return self._finish(resp, data, None, f"upstream answered {resp.status}")
            if not await self._backoff(wait):
                return self._ended()

    async def _backoff(self, wait: float) -> bool:
        """Sleep before the next try; False if the rollout ended meanwhile."""
        if self.session.closed:
            return False
        sleep = asyncio.ensure_future(self.retrier.clock.sleep(wait))
        self.session.waits.add(sleep)
        try:
            await sleep
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the harness hung up
        finally:
            self.session.waits.discard(sleep)
        return not self.session.closed

    def _ended(self) -> Response:
        self._record(None, None, "the rollout ended while the turn waited to retry")
        self._release()
        return _error(self.api, 409, "this rollout has ended", "rollout_ended")

    def _attempt(
        self,
        cause: str,
        status: int | None,
        error: str | None,
        retry_after: float | None,
        t0: float,
    ) -> float | None:
        clock = self.retrier.clock
        return self.retrier.record(
            cause, status, error, retry_after=retry_after, started=t0, duration=clock.now() - t0
        )

    def _relay(self, resp: ClientResponse) -> Response:
        """Pass an SSE stream through event by event; record the turn when it ends."""
        parser = SSEParser()
        acc = StreamAccumulator(self.api)
        chunks: list[bytes] = []

        async def body() -> AsyncIterator[bytes]:
            error: str | None = "client disconnected"
            first: float | None = None
            try:
                async for chunk in resp.aiter_bytes():
                    if first is None:
                        first = time.perf_counter() - self.t0
                    for event in parser.feed(chunk):
                        acc.feed(event)
                    chunks.append(chunk)
                    yield chunk
                error = None
            except HttpError as exc:
                error = f"upstream stream broke off: {exc}"
                raise Abort(error) from None
            finally:
                await resp.aclose()
                result = acc.result()
                if error is None:
                    error = check_response(self.api, result)
                self._attempt("ok" if error is None else "malformed", resp.status, error, None, 0.0)
                self._record(resp.status, result, error, ttft=first)
                self._commit(Replay(resp.status, _SSE_HEADERS, b"".join(chunks)))

        return Response(resp.status, list(_SSE_HEADERS), body())

    def _finish(
        self, resp: ClientResponse, data: bytes, parsed: Any, error: str | None
    ) -> Response:
        self._record(resp.status, parsed, error)
        headers = _down_headers(resp)
        self._commit(Replay(resp.status, headers, data))
        return Response(resp.status, headers, data)

    def _give_up(self, status: int, message: str) -> Response:
        self._record(None, None, message)
        response = _error(self.api, status, message, "upstream_error")
        self._release()
        return response

    def _record(
        self, status: int | None, response: Any, error: str | None, ttft: float | None = None
    ) -> None:
        usage = usage_from(self.api, response) if isinstance(response, dict) else Usage()
        model = (response or {}).get("model") if isinstance(response, dict) else None
        model = model or self.body.get("model") or ""
        spent = cost(model, usage)
        self.session.account(usage, spent)
        turn: dict[str, Any] = {
            "api": self.api,
            "model": model,
            "stream": self.stream,
            "status": status,
            "error": error,
            "request": self.body,
            "response": response,
            "usage": usage.to_dict(),
            "cost": spent,
            "attempts": [a.to_dict() for a in self.retrier.attempts],
            "latency": time.perf_counter() - self.t0,
            "idempotency_key": self.key,
        }
        if ttft is not None:
            turn["ttft"] = ttft
        if isinstance(response, dict):
            turn["message"] = _message(self.api, response)
            tokens = _tokens(response)
            if tokens:
                turn["tokens"] = tokens
        self.session.record(turn, self.start)
        reason = self.session.over_limit()
        if reason is not None and reason != "max_turns":
            self.session.stop_reason = self.session.stop_reason or reason

    def _commit(self, replay: Replay) -> None:
        if self.key is None:
            return
        self.session.committed[self.key] = replay
        fut = self.session.pending.pop(self.key, None)
        if fut is not None and not fut.done():
            fut.set_result(replay)

    def _release(self) -> None:
        """No answer to keep: a retry with the same key forwards anew."""
        if self.key is None:
            return
        fut = self.session.pending.pop(self.key, None)
        if fut is not None and not fut.done():
            fut.cancel()


async def _previous(session: ProxySession, key: str) -> Replay | None:
    """The committed answer for `key`, waiting for one in flight; None if there is none."""
    replay = session.committed.get(key)
    if replay is not None:
        return replay
    fut = session.pending.get(key)
    if fut is None:
        return None
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        if fut.cancelled():  # the first try ended without an answer: go again
            return None
        raise


def _message(api: str, body: dict[str, Any]) -> Any:
    """The assistant's output as a chat message, whatever the API (for reading traces)."""
    try:
        return parse_response(api, body).message
    except ValueError:
        return None


def _tokens(body: dict[str, Any]) -> dict[str, Any]:
    """Token ids and logprobs the upstream returned (vLLM style), for training samples."""
    out: dict[str, Any] = {}
    if "prompt_token_ids" in body:
        out["prompt_token_ids"] = body["prompt_token_ids"]
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        if choice.get("prompt_token_ids") is not None:
            out["prompt_token_ids"] = choice["prompt_token_ids"]
        if choice.get("token_ids") is not None:
            out["completion_token_ids"] = choice["token_ids"]
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
            items = [x for x in logprobs["content"] if isinstance(x, dict)]
            out["completion_tokens"] = [x.get("token") for x in items]
            out["logprobs"] = [x.get("logprob") for x in items]
    return out


def _down_headers(resp: ClientResponse) -> list[tuple[str, str]]:
    return [(k, v) for k, v in resp.headers.items() if k.lower() in _PASS_DOWN]


def _snippet(data: bytes) -> str:
    return data[:300].decode("utf-8", "replace")


def _error(api: str, status: int, message: str, code: str) -> Response:
    """An error in the shape the harness's SDK expects for this API."""
    kind = "invalid_request_error" if status < 500 else "api_error"
    if status == 401:
        kind = "authentication_error" if api == "messages" else "invalid_request_error"
    body: Mapping[str, Any]
    if api == "messages":
        body = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Response.json(body, status=status)
