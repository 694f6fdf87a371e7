"""One contract for model calls: provider adapters, the retry contract, context and cost.

`model_client("openai/gpt-4.1-mini")` gives a `ModelClient` whatever the provider
(OpenAI Chat Completions or Responses, Anthropic Messages, any OpenAI-compatible
server by base URL); `aws_client("bedrock/<model id>")` gives one on Bedrock Converse
or a SigV4-signed endpoint, with AWS credentials. Provider SDKs load only when a client
is made, so importing this package stays light. Messages carry text or parts, images
among them (`ImagePart`: a file read and encoded only when a request is built). The
pure pieces (retry state machine, wire parsing, pricing, compaction) live in private
modules that the interception proxy shares.
"""

from __future__ import annotations

from .._public import lazy_exports

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads it so)

__all__ = [
    "CHECKPOINT",
    "IMAGE_TYPES",
    "OMITTED",
    "REQUEST_CEILINGS",
    "Api",
    "Attempt",
    "AwsSigner",
    "Clock",
    "ContextPolicy",
    "ImagePart",
    "ModelClient",
    "ModelProfile",
    "ModelResponse",
    "ModelSpec",
    "Price",
    "ProviderAdapter",
    "RetryPolicy",
    "TextPart",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "aws_client",
    "aws_signer",
    "compact",
    "content_parts",
    "cost",
    "drop_frames",
    "load_profiles",
    "model_client",
    "model_profile",
    "model_profiles",
    "parse_model",
    "price_of",
    "pricing_date",
    "register_profile",
]
_EXPORTS = {
    "CHECKPOINT": "._context",
    "IMAGE_TYPES": "._content",
    "OMITTED": "._content",
    "REQUEST_CEILINGS": "._client",
    "Api": "._names",
    "Attempt": "._types",
    "AwsSigner": "._sigv4",
    "Clock": "._clock",
    "ContextPolicy": "._context",
    "ImagePart": "._content",
    "ModelClient": "._types",
    "ModelProfile": "._profiles",
    "ModelResponse": "._types",
    "ModelSpec": "._names",
    "Price": "._pricing",
    "ProviderAdapter": "._client",
    "RetryPolicy": "._retry",
    "TextPart": "._content",
    "ToolCall": "._types",
    "ToolSpec": "._types",
    "Usage": "._types",
    "aws_client": "._bedrock",
    "aws_signer": "._sigv4",
    "compact": "._context",
    "content_parts": "._content",
    "cost": "._pricing",
    "drop_frames": "._context",
    "load_profiles": "._profiles",
    "model_client": "._factory",
    "model_profile": "._profiles",
    "model_profiles": "._profiles",
    "parse_model": "._profiles",
    "price_of": "._pricing",
    "pricing_date": "._pricing",
    "register_profile": "._profiles",
}

if TYPE_CHECKING:
    from ._bedrock import aws_client
    from ._client import REQUEST_CEILINGS, ProviderAdapter
    from ._clock import Clock
    from ._content import IMAGE_TYPES, OMITTED, ImagePart, TextPart, content_parts
    from ._context import CHECKPOINT, ContextPolicy, compact, drop_frames
    from ._factory import model_client
    from ._names import Api, ModelSpec
    from ._pricing import Price, cost, price_of, pricing_date
    from ._profiles import (
        ModelProfile,
        load_profiles,
        model_profile,
        model_profiles,
        parse_model,
        register_profile,
    )
    from ._retry import RetryPolicy
    from ._sigv4 import AwsSigner, aws_signer
    from ._types import Attempt, ModelClient, ModelResponse, ToolCall, ToolSpec, Usage
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        _EXPORTS,
        deprecated={"FakeClock": "proctor.testing.FakeClock"},
    )
