"""The architecture of a live job's model, as its job file gives it: what the planner plans with,
and what the built-in GPT (and any code of the user's that reads it) builds."""

from __future__ import annotations

from pydantic import Field, model_validator

from xdscheduler.schema import Strict


class GptShape(Strict):
    """The architecture of a live job's model (the planner reads the same numbers)."""

    layers: int = Field(default=2, ge=1, le=128)
    hidden: int = Field(default=128, ge=8, le=16384)
    heads: int = Field(default=4, ge=1, le=256)
    vocab: int = Field(default=512, ge=2, le=1_000_000)
    seq: int = Field(default=64, ge=2, le=131_072)

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> GptShape:
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        return self

    def architecture(self) -> dict:
        """The scenario's `architecture:` block for this shape (a GeLU MLP of 4·hidden)."""
        return {
            "layers": self.layers,
            "hidden": self.hidden,
            "ffn_hidden": 4 * self.hidden,
            "heads": self.heads,
            "vocab": self.vocab,
            "gated_mlp": False,
        }
