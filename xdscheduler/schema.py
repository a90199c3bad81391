"""The base of every validated file and request body: strict types, finite numbers, no unknown
fields."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import ErrorDetails

Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


def named(pattern: str, rule: str) -> Callable[[str], str]:
    """A check of a name against `pattern` (an AfterValidator): a name it refuses is told
    `rule`, what is accepted in words, and the nearest name that fits, not the pattern."""

    def check(name: str) -> str:
        if re.fullmatch(pattern, name):
            return name
        near = _nearest(name, pattern)
        raise ValueError(f"{name!r} is not accepted: {rule}" + (f"; e.g. {near!r}" if near else ""))

    return check


def _nearest(name: str, pattern: str) -> str | None:
    """`name` without accents, each run of other characters one '-' (lower-cased, or '_' and
    '.' too, where `pattern` asks): None where that does not fit either (a name in Chinese)."""
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    for keep in ("A-Za-z0-9_.", "A-Za-z0-9"):
        dashed = re.sub(f"[^{keep}]+", "-", plain).strip("-")
        for near in (dashed, dashed.lower()):
            if re.fullmatch(pattern, near):
                return near
    return None


def said(error: ErrorDetails) -> str:
    """What one of a ValidationError's errors says, without pydantic's "Value error, " before
    the words of our own checks."""
    return error["msg"].removeprefix("Value error, ")


NAME = r"^[A-Za-z0-9_.-]+$"  # a domain's or a tenant's
Name = Annotated[
    str,
    AfterValidator(named(NAME, "a name takes only letters A-Z a-z, digits, '_', '.' and '-'")),
    Field(json_schema_extra={"pattern": NAME}),
]


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
