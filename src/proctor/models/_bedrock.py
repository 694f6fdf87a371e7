"""Bedrock runtime Converse, and `aws_client()` for every SigV4 model string.

Requests are signed with botocore's `SigV4Auth` (credentials from the standard chain)
and sent through proctor's own HTTP client rather than boto3's: boto3 is synchronous
(a thread per call) and hides the raw status, headers and body the shared retry
contract classifies, where this keeps one async keep-alive pool and the same signer
serves the SigV4-signed OpenAI-compatible endpoints and the interception proxy. boto3's
own clients are what the tests check the fake with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import orjson

from ._bedrock_converse import (
    converse_body,
    converse_check,
    converse_parse,
    converse_usage,
    takes_cache_points,
)
from ._client import ProviderAdapter, Reply, adapter_options
from ._profiles import parse_model
from ._retry import Outcome, Retrier, classify_status, retry_after_from
from ._sigv4 import AwsSigner, SignedAdapter, aws_signer
from ._types import Message, ModelResponse, ToolSpec
from ._wire import brief

__all__ = ["ConverseAdapter", "aws_client"]

# Converse's words for a request over the model's context or size limits (a 400
# ValidationException): answered like a 413, by a smaller rewrite of the request.
_TOO_LONG = ("too long", "too large", "exceeds the maximum", "prompt is too long")


class ConverseAdapter(SignedAdapter):
    """Bedrock runtime `Converse`, SigV4-signed."""

    api = "converse"

    def __init__(self, *args: Any, cache_prompt: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cache_prompt = cache_prompt and takes_cache_points(self.spec.model)

    def endpoint(self, signer: AwsSigner) -> str:
        """`/model/{modelId}/converse` on the given base URL, else the region's runtime."""
        base = self.spec.base_url or signer.endpoint("bedrock-runtime")
        return f"{base}/model/{quote(self.spec.model, safe='')}/converse"

    def body(
        self, messages: list[Message], tools: Sequence[ToolSpec], params: dict[str, Any]
    ) -> dict[str, Any]:
        """The Converse request body (see `converse_body`)."""
        return converse_body(messages, tools, params, cache=self.cache_prompt)

    def _classify(self, reply: Reply, require_tool_call: bool) -> Outcome:
        if not 200 <= reply.status < 300:
            cause = _cause(reply)
            return Outcome(cause, reply.status, _aws_error(reply), retry_after_from(reply.headers))
        try:
            reply.json = orjson.loads(reply.content)
        except orjson.JSONDecodeError:
            return Outcome("malformed", reply.status, "response is not JSON")
        problem = converse_check(reply.json, require_tool_call=require_tool_call)
        return Outcome("malformed" if problem else "ok", reply.status, problem)

    def _response(self, body: Any, retrier: Retrier, latency: float) -> ModelResponse:
        message, content, calls, finish = converse_parse(body)
        usage = converse_usage(body)
        return ModelResponse(
            message=message,
            content=content,
            tool_calls=calls,
            usage=usage,
            cost=None if self._price is None else self._price.cost(usage),
            model=self.model,
            finish_reason=finish,
            attempts=retrier.attempts,
            latency=latency,
            raw=body,
        )


def _error_type(reply: Reply) -> str:
    kind = reply.headers.get("x-amzn-errortype") or ""
    return kind.partition(":")[0]


def _cause(reply: Reply) -> str:
    """The retry cause of an AWS error: throttling and model-not-ready wait, a
    validation error over the model's limits is oversize, the rest by status."""
    kind = _error_type(reply)
    if kind in ("ThrottlingException", "ModelNotReadyException", "ServiceQuotaExceededException"):
        return "throttled"
    if kind == "ModelTimeoutException":
        return "transport"
    text = reply.content.decode(errors="replace").lower()
    if reply.status == 400 and any(words in text for words in _TOO_LONG):
        return "oversize"
    return classify_status(reply.status, reply.content)


def _aws_error(reply: Reply) -> str:
    try:
        body = orjson.loads(reply.content)
    except orjson.JSONDecodeError:
        body = None
    message = body.get("message") or body.get("Message") if isinstance(body, dict) else None
    kind = _error_type(reply)
    detail = message or reply.content.decode(errors="replace")
    return f"HTTP {reply.status}: {kind + ': ' if kind else ''}{brief(detail)}"


def aws_client(
    spec: str,
    *,
    retry: Any = None,
    clock: Any = None,
    rng: Any = None,
    timeout: float = 600.0,
    headers: Mapping[str, str] | None = None,
    context: Any = None,
    cache_prompt: bool = True,
    params: Mapping[str, Any] | None = None,
    max_request_bytes: int | None = None,
    signer: AwsSigner | None = None,
    aws_profile: str | None = None,
    aws_region: str | None = None,
    aws_service: str = "bedrock",
) -> ProviderAdapter:
    """A `ModelClient` for a SigV4 model string (`bedrock/...`, `mantle/...@url`),
    with `model_client`'s arguments plus where the AWS credentials come from.

    Args:
        signer: a ready signer; default one from `aws_profile` (else the standard
            chain), `aws_region` (else the profile's or the environment's) and
            `aws_service`, the signing name (`bedrock`; a signed endpoint may use
            another).

    Raises:
        ValueError: not a SigV4 model string, or `max_request_bytes` not positive.
        ModelError: no AWS credentials or region.
        ImportError: botocore is not installed (names the extra).
    """
    parsed = parse_model(spec)
    if parsed.auth != "sigv4":
        raise ValueError(f"{spec!r} is not a SigV4 model string (bedrock/... or mantle/...@url)")
    common = adapter_options(retry, clock, rng, context, params, max_request_bytes)
    if signer is None:
        signer = aws_signer(aws_service, region=aws_region, profile=aws_profile)
    common.update(signer=signer, timeout=timeout, headers=dict(headers or {}))
    if parsed.api == "converse":
        return ConverseAdapter(spec, parsed, cache_prompt=cache_prompt, **common)
    from ._mantle import SignedChatAdapter

    return SignedChatAdapter(spec, parsed, **common)
