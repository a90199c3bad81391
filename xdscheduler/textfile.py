"""Reading a text file a user hands us (a scenario, a trace, a loss curve), checked before it is
parsed: a regular file, of bounded size, UTF-8 text; and writing ours whole or not at all."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from xdscheduler.errors import UserError


def read_text(path: Path, what: str, max_bytes: int, kind: str) -> str:
    """The text of `path`; UserError naming `what` (e.g. "scenario file") and what is wrong.
    `kind` names the format in the message for a binary file (e.g. "YAML", "CSV")."""
    try:
        if not path.is_file():  # a folder, a device (/dev/zero), a pipe
            found = "a folder" if path.is_dir() else "missing (no such file)" \
                if not path.exists() else "not a regular file"
            raise UserError(f"cannot read {what} {path}: {found}")
        size = path.stat().st_size
        if size > max_bytes:
            raise UserError(f"{what} {path} is {size:,} bytes; at most {max_bytes:,} are read")
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)  # the size again: the file may have grown since
    except OSError as err:
        raise UserError(f"cannot read {what} {path}: {err.strerror or err}") from None
    if len(data) > max_bytes:
        raise UserError(f"{what} {path} is over {max_bytes:,} bytes; at most that is read")
    if b"\x00" in data:
        raise UserError(f"{what} {path} is binary (or UTF-16/32); a {kind} text in UTF-8 is read")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {err.start}); save it as "
                        f"UTF-8") from None


def write_atomic(path: Path, data: str | bytes | Callable[[Path], object]) -> Path:
    """Write `data` (text, bytes, or a function writing the file at the path it is given)
    through a temporary file renamed over `path`: a reader (or a full disk) never sees half a
    file. The temporary file keeps the suffix, which some writers read the format from."""
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    if isinstance(data, str):
        tmp.write_text(data, encoding="utf-8")
    elif isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        data(tmp)
    return tmp.replace(path)
