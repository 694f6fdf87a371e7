"""Where the proxy forwards one family of APIs: a provider's root, kind, key and model."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import quote

from ..models import Api, AwsSigner, ModelSpec, aws_signer, parse_model

__all__ = ["Upstream"]


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the proxy forwards one family of APIs.

    Args:
        base_url: the API root, as the provider's SDK takes it
            (`https://api.openai.com/v1`, `http://127.0.0.1:8000/v1`,
            `https://api.anthropic.com`).
        kind: `openai` (chat, responses, models) or `anthropic` (messages).
        api_key: the real key; kept out of repr, traces and logs.
        signer: signs each attempt with AWS SigV4 (`mantle/`, `bedrock/`) with the
            driver's credentials, which never reach the harness; out of repr.
        converse: chat completions go to Bedrock Converse (`model` at `base_url`),
            translated there and back; a harness that streams gets the answer as one
            stream of chunks.
        model: when set, replaces the `model` of every forwarded request.
    """

    base_url: str
    kind: str = "openai"
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    signer: AwsSigner | None = field(default=None, repr=False)
    converse: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("openai", "anthropic"):
            raise ValueError(f"Upstream.kind is 'openai' or 'anthropic', not {self.kind!r}")
        if self.converse and (self.signer is None or not self.model or self.kind != "openai"):
            raise ValueError("a Converse upstream is kind 'openai' with a signer and a model")

    @classmethod
    def of(cls, target: str | ModelSpec | Upstream) -> Upstream:
        """An upstream from a base URL (OpenAI-compatible), a model string or a spec.

        A model string's kind follows its API (`anthropic/...` serves `/v1/messages`)
        and its key is read from its provider's environment variable now; a SigV4
        one (`mantle/...@url`, `bedrock/...`) gets a signer from the AWS standard
        chain now.
        """
        if isinstance(target, Upstream):
            return target
        if isinstance(target, str) and target.startswith(("http://", "https://")):
            return cls(target)
        spec = parse_model(target) if isinstance(target, str) else target
        key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
        kind = "anthropic" if spec.api == "messages" else "openai"
        signer = aws_signer() if spec.auth == "sigv4" else None
        if signer is not None and spec.api == "converse":
            base = spec.base_url or signer.endpoint("bedrock-runtime")
            return cls(base, kind, None, spec.model, signer, converse=True)
        return cls(spec.base_url, kind, key, spec.model, signer)

    def url(self, path: str) -> str:
        """The provider URL for a proxy path such as `/v1/chat/completions` (as its SDK
        builds it: OpenAI roots include the version, Anthropic's do not)."""
        base = self.base_url.rstrip("/")
        if self.converse:
            return f"{base}/model/{quote(self.model or '', safe='')}/converse"
        if self.kind == "anthropic":
            return base.removesuffix("/v1") + path
        return base + path.removeprefix("/v1")

    def auth(self) -> dict[str, str]:
        """The provider's authentication headers (and Anthropic's default version)."""
        api: Api = "messages" if self.kind == "anthropic" else "chat"
        return ModelSpec("", self.model or "", api, self.base_url, None).auth_headers(self.api_key)

    def signed(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes
    ) -> list[tuple[str, str]]:
        """`headers` as one attempt sends them: signed now when the upstream signs."""
        if self.signer is None:
            return headers
        return self.signer.sign(method, url, headers, body)
