"""`InterceptionProxy`: an OpenAI- and Anthropic-compatible HTTP server in front of the
real provider, one secret per rollout.

A harness in any language points its base URL at the proxy and uses its rollout's
secret as the API key. Each request is attributed by that secret, checked against the
rollout's budgets, forwarded under the retry contract of `proctor.models` (the harness
sees only latency for throttling and 5xx), streamed back as it arrives, and recorded
as one turn on the rollout's trace. Real provider keys stay inside the proxy.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import HttpError
from .._http import HttpClient, HttpLimits, HttpServer, Request, Response, Share
from .._resource import AsyncResource
from ..models import Clock, ModelSpec
from ..models._retry import Retrier, RetryPolicy
from ._quotas import NO_HOLD, Hold, SessionQuotas
from ._session import WAIT, ModelLimits, ProxySession, SharedBudget, _KeyState
from ._turn import Turn, down_headers, error_response
from ._upstream import Upstream

if TYPE_CHECKING:
    from ..records import Trace

__all__ = ["InterceptionProxy", "Upstream"]

_APIS = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages"}
_ENDED_KEPT = 100_000


class _Answered(Exception):
    """A step of `_handle` answered the request itself: a refusal or a replay."""

    def __init__(self, response: Response) -> None:
        self.response = response


class InterceptionProxy(AsyncResource):
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
        budget: a cost cap shared by every session (and by other proxies given the
            same `SharedBudget`): a batch's `cost_cap`.
        quotas: what each session may hold of the proxy (turns in flight, requests
            and bytes held, bytes recorded): `SessionQuotas()` by default.
    """

    def __init__(
        self,
        *upstreams: str | ModelSpec | Upstream,
        limits: ModelLimits | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        http_limits: HttpLimits | None = None,
        budget: SharedBudget | None = None,
        quotas: SessionQuotas | None = None,
    ) -> None:
        self.upstreams: dict[str, Upstream] = {}
        for target in upstreams:
            upstream = Upstream.of(target)
            if upstream.kind in self.upstreams:
                raise ValueError(f"two {upstream.kind} upstreams given; the proxy takes one")
            self.upstreams[upstream.kind] = upstream
        # Each upstream's own headers, built once (names in lower case).
        self._auth = {
            kind: [(k.lower(), v) for k, v in up.auth().items()]
            for kind, up in self.upstreams.items()
        }
        self.limits = limits or ModelLimits()
        self.budget = budget
        self.quotas = quotas or SessionQuotas()
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

    def open_session(
        self,
        rollout_id: str | None = None,
        *,
        limits: ModelLimits | None = None,
        trace: Trace | None = None,
    ) -> ProxySession:
        """Register a rollout; its turns land on `trace` (if given) and `session.turns`."""
        session = ProxySession(
            rollout_id or uuid.uuid4().hex,
            self.base_url,
            limits or self.limits,
            trace,
            self._forget,
            self.budget,
            self.quotas,
        )
        session.share.refusal = _share_refusal
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

    # -- request handling: route, authenticate, parse, admit, then one turn ----------

    def _screen(self, req: Request) -> Response | Share:
        """The refusal a request gets from its head alone, else its session's share of
        the server (which the server charges it to).

        The server calls it before reading the body, so an unknown secret costs the
        proxy no more than its head; `_handle` checks again, since the rollout may
        have ended while the body came in.
        """
        try:
            api = self._route(req)
            session = self._authenticate(req, api)
            self._upstream(req, api)
        except _Answered as answered:
            return answered.response
        return session.share

    async def _handle(self, req: Request) -> Response:
        try:
            api = self._route(req)
            share = req.share  # the screen found the session already
            session = share.owner if share is not None else None
            if not isinstance(session, ProxySession) or session.closed:
                session = self._authenticate(req, api)
            upstream = self._upstream(req, api)
            if upstream is None:
                return await self._models()
            body = _parse(api, req.body)
            hold = NO_HOLD
            if session.metered:
                model = str(upstream.model or body.get("model") or "") if session.priced else None
                hold = Hold.of(body, len(req.body), model, session.quotas)
            state = await _admit(api, session, req, hold)
        except _Answered as answered:
            return answered.response
        retrier = Retrier(self.retry, self.clock, self._rng)
        auth = self._auth[upstream.kind]
        turn = Turn(self._client, retrier, session, upstream, api, body, req, state, hold, auth)
        return await turn.forward()

    @staticmethod
    def _route(req: Request) -> str:
        """The API a request's path names (`chat` for `GET /v1/models`)."""
        path = req.path
        api = _APIS.get(path)
        if api is None:
            if path != "/v1/models" or req.method != "GET":
                raise _Answered(
                    error_response("chat", 404, f"no route for {req.method} {path}", "not_found")
                )
            return "chat"
        if req.method != "POST":
            raise _Answered(error_response(api, 405, f"{path} takes POST", "method_not_allowed"))
        return api

    def _authenticate(self, req: Request, api: str) -> ProxySession:
        """The open session the request's secret names (409 once it ended, else 401)."""
        secret = self._secret_of(req)
        session = self._sessions.get(secret)
        if session is None or session.closed:
            if secret in self._ended:
                raise _Answered(_rollout_ended(api))
            raise _Answered(
                error_response(api, 401, "unknown or missing API key", "invalid_api_key")
            )
        return session

    def _upstream(self, req: Request, api: str) -> Upstream | None:
        """Where the request goes; None for `/v1/models`, which the proxy answers."""
        if req.path == "/v1/models":
            return None
        upstream = self.upstreams.get(_kind(api))
        if upstream is None:
            msg = f"this proxy has no upstream for {req.path}"
            raise _Answered(error_response(api, 404, msg, "not_found"))
        if upstream.converse and api != "chat":
            msg = f"the upstream is Bedrock Converse: use /v1/chat/completions, not {req.path}"
            raise _Answered(error_response(api, 404, msg, "not_found"))
        return upstream

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
        if upstream.converse:
            model = {"id": upstream.model, "object": "model", "created": 0, "owned_by": "bedrock"}
            return Response.json({"object": "list", "data": [model]})
        try:
            url = upstream.url("/v1/models")
            headers = upstream.signed("GET", url, list(upstream.auth().items()), b"")
            async with await self._client.request("GET", url, headers=headers) as resp:
                data = await resp.read()
        except HttpError as exc:
            return error_response("chat", 502, f"upstream unreachable: {exc}", "upstream_error")
        return Response(resp.status, down_headers(resp), data)


