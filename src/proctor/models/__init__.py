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

from .._public import publish
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

# FakeClock moved up to the shipped test helpers; the alias imports it only when asked.
publish(globals(), __all__, __name__, deprecated={"FakeClock": "proctor.testing.FakeClock"})
