"""A batch config's model strings (checked when the config is parsed, named without their
URL) and a harness entry's placement."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["NeedsEntry", "PlacementFields", "model_name", "model_string"]


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


class NeedsEntry(BaseModel):
    """What a harness needs (`Needs`): checked by the plan against the tasks and runtime."""

    model_config = ConfigDict(extra="forbid")

    capabilities: list[str] = Field(default_factory=list)
    api: Literal["openai-chat", "openai-responses", "anthropic-messages"] | None = None
    image: str | None = None
    network: bool = False


class PlacementFields(BaseModel):
    """Where a harness runs (`CommandAgent(placement=, ship=, needs=)`)."""

    placement: Literal["jail", "substrate"] = "jail"
    """`jail` beside the substrate, or `substrate`: inside the rollout's sandbox or container."""
    ship: list[str] = Field(default_factory=list)
    """Files copied into the substrate for each rollout (relative to the config)."""
    needs: NeedsEntry = Field(default_factory=NeedsEntry)
