"""SigV4-signed OpenAI-compatible endpoints (`mantle/<model>@https://host/v1`).

The body is Chat Completions' (`ChatAdapter.body`); the request goes through
proctor's HTTP client, signed with AWS credentials instead of carrying a key. Such
endpoints take small requests: unless told otherwise, a request stays under 3 MiB
(old frames dropped first) and a history over 24 messages is compacted into a
checkpoint.
"""

from __future__ import annotations

from typing import Any

from ._context import ContextPolicy
from ._openai import ChatAdapter
from ._sigv4 import AwsSigner, SignedAdapter

__all__ = ["SIGNED_CHAT_CEILING", "SIGNED_CHAT_CONTEXT", "SignedChatAdapter"]

SIGNED_CHAT_CEILING = 3 * 1024 * 1024
"""The request body ceiling of signed chat endpoints, in bytes (old images go first)."""

SIGNED_CHAT_CONTEXT = ContextPolicy(max_bytes=SIGNED_CHAT_CEILING, max_messages=24)
"""The compaction rule of signed chat endpoints when the caller gives none."""


class SignedChatAdapter(SignedAdapter, ChatAdapter):
    """Chat Completions on a SigV4-signed endpoint (the OpenAI SDK can only send a
    bearer key)."""

    def __init__(self, *args: Any, **common: Any) -> None:
        common["max_request_bytes"] = common.get("max_request_bytes") or SIGNED_CHAT_CEILING
        common["context"] = common.get("context") or SIGNED_CHAT_CONTEXT
        super().__init__(*args, **common)

    def endpoint(self, signer: AwsSigner) -> str:
        """`/chat/completions` on the model's base URL."""
        return f"{self.spec.base_url}/chat/completions"
