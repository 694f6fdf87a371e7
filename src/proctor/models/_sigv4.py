"""AWS Signature Version 4 over proctor's own HTTP client, with botocore's signer.

Credentials come from botocore's standard chain (environment, shared files and
profiles, SSO, container and instance roles) and are refreshed by it; each request is
signed just before it is sent (a signature is only valid for minutes, so a retry after
a long backoff is signed anew). The credentials stay in this object: never in argv,
logs, traces or `repr`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .._errors import ModelError
from .._http import HttpClient
from ._client import ProviderAdapter, Reply
from ._names import ModelSpec

__all__ = ["AwsSigner", "SignedAdapter", "SignedHttp", "aws_signer"]

_UNSIGNED = frozenset({"authorization", "x-amz-date", "x-amz-security-token", "content-length"})


@dataclass(frozen=True, slots=True)
class AwsSigner:
    """Signs requests for one AWS service and region.

    Attributes:
        service: the signing name (`bedrock` for Bedrock runtime and control plane).
        region: the AWS region (`us-east-1`, ...).
        credentials: botocore credentials (refreshable ones refresh themselves).
    """

    service: str
    region: str
    credentials: Any = field(repr=False)

    def endpoint(self, prefix: str) -> str:
        """The AWS endpoint `https://{prefix}.{region}.amazonaws.com` (`bedrock-runtime`,
        `bedrock`)."""
        return f"https://{prefix}.{self.region}.amazonaws.com"

    def sign(
        self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> list[tuple[str, str]]:
        """`headers` plus `X-Amz-Date`, the session token if any, and `Authorization`."""
        from botocore.auth import SigV4Auth  # type: ignore[import-untyped, unused-ignore]
        from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped, unused-ignore]

        kept = {k.lower(): v for k, v in headers if k.lower() not in _UNSIGNED}
        request = AWSRequest(method=method, url=url, data=body, headers=kept)
        frozen = self.credentials.get_frozen_credentials()
        SigV4Auth(frozen, self.service, self.region).add_auth(request)
        return [(k.lower(), str(v)) for k, v in request.headers.items()]


def aws_signer(
    service: str = "bedrock", *, region: str | None = None, profile: str | None = None
) -> AwsSigner:
    """A signer with credentials and region from the standard chain (`AWS_PROFILE`,
    `AWS_REGION`/`AWS_DEFAULT_REGION`, `~/.aws/config`, ...), or from `profile`.

    Raises:
        ModelError: no credentials or no region were found, or the profile is unknown.
        ImportError: botocore is not installed (names the extra).
    """
    try:
        import botocore.exceptions  # type: ignore[import-untyped, unused-ignore]
        import botocore.session  # type: ignore[import-untyped, unused-ignore]
    except ImportError as exc:
        raise ImportError("boto3 is not installed: pip install 'proctor[bedrock]'") from exc
    try:
        session = botocore.session.Session(profile=profile)
        credentials = session.get_credentials()
        region = region or session.get_config_variable("region")
    except botocore.exceptions.ProfileNotFound as exc:
        raise ModelError(f"AWS profile not found: {exc}") from None
    except botocore.exceptions.BotoCoreError as exc:
        raise ModelError(f"AWS credentials could not be loaded: {exc}") from None
    if credentials is None:
        raise ModelError(
            "no AWS credentials found: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY), or configure ~/.aws/credentials"
        )
    if not region:
        raise ModelError("no AWS region: set AWS_REGION, or region in the AWS profile")
    return AwsSigner(service, region, credentials)


class SignedHttp:
    """Signed requests through one keep-alive `HttpClient`, answered as `Reply`s."""

    def __init__(self, signer: AwsSigner, *, timeout: float, headers: dict[str, str]) -> None:
        self.signer = signer
        self.headers = dict(headers)
        self._http = HttpClient(read_timeout=timeout)

    async def request(
        self, method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Reply:
        """One signed attempt; error statuses are replies.

        Raises:
            HttpError: no response came back (connect, read, timeout).
        """
        plain = {**self.headers, **(headers or {})}
        if body:
            plain.setdefault("content-type", "application/json")
        signed = self.signer.sign(method, url, plain.items(), body)
        response = await self._http.request(method, url, headers=signed, body=body)
        content = await response.read()
        return Reply(response.status, response.headers, content)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()


class SignedAdapter(ProviderAdapter):
    """An adapter that posts its bodies to one URL, signed with AWS credentials, through
    proctor's HTTP client (`SignedHttp`) instead of an SDK."""

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
        # ProviderAdapter's, not super()'s: a signed chat adapter makes no SDK client.
        ProviderAdapter.__init__(self, model, spec, **common)
        self.url = self.endpoint(signer)
        self._http = SignedHttp(signer, timeout=timeout, headers=headers)

    @abstractmethod
    def endpoint(self, signer: AwsSigner) -> str:
        """The URL every request goes to."""

    async def send(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        """One signed `POST` of the body to `url`."""
        return await self._http.request("POST", self.url, orjson.dumps(body), headers)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()
