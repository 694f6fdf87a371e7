"""The fake Bedrock's signature check: the SigV4 signature recomputed with botocore.

As AWS does: an unknown access key is 403 `UnrecognizedClientException`, a signature
that does not match (wrong secret, altered header or body) or a scope for another
region or service is 403 `InvalidSignatureException`, a date more than 5 minutes off
is 403 `InvalidSignatureException` ("Signature expired").
"""

from __future__ import annotations

import datetime
import hmac
import re
from typing import Any, NamedTuple

from .._http import Request

__all__ = ["Refusal", "check_signature"]

_AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[^,]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})"
)
_SKEW = datetime.timedelta(minutes=5)


class Refusal(NamedTuple):
    """A request the fake refused: the AWS error type and its message."""

    kind: str
    message: str


class _SignatureError(Exception):
    """A refused signature: `kind` is the AWS error type."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def check_signature(
    request: Request,
    *,
    access_key: str,
    secret_key: str,
    region: str,
    service: str,
    now: datetime.datetime | None = None,
) -> None:
    """Return when the request is signed with these credentials for this scope.

    Raises:
        _SignatureError: missing, unknown, stale or wrong.
    """
    from botocore.auth import SigV4Auth  # type: ignore[import-untyped, unused-ignore]
    from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped, unused-ignore]
    from botocore.credentials import Credentials  # type: ignore[import-untyped, unused-ignore]

    header = request.headers.get("authorization") or ""
    match = _AUTH.fullmatch(header.strip())
    if match is None:
        raise _SignatureError("MissingAuthenticationTokenException", "Missing Authentication Token")
    if match["key"] != access_key:
        raise _SignatureError(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    stamp = request.headers.get("x-amz-date") or ""
    try:
        when = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        raise _SignatureError("IncompleteSignatureException", "X-Amz-Date is missing.") from None
    now = now or datetime.datetime.now(datetime.UTC)
    if abs(now - when) > _SKEW:
        raise _SignatureError(
            "InvalidSignatureException", f"Signature expired: {stamp} is now earlier or later."
        )
    if (match["date"], match["region"], match["service"]) != (stamp[:8], region, service):
        raise _SignatureError(
            "InvalidSignatureException",
            f"Credential should be scoped to a valid region and service ('{region}', '{service}').",
        )
    names = match["signed"].split(";")
    headers: dict[str, Any] = {}
    for name in names:
        value = request.headers.get(name)
        if value is None:
            raise _SignatureError(
                "InvalidSignatureException", f"Signed header {name!r} is not in the request."
            )
        headers[name] = value
    host = request.headers.get("host") or ""
    signed = AWSRequest(
        method=request.method,
        url=f"http://{host}{request.target}",
        data=request.body,
        headers=headers,
    )
    signed.context["timestamp"] = stamp
    auth = SigV4Auth(Credentials(access_key, secret_key), service, region)
    canonical = auth.canonical_request(signed)
    expected = auth.signature(auth.string_to_sign(signed, canonical), signed)
    if not hmac.compare_digest(expected, match["signature"]):
        raise _SignatureError(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you "
            "provided. Check your AWS Secret Access Key and signing method.",
        )
