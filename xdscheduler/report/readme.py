"""Sections of a Markdown page (docs/results.md) written by the commands that compute them: the
text between `<!-- NAME:begin -->` and `<!-- NAME:end -->` is replaced, with a line saying what
made it."""

from __future__ import annotations

import re
from pathlib import Path

from xdscheduler.errors import UserError


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def _marked(name: str) -> re.Pattern:
    begin, end = markers(name)
    return re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)


def check_readme(path: Path, name: str) -> str:
    """The text of `path`, which must hold one pair of `name` markers (UserError otherwise):
    checked before a long run, not after it."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    if len(_marked(name).findall(text)) != 1:
        begin, end = markers(name)
        raise UserError(f"{path} must hold one {begin} ... {end} pair to replace")
    return text


def splice_readme(path: Path, name: str, text: str, provenance: str) -> None:
    """Replace what stands between the `name` markers in `path` with `text` and a line saying
    what made it."""
    begin, end = markers(name)
    block = f"{begin}\n{provenance}\n\n{text.rstrip()}\n{end}"
    Path(path).write_text(_marked(name).sub(lambda _: block, check_readme(path, name)))
