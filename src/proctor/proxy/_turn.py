"""One admitted turn of the interception proxy: forward under the retry contract,
relay the answer (a stream as it arrives), record the turn, settle its idempotency key.

Also the proxy's own answers: `error_response` in the shape each SDK expects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import orjson

from .._errors import HttpError
from .._http import (
    Abort,
    ClientResponse,
    HttpClient,
    Request,
    Response,
    SSEEvent,
    SSEParser,
    format_sse,
)
from ..models import Usage, cost
from ..models._bedrock_chat import (
    ConverseStreamFold,
    chat_to_converse,
    converse_error,
    converse_to_chat,
)
from ..models._retry import Retrier, classify_status, retry_after_from
from ..models._wire import (
    Parsed,
    StreamAccumulator,
    check_response,
    checked,
    parse_response,
    usage_from,
)
from ._quotas import Hold
from ._session import ProxySession, Replay, _KeyState
from ._upstream import Upstream

__all__ = ["Turn", "down_headers", "error_response"]

# Request headers a harness may pass through to the provider (never its credentials).
_PASS_UP = frozenset({"accept", "anthropic-version", "anthropic-beta", "openai-beta", "user-agent"})
# Response headers passed back to the harness.
_PASS_DOWN = frozenset({"content-type", "x-request-id", "request-id", "openai-processing-ms"})
_SSE_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
# On every final error: the OpenAI and Anthropic SDKs then do not resend the request
# (by default they resend 408, 409, 429 and 5xx, each a new turn).
_FINAL = ("x-should-retry", "false")


class Turn:
    """One admitted request: forward with retries, relay, record, commit."""

    def __init__(
        self,
        client: HttpClient,
        retrier: Retrier,
        session: ProxySession,
        upstream: Upstream,
        api: str,
        body: dict[str, Any],
        req: Request,
        state: _KeyState | None,
        hold: Hold,
        auth: list[tuple[str, str]],
    ) -> None:
        self.client = client
        self.session = session
        self.upstream = upstream
        self.api = api
        self.body = body
        self.state = state
        self.hold: Hold | None = hold  # held against the budgets until recorded (then None)
        self.size = len(req.body)
        self.url = upstream.url(req.path)
        self.stream = bool(body.get("stream"))
        if upstream.converse and self.stream:
            self.url += "-stream"  # ConverseStream
        self.retrier = retrier
        self.start = time.time()
        self.t0 = time.perf_counter()
        self.strip_usage = False  # the harness did not ask for the usage chunk we add
        self.payload = self._rewrite(req.body)
        headers: dict[str, str] = {}
        for name, value in req.headers:
            key = name.lower()
            if key in _PASS_UP:
                headers[key] = value
        for key, value in auth:  # the upstream's, names in lower case
            headers.setdefault(key, value)  # the harness's anthropic-version wins
        headers["content-type"] = "application/json"
        self.headers = list(headers.items())

    def _rewrite(self, raw: bytes) -> bytes:
        """The bytes to send: the harness's own, unless the model is pinned or a stream
        needs its usage (`stream_options.include_usage`) to be metered."""
        if self.upstream.converse:
            return orjson.dumps(chat_to_converse(self.body, self.upstream.model or ""))
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
        except BaseException as exc:  # a bug: the turn still ends, its slot freed
            if self.hold is not None:  # not recorded yet
                self._record(None, None, f"proxy error: {type(exc).__name__}: {exc}")
                self._release()
            raise

    async def _forward(self) -> Response:
        while True:
            outcome = await self._try()
            if isinstance(outcome, Response):
                return outcome
            if not await self._backoff(outcome):
                return self._ended()

    async def _try(self) -> Response | float:
        """One attempt: the answer to give, or the seconds to wait before the next."""
        t0 = self.retrier.clock.now()
        try:
            headers = self.upstream.signed("POST", self.url, self.headers, self.payload)
            resp = await self.client.request("POST", self.url, headers=headers, body=self.payload)
        except HttpError as exc:
            return self._retry("transport", None, str(exc), t0, f"upstream unreachable: {exc}")
        if 200 <= resp.status < 300 and self.stream:
            return self._relay(resp, t0, self._fold(resp))
        try:
            data = await resp.read()
        except HttpError as exc:
            await resp.aclose()
            return self._retry("transport", resp.status, str(exc), t0, f"upstream broke off: {exc}")
        if self.upstream.converse:
            data = self._from_converse(resp, data)
        if 200 <= resp.status < 300:
            return self._answered(resp, data, t0)
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
        return wait

    def _from_converse(self, resp: ClientResponse, data: bytes) -> bytes:
        """A Converse answer in the chat shape the harness speaks, errors too (a body
        that is no Converse answer stays as it is: malformed, so retried)."""
        if not 200 <= resp.status < 300:
            return converse_error(resp.status, data, resp.headers.get("x-amzn-errortype") or "")
        request_id = resp.headers.get("x-amzn-requestid") or f"{time.time_ns():x}"
        try:
            chat = converse_to_chat(orjson.loads(data), self.upstream.model or "", request_id)
        except ValueError:
            return data
        return orjson.dumps(chat)

    def _answered(self, resp: ClientResponse, data: bytes, t0: float) -> Response | float:
        """A 2xx body: the turn's answer, or a retry when it is malformed."""
        try:
            parsed = orjson.loads(data)
            answer = checked(self.api, parsed)
        except orjson.JSONDecodeError:
            answer = "response body is not JSON"
        if not isinstance(answer, str):
            self._attempt("ok", resp.status, None, None, t0)
            return self._finish(resp, data, parsed, None, answer)
        problem = answer
        give_up = f"upstream kept answering malformed: {problem}"
        return self._retry("malformed", resp.status, problem, t0, give_up)

    def _retry(
        self, cause: str, status: int | None, error: str, t0: float, give_up: str
    ) -> Response | float:
        """A failed attempt: the wait before the next, or a 502 once retries are spent."""
        wait = self._attempt(cause, status, error, None, t0)
        if wait is None:
            return self._give_up(502, give_up)
        return wait

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
        return error_response(self.api, 409, "this rollout has ended", "rollout_ended")

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

    def _fold(self, resp: ClientResponse) -> _Fold:
        """How this turn's stream reaches the harness: as it is, or from Converse."""
        if not self.upstream.converse:
            return _Passthrough(self.api, self.strip_usage)
        request_id = resp.headers.get("x-amzn-requestid") or f"{time.time_ns():x}"
        include = (self.body.get("stream_options") or {}).get("include_usage") is True
        return ConverseStreamFold(self.upstream.model or "", request_id, include_usage=include)

    def _relay(self, resp: ClientResponse, t0: float, fold: _Fold) -> Response:
        """Relay a stream as it arrives (through `fold`); record the turn when it ends."""
        sent: list[bytes] = []

        async def body() -> AsyncIterator[bytes]:
            error: str | None = "client disconnected"
            first: float | None = None
            try:
                async for data in resp.aiter_bytes():
                    if first is None:
                        first = time.perf_counter() - self.t0
                    chunk = fold.feed(data)
                    if chunk:
                        sent.append(chunk)
                        yield chunk
                error = fold.problem()
            except HttpError as exc:
                error = f"upstream stream broke off: {exc}"
                raise Abort(error) from None
            finally:
                await resp.aclose()
                self._attempt("ok" if error is None else "malformed", resp.status, error, None, t0)
                self._record(resp.status, fold.result(), error, ttft=first)
                if error is None:
                    self._commit(Replay(resp.status, _SSE_HEADERS, b"".join(sent)))
                else:  # a cut or broken stream is never replayed as the answer
                    self._release()

        return Response(resp.status, list(_SSE_HEADERS), body())

    def _finish(
        self,
        resp: ClientResponse,
        data: bytes,
        parsed: Any,
        error: str | None,
        answer: Parsed | None = None,
    ) -> Response:
        self._record(resp.status, parsed, error, answer=answer)
        headers = down_headers(resp)
        if error is not None:  # the provider's refusal, final: the proxy will not retry it
            headers.append(_FINAL)
        if self.state is not None:
            self.state.settle(Replay(resp.status, headers, data))
        return Response(resp.status, headers, data)

    def _give_up(self, status: int, message: str) -> Response:
        self._record(None, None, message)
        self._release()
        return error_response(self.api, status, message, "upstream_error")

    def _record(
        self,
        status: int | None,
        response: Any,
        error: str | None,
        ttft: float | None = None,
        answer: Parsed | None = None,
    ) -> None:
        """Account and record the turn (`answer`: `response` parsed, when it was), then
        free its slot and hold (once)."""
        try:
            self._keep(status, response, error, ttft, answer)
        finally:
            hold, self.hold = self.hold, None
            if hold is not None:
                self.session.release(hold)

    def _keep(
        self,
        status: int | None,
        response: Any,
        error: str | None,
        ttft: float | None,
        answer: Parsed | None,
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
            turn["message"] = _message(self.api, response) if answer is None else answer.message
            tokens = _tokens(response)
            if tokens:
                turn["tokens"] = tokens
        # Only a body with base64 in it can hold an inline image: the others skip the walk.
        images = b"base64" in self.payload
        self.session.record(turn, self.start, self.state, self.size, images=images)
        reason = self.session.over_limit(turns=False)
        if reason is not None:
            self.session.stop_reason = self.session.stop_reason or reason

    def _commit(self, replay: Replay) -> None:
        if self.state is not None:
            self.state.settle(replay)

    def _release(self) -> None:
        """No answer to keep: a retry with the same key forwards anew (the same turn)."""
        if self.state is not None:
            self.state.settle(None)


class _Fold(Protocol):
    """A stream on its way to the harness: the bytes to send for each piece that
    arrives, and once it ended, the answer it adds up to and what is wrong with it."""

    def feed(self, data: bytes) -> bytes: ...

    def result(self) -> Any: ...

    def problem(self) -> str | None: ...


class _Passthrough:
    """An SSE stream passed through untouched, unless the proxy asked for the usage
    chunk the harness did not: then events are re-framed one by one and it is withheld."""

    def __init__(self, api: str, strip_usage: bool) -> None:
        self.api = api
        self.strip_usage = strip_usage
        self.parser = SSEParser()
        self.acc = StreamAccumulator(api)

    def feed(self, data: bytes) -> bytes:
        events = self.parser.feed(data)
        for event in events:
            self.acc.feed(event)
        if self.strip_usage:
            return b"".join(_frame(e) for e in events if not _usage_only(e))
        return data

    def result(self) -> Any:
        return self.acc.result()

    def problem(self) -> str | None:
        return self.acc.problem or check_response(self.api, self.acc.result())


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


def down_headers(resp: ClientResponse) -> list[tuple[str, str]]:
    return [(k, v) for k, v in resp.headers.items() if k.lower() in _PASS_DOWN]


def _snippet(data: bytes) -> str:
    return data[:300].decode("utf-8", "replace")


def error_response(api: str, status: int, message: str, code: str) -> Response:
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
