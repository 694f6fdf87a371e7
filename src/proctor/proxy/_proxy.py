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
import hashlib
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import HttpError
from .._http import (
    Abort,
    ClientResponse,
    HttpClient,
    HttpLimits,
    HttpServer,
    Request,
    Response,
    SSEEvent,
    SSEParser,
    format_sse,
)
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
from ..models._names import Api
from ._session import Limits, ProxySession, Replay, _KeyState

if TYPE_CHECKING:
    from ..records._records import Trace

__all__ = ["InterceptionProxy", "Upstream"]

_APIS = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages"}
# Request headers a harness may pass through to the provider (never its credentials).
_PASS_UP = frozenset({"accept", "anthropic-version", "anthropic-beta", "openai-beta", "user-agent"})
# Response headers passed back to the harness.
_PASS_DOWN = frozenset({"content-type", "x-request-id", "request-id", "openai-processing-ms"})
_ENDED_KEPT = 100_000
_SSE_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
# On every final error: the OpenAI and Anthropic SDKs then do not resend the request
# (by default they resend 408, 409, 429 and 5xx, each a new turn).
_FINAL = ("x-should-retry", "false")


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the proxy forwards one family of APIs.

    Args:
        base_url: the API root, as the provider's SDK takes it
            (`https://api.openai.com/v1`, `http://127.0.0.1:8000/v1`,
            `https://api.anthropic.com`).
        kind: `openai` (chat, responses, models) or `anthropic` (messages).
        api_key: the real key; kept out of repr, traces and logs.
        model: when set, replaces the `model` of every forwarded request.
    """

    base_url: str
    kind: str = "openai"
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("openai", "anthropic"):
            raise ValueError(f"Upstream.kind is 'openai' or 'anthropic', not {self.kind!r}")

    @classmethod
    def of(cls, target: str | ModelSpec | Upstream) -> Upstream:
        """An upstream from a base URL (OpenAI-compatible), a model string or a spec.

        A model string's kind follows its API (`anthropic/...` serves `/v1/messages`)
        and its key is read from its provider's environment variable now.
        """
        if isinstance(target, Upstream):
            return target
        if isinstance(target, str) and target.startswith(("http://", "https://")):
            return cls(target)
        spec = parse_model(target) if isinstance(target, str) else target
        key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
        kind = "anthropic" if spec.api == "messages" else "openai"
        return cls(spec.base_url, kind, key, spec.model)

    def url(self, path: str) -> str:
        """The provider URL for a proxy path such as `/v1/chat/completions` (as its SDK
        builds it: OpenAI roots include the version, Anthropic's do not)."""
        base = self.base_url.rstrip("/")
        if self.kind == "anthropic":
            return base.removesuffix("/v1") + path
        return base + path.removeprefix("/v1")

    def auth(self) -> dict[str, str]:
        """The provider's authentication headers (and Anthropic's default version)."""
        api: Api = "messages" if self.kind == "anthropic" else "chat"
        return ModelSpec("", self.model or "", api, self.base_url, None).auth_headers(self.api_key)


class InterceptionProxy:
    """Serve `/v1/chat/completions`, `/v1/responses`, `/v1/messages` and `/v1/models`
    for many rollouts at once, each identified by its own secret.

    Args:
        upstreams: where to forward, at most one per kind: a base URL (an
            OpenAI-compatible server), a model string (`openai/gpt-4.1-mini` serves the
            OpenAI paths, `anthropic/claude-haiku-4-5` serves `/v1/messages`; the model
            is pinned) or an `Upstream`.
        limits: default budgets for sessions opened without their own.
        retry: the retry policy for forwarding (default `RetryPolicy()`).
        clock: time source for backoff waits (tests pass a fake one).
        host, port: where to listen (default 127.0.0.1, a free port).
        http_limits: bounds on connections, buffered request bytes and read deadlines
            (default `HttpLimits()`; see docs/proxy.md).
    """

    def __init__(
        self,
        *upstreams: str | ModelSpec | Upstream,
        limits: Limits | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        http_limits: HttpLimits | None = None,
    ) -> None:
        self.upstreams: dict[str, Upstream] = {}
        for target in upstreams:
            upstream = Upstream.of(target)
            if upstream.kind in self.upstreams:
                raise ValueError(f"two {upstream.kind} upstreams given; the proxy takes one")
            self.upstreams[upstream.kind] = upstream
        self.limits = limits or Limits()
        self.retry = retry or RetryPolicy()
        self.clock = clock
        self._server = HttpServer(
            self._handle, host=host, port=port, limits=http_limits, screen=self._screen
        )
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

    def _screen(self, req: Request) -> Response | None:
        """The refusal a request gets from its head alone, else None.

        The server calls it before reading the body, so an unknown secret costs the
        proxy no more than its head; `_handle` calls it again, since the rollout may
        have ended while the body came in.
        """
        path = req.path
        api = _APIS.get(path)
        if api is None:
            if path != "/v1/models" or req.method != "GET":
                return _error("chat", 404, f"no route for {req.method} {path}", "not_found")
            api = "chat"
        elif req.method != "POST":
            return _error(api, 405, f"{path} takes POST", "method_not_allowed")
        secret = self._secret_of(req)
        session = self._sessions.get(secret)
        if session is None or session.closed:
            if secret in self._ended:
                return _error(api, 409, "this rollout has ended", "rollout_ended")
            return _error(api, 401, "unknown or missing API key", "invalid_api_key")
        if path != "/v1/models" and _kind(api) not in self.upstreams:
            return _error(api, 404, f"this proxy has no upstream for {path}", "not_found")
        return None

    async def _handle(self, req: Request) -> Response:
        refusal = self._screen(req)
        if refusal is not None:
            return refusal
        api = _APIS.get(req.path)
        if api is None:
            return await self._models()
        session = self._sessions[self._secret_of(req)]
        upstream = self.upstreams[_kind(api)]
        path = req.path
        try:
            body = orjson.loads(req.body)
        except orjson.JSONDecodeError as exc:
            return _error(api, 400, f"request body is not JSON: {exc}", "invalid_json")
        if not isinstance(body, dict):
            return _error(api, 400, "request body must be a JSON object", "invalid_json")
        key = req.headers.get("idempotency-key")
        state: _KeyState | None = None
        if key is not None:
            state = session.keys.get(key)
            digest = hashlib.blake2b(req.body, digest_size=16).digest()
            if state is not None and state.digest != digest:
                msg = "this Idempotency-Key was used with a different request body"
                return _error(api, 422, msg, "idempotency_key_reused")
            if state is not None:
                if not await state.settled():
                    return _error(api, 409, "this rollout has ended", "rollout_ended")
                if state.replay is not None:
                    return Response(state.replay.status, state.replay.headers, state.replay.body)
                if session.closed:
                    return _error(api, 409, "this rollout has ended", "rollout_ended")
        if state is None:  # a retry of a key already admitted is the same turn
            reason = session.over_limit()
            if reason is not None:
                session.stop_reason = session.stop_reason or reason
                return _error(api, 400, f"rollout limit reached: {reason}", reason)
            session.admitted += 1
            if key is not None:
                state = session.keys[key] = _KeyState(key, digest)
        if state is not None:
            state.begin()
        return await _Turn(self, session, upstream, api, path, body, req, state).forward()

    @staticmethod
    def _secret_of(req: Request) -> str:
        auth = req.headers.get("authorization")
        if auth is not None and auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        return req.headers.get("x-api-key") or ""

    async def _models(self) -> Response:
        upstream = self.upstreams.get("openai")
        if upstream is None:
            return Response.json({"object": "list", "data": []})
        try:
            async with await self._client.request(
                "GET", upstream.url("/v1/models"), headers=list(upstream.auth().items())
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
        state: _KeyState | None,
    ) -> None:
        self.proxy = proxy
        self.session = session
        self.upstream = upstream
        self.api = api
        self.body = body
        self.state = state
        self.url = upstream.url(path)
        self.stream = bool(body.get("stream"))
        self.retrier = Retrier(proxy.retry, proxy.clock, proxy._rng)
        self.start = time.time()
        self.t0 = time.perf_counter()
        self.strip_usage = False  # the harness did not ask for the usage chunk we add
        self.payload = self._rewrite(req.body)
        headers = {k.lower(): v for k, v in req.headers.items() if k.lower() in _PASS_UP}
        for name, value in upstream.auth().items():
            headers.setdefault(name.lower(), value)  # the harness's anthropic-version wins
        headers["content-type"] = "application/json"
        self.headers = list(headers.items())

    def _rewrite(self, raw: bytes) -> bytes:
        """The bytes to send: the harness's own, unless the model is pinned or a stream
        needs its usage (`stream_options.include_usage`) to be metered."""
        changed = False
        if self.upstream.model is not None and self.body.get("model") != self.upstream.model:
            self.body["model"] = self.upstream.model
            changed = True
        if self.stream and self.api == "chat":
            opts = self.body.get("stream_options")
            if not (isinstance(opts, dict) and opts.get("include_usage") is True):
                opts = opts if isinstance(opts, dict) else {}
                self.body["stream_options"] = {**opts, "include_usage": True}
                self.strip_usage = changed = True
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
                return self._relay(resp, t0)
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
            if resp.status in (401, 403):
                # The upstream refused the proxy's own credentials: its body may quote
                # them (masked or not), so neither the harness nor the trace sees it.
                msg = f"the upstream refused the proxy's credentials (HTTP {resp.status})"
                self._attempt("refused", resp.status, msg, None, t0)
                return self._give_up(502, msg)
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

    def _relay(self, resp: ClientResponse, t0: float) -> Response:
        """Pass an SSE stream through as it arrives; record the turn when it ends.

        Bytes go through untouched, unless the proxy asked for the usage chunk the
        harness did not: then events are re-framed one by one and that chunk withheld.
        """
        parser = SSEParser()
        acc = StreamAccumulator(self.api)
        sent: list[bytes] = []

        async def body() -> AsyncIterator[bytes]:
            error: str | None = "client disconnected"
            first: float | None = None
            try:
                async for chunk in resp.aiter_bytes():
                    if first is None:
                        first = time.perf_counter() - self.t0
                    events = parser.feed(chunk)
                    for event in events:
                        acc.feed(event)
                    if self.strip_usage:
                        chunk = b"".join(_frame(e) for e in events if not _usage_only(e))
                    if chunk:
                        sent.append(chunk)
                        yield chunk
                error = acc.problem or check_response(self.api, acc.result())
            except HttpError as exc:
                error = f"upstream stream broke off: {exc}"
                raise Abort(error) from None
            finally:
                await resp.aclose()
                self._attempt("ok" if error is None else "malformed", resp.status, error, None, t0)
                self._record(resp.status, acc.result(), error, ttft=first)
                if error is None:
                    self._commit(Replay(resp.status, _SSE_HEADERS, b"".join(sent)))
                else:  # a cut or broken stream is never replayed as the answer
                    self._release()

        return Response(resp.status, list(_SSE_HEADERS), body())

    def _finish(
        self, resp: ClientResponse, data: bytes, parsed: Any, error: str | None
    ) -> Response:
        self._record(resp.status, parsed, error)
        headers = _down_headers(resp)
        if error is not None:  # the provider's refusal, final: the proxy will not retry it
            headers.append(_FINAL)
        self._commit(Replay(resp.status, headers, data))
        return Response(resp.status, headers, data)

    def _give_up(self, status: int, message: str) -> Response:
        self._record(None, None, message)
        self._release()
        return _error(self.api, status, message, "upstream_error")

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
            "idempotency_key": None if self.state is None else self.state.key,
        }
        if ttft is not None:
            turn["ttft"] = ttft
        if isinstance(response, dict):
            turn["message"] = _message(self.api, response)
            tokens = _tokens(response)
            if tokens:
                turn["tokens"] = tokens
        self.session.record(turn, self.start, self.state)
        reason = self.session.over_limit()
        if reason is not None and reason != "max_turns":
            self.session.stop_reason = self.session.stop_reason or reason

    def _commit(self, replay: Replay) -> None:
        if self.state is not None:
            self.state.settle(replay)

    def _release(self) -> None:
        """No answer to keep: a retry with the same key forwards anew (the same turn)."""
        if self.state is not None:
            self.state.settle(None)


