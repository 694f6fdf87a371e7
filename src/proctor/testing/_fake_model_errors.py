"""Error responses shaped like each provider's real ones."""

from __future__ import annotations

import orjson

from .._http import Response

__all__ = ["error_response"]

# status -> (OpenAI error type, OpenAI error code, message)
_OPENAI: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Forbidden."),
    404: ("invalid_request_error", "unknown_url", "Unknown request URL."),
    408: ("timeout", None, "Request timed out."),
    409: ("invalid_request_error", "conflict", "The request conflicts with another request."),
    413: ("invalid_request_error", "request_too_large", "Request too large."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
    500: ("server_error", None, "The server had an error while processing your request."),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
    504: ("server_error", None, "Gateway timeout."),
}
# status -> (Anthropic error type, message)
_ANTHROPIC: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use this resource."),
    404: ("not_found_error", "Not found."),
    408: ("timeout_error", "Request timed out."),
    409: ("conflict_error", "The request conflicts with another request."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
    500: ("api_error", "Internal server error"),
    503: ("api_error", "Service unavailable"),
    504: ("timeout_error", "Gateway timeout."),
    529: ("overloaded_error", "Overloaded"),
}


def error_response(
    anthropic: bool,
    status: int,
    request_id: str,
    message: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Response:
    """`status` with an OpenAI `{"error": ...}` or Anthropic `{"type": "error", ...}` body."""
    if anthropic:
        kind, default = _ANTHROPIC.get(
            status, ("invalid_request_error" if status < 500 else "api_error", "Error.")
        )
        body = {
            "type": "error",
            "error": {"type": kind, "message": message or default},
            "request_id": request_id,
        }
        fields = [("request-id", request_id)]
    else:
        kind, code, default = _OPENAI.get(
            status, ("invalid_request_error" if status < 500 else "server_error", None, "Error.")
        )
        body = {"error": {"message": message or default, "type": kind, "param": None, "code": code}}
        fields = [("x-request-id", request_id)]
    return Response(
        status, [("content-type", "application/json"), *fields, *headers], orjson.dumps(body)
    )
