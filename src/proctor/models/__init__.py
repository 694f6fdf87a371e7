"""One contract for model calls: provider adapters, the retry contract, context and cost.

`model_client("openai/gpt-4.1-mini")` gives a `ModelClient` whatever the provider
(OpenAI Chat Completions or Responses, Anthropic Messages, any OpenAI-compatible
server by base URL). Provider SDKs load only when a client is made, so importing this
package stays light. The pure pieces (retry state machine, wire parsing, pricing,
compaction) are shared with the interception proxy.
"""

from ._client import ProviderAdapter, model_client
from ._clock import Clock, FakeClock, SystemClock
from ._context import CHECKPOINT, ContextPolicy, compact, history_bytes, needs_compaction
from ._names import ModelSpec, parse_model
from ._pricing import Price, cost, price_of, pricing_date
from ._retry import (
    CAUSES,
    Outcome,
    Retrier,
    RetryPolicy,
    classify_status,
    parse_retry_after,
    retry_after_from,
)
from ._types import Attempt, ModelClient, ModelResponse, ToolCall, ToolSpec, Usage
from ._wire import Parsed, StreamAccumulator, check_response, parse_response, usage_from

__all__ = [
    "CAUSES",
    "CHECKPOINT",
    "Attempt",
    "Clock",
    "ContextPolicy",
    "FakeClock",
    "ModelClient",
    "ModelResponse",
    "ModelSpec",
    "Outcome",
    "Parsed",
    "Price",
    "ProviderAdapter",
    "Retrier",
    "RetryPolicy",
    "StreamAccumulator",
    "SystemClock",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "check_response",
    "classify_status",
    "compact",
    "cost",
    "history_bytes",
    "model_client",
    "needs_compaction",
    "parse_model",
    "parse_response",
    "parse_retry_after",
    "price_of",
    "pricing_date",
    "retry_after_from",
    "usage_from",
]
