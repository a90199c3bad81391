"""Sections of a Markdown page (docs/results.md) written by the commands that compute them: the
text between `<!-- NAME:begin -->` and `<!-- NAME:end -->` is replaced, with a line saying what
made it."""

from __future__ import annotations

import re
from pathlib import Path

from xdscheduler.errors import UserError
from xdscheduler.textfile import output_file, read_text, write_atomic

MAX_BYTES = 16 << 20  # a README: this project's is under 100 KB


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def _marked(name: str) -> re.Pattern:
    begin, end = markers(name)
    return re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)


def check_readme(path: Path, name: str) -> str:
    """The text of `path`, which must hold one pair of `name` markers (UserError otherwise):
    checked before a long run, not after it."""
    path = Path(path)
    text = read_text(path, "--readme", MAX_BYTES, "Markdown")
    output_file(path, "--readme")  # written after the run: a device or a fifo refused now
    if len(_marked(name).findall(text)) != 1:
        begin, end = markers(name)
        raise UserError(f"{path} must hold one {begin} ... {end} pair to replace")
    return text


def splice_readme(path: Path, name: str, text: str, provenance: str) -> None:
    """Replace what stands between the `name` markers in `path` with `text` and a line saying
    what made it."""
    begin, end = markers(name)
    block = f"{begin}\n{provenance}\n\n{text.rstrip()}\n{end}"
    write_atomic(
        Path(path), _marked(name).sub(lambda _: block, check_readme(path, name)), "--readme"
    )
