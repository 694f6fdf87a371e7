"""A batch config's model strings: checked when the config is parsed, named without their URL."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["model_name", "model_string"]


def model_string(value: str) -> str:
    """`value` if it is a model string whose base URL carries no credentials.

    Raises:
        ValueError: not a model string (the message says why), or `user:pass@` in its URL.
    """
    from ..models import parse_model

    spec = parse_model(value)  # ValueError names what is wrong with it
    if urlsplit(spec.base_url).username is not None:
        raise ValueError("a base URL must not carry credentials; keys come from the environment")
    return value


def model_name(model: str) -> str:
    """The model string without its URL or API: `openai/gpt-4.1-mini`."""
    return model.split("@", 1)[0].split("?", 1)[0]
