"""SigV4-signed OpenAI-compatible endpoints (`mantle/<model>@https://host/v1`).

The body is Chat Completions' (`ChatAdapter.body`); the request goes through
proctor's HTTP client, signed with AWS credentials instead of carrying a key. Such
endpoints take small requests: unless told otherwise, a request stays under 3 MiB
(old frames dropped first) and a history over 24 messages is compacted into a
checkpoint.
"""

from __future__ import annotations

from typing import Any

import orjson

from ._client import ProviderAdapter, Reply
from ._context import ContextPolicy
from ._names import ModelSpec
from ._openai import ChatAdapter
from ._sigv4 import AwsSigner, SignedHttp

__all__ = ["SIGNED_CHAT_CEILING", "SIGNED_CHAT_CONTEXT", "SignedChatAdapter"]

SIGNED_CHAT_CEILING = 3 * 1024 * 1024
"""The request body ceiling of signed chat endpoints, in bytes (old images go first)."""

SIGNED_CHAT_CONTEXT = ContextPolicy(max_bytes=SIGNED_CHAT_CEILING, max_messages=24)
"""The compaction rule of signed chat endpoints when the caller gives none."""


class SignedChatAdapter(ChatAdapter):
    """Chat Completions on a SigV4-signed endpoint."""

    def __init__(
        self,
        model: str,
        spec: ModelSpec,
        *,
        signer: AwsSigner,
        timeout: float,
        headers: dict[str, str],
        **common: Any,
    ) -> None:
        # The OpenAI SDK is not used: it can only send a bearer key.
        common["max_request_bytes"] = common.get("max_request_bytes") or SIGNED_CHAT_CEILING
        common["context"] = common.get("context") or SIGNED_CHAT_CONTEXT
        ProviderAdapter.__init__(self, model, spec, **common)
        self.url = f"{spec.base_url}/chat/completions"
        self._http = SignedHttp(signer, timeout=timeout, headers=headers)

    async def send(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        """One signed `POST /chat/completions`."""
        return await self._http.request("POST", self.url, orjson.dumps(body), headers)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()
