"""The batch config's `computer` agent entry: `ComputerAgent` on a model, with its options."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ._config_model import model_name, model_string

__all__ = ["ComputerAgentEntry", "FrameConfig"]


class FrameConfig(BaseModel):
    """How each frame the model sees is encoded (`DesktopClient`'s frame options)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["png", "jpeg"] = "png"
    quality: Annotated[int, Field(ge=1, le=95)] = 80
    """JPEG quality."""
    scale: Annotated[float, Field(ge=0.05, le=1, allow_inf_nan=False)] = 1.0
    """Scale the screen down by this factor (fewer image tokens, coarser clicks)."""


class ComputerAgentEntry(BaseModel):
    """`proctor.agents.ComputerAgent` on a model behind the interception proxy: it drives
    the task's desktop or browser one action batch per turn (`docs/computer-agent.md`)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    """Names the agent in rollout ids; default: `computer-` and the model string."""
    enabled: bool = True
    """A disabled entry stays in the assignment table but runs nothing."""
    kind: Literal["computer"]
    model: str
    """`provider/model[@base_url][?api=...]`, e.g. `openai/gpt-4.1`."""
    capability: str | None = None
    """The capability to drive; default: the run's first desktop, else its first browser."""
    max_actions: Annotated[int, Field(ge=1)] = 5_000
    """The rollout's action budget (then `stop_reason = "action_budget"`)."""
    max_invalid: Annotated[int, Field(ge=1)] = 10
    """Invalid batches in a row that end the rollout (`"invalid_actions"`)."""
    max_frames: Annotated[int, Field(ge=1)] = 3
    """Frames kept in the history (the reference image and the newest always are)."""
    frame: FrameConfig = Field(default_factory=FrameConfig)
    settle_ms: Annotated[int, Field(ge=0, le=10_000)] = 300
    """After each batch, wait at most this long for the screen to change and hold still
    before its frame is taken (0: at once)."""
    done: bool = True
    """Offer the `done` action."""
    strict: bool = True
    """Ask for strict schema adherence where the API has it (OpenAI)."""
    native: bool = False
    """The provider's own computer-use tool instead of `computer_action`."""
    system_prompt: str | None = None
    """The system message; default: `ComputerAgent`'s."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Request parameters (`temperature`, `max_tokens`, ...)."""

    _model = field_validator("model")(model_string)

    def default_name(self) -> str:
        """`computer-` and the model string without its URL: `computer-openai/gpt-4.1`."""
        return "computer-" + model_name(self.model)