def _kind(api: str) -> str:
    """The kind of upstream that serves an API."""
    return "anthropic" if api == "messages" else "openai"


def _usage_only(event: SSEEvent) -> bool:
    """A Chat Completions chunk with no choices: the usage chunk the proxy asked for."""
    return event.data.startswith("{") and '"choices":[]' in event.data.replace(" ", "")


def _frame(event: SSEEvent) -> bytes:
    return format_sse(event.data, event.event, event.id)


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
            ids = [_token_id(t) for t in out["completion_tokens"]]
            if "completion_token_ids" not in out and ids and None not in ids:
                out["completion_token_ids"] = ids  # vLLM's return_tokens_as_token_ids
    return out


def _token_id(token: Any) -> int | None:
    """N from vLLM's `token_id:N` token strings, else None."""
    if isinstance(token, str) and token.startswith("token_id:") and token[9:].isdigit():
        return int(token[9:])
    return None


def _down_headers(resp: ClientResponse) -> list[tuple[str, str]]:
    return [(k, v) for k, v in resp.headers.items() if k.lower() in _PASS_DOWN]


def _snippet(data: bytes) -> str:
    return data[:300].decode("utf-8", "replace")


def _error(api: str, status: int, message: str, code: str) -> Response:
    """An error the proxy itself decided, in the shape the harness's SDK expects.

    It is final: `x-should-retry: false` stops the OpenAI and Anthropic SDKs from
    resending it, and `x-proctor-error: CODE` tells it apart from a provider's answer.
    """
    kind = "invalid_request_error" if status < 500 else "api_error"
    if status == 401:
        kind = "authentication_error" if api == "messages" else "invalid_request_error"
    elif code == "rollout_ended":
        kind = "rollout_ended_error"
    body: Mapping[str, Any]
    if api == "messages":
        body = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Response.json(body, status, [_FINAL, ("x-proctor-error", code)])
