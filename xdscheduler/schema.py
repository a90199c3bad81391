"""The base of every validated file and request body: strict types, finite numbers, no unknown
fields."""

from __future__ import annotations

from collections import Counter
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


def unique(names: list[str], what: str) -> None:
    """ValueError naming the names given more than once."""
    repeated = sorted(n for n, times in Counter(names).items() if times > 1)
    if repeated:
        raise ValueError(f"{what} names must be unique; repeated: {', '.join(repeated)}")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileModel(Strict):
    """A part of a scenario file or of a request body: `count: true` is not 1 and `"8"` is not
    8 (strict types), and every number is finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