def _kind(api: str) -> str:
    """The kind of upstream that serves an API."""
    return "anthropic" if api == "messages" else "openai"


def _rollout_ended(api: str) -> Response:
    return error_response(api, 409, "this rollout has ended", "rollout_ended")


def _parse(api: str, raw: bytes) -> dict[str, Any]:
    """The request body, a JSON object (else a 400)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _Answered(
            error_response(api, 400, f"request body is not JSON: {exc}", "invalid_json")
        ) from None
    if not isinstance(body, dict):
        raise _Answered(
            error_response(api, 400, "request body must be a JSON object", "invalid_json")
        )
    return body


async def _admit(api: str, session: ProxySession, req: Request, hold: Hold) -> _KeyState | None:
    """Admit a new turn against the budgets (waiting for room, see `ProxySession.admit`),
    or rejoin the turn its Idempotency-Key names.

    A retry of a key already admitted is the same turn: it waits for that turn to
    settle, then gets its answer replayed, or forwards anew (not counted as a turn,
    but holding against the budgets) if it left none.
    """
    key = req.headers.get("idempotency-key")
    if key is None:
        if session.try_admit(hold, True) is not None:  # no room, or refused: say which
            await _enter(api, session, hold, True)
        return None
    digest = hashlib.blake2b(req.body, digest_size=16).digest()
    while True:
        state = session.keys.get(key)
        first = state is None
        if state is None:
            state = session.keys[key] = _KeyState(key, digest)
        else:
            await _rejoin(api, session, state, digest)
            if session.keys.get(key) is not state:  # its first try was refused: go again
                continue
        state.begin()  # a retry arriving now waits for this try
        try:
            await _enter(api, session, hold, first)
        except BaseException:
            if first and session.keys.get(key) is state:
                del session.keys[key]  # never a turn
            state.settle(None)
            raise
        return state


async def _enter(api: str, session: ProxySession, hold: Hold, count: bool) -> None:
    """Take a slot for a turn, or refuse it: a budget spent, or the rollout ended."""
    reason = session.try_admit(hold, count)
    if reason == WAIT:
        reason = await session.admit(hold, count)
    if reason == "rollout_ended":
        raise _Answered(_rollout_ended(api))
    if reason is not None:
        session.stop_reason = session.stop_reason or reason
        raise _Answered(error_response(api, 400, f"rollout limit reached: {reason}", reason))


def _share_refusal(status: int, message: str) -> Response:
    """A request over its session's share of the server (413 alone, 429 with others)."""
    return error_response(
        "chat", status, message, "request_too_large" if status == 413 else "session_busy"
    )


async def _rejoin(api: str, session: ProxySession, state: _KeyState, digest: bytes) -> None:
    """Let a retry through to forward again, or answer it: a replay, 409 or 422."""
    if state.digest != digest:
        msg = "this Idempotency-Key was used with a different request body"
        raise _Answered(error_response(api, 422, msg, "idempotency_key_reused"))
    if not await state.settled():
        raise _Answered(_rollout_ended(api))
    if state.replay is not None:
        replay = state.replay
        raise _Answered(Response(replay.status, replay.headers, replay.body))
    if session.closed:
        raise _Answered(_rollout_ended(api))
