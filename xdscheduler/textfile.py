"""Files a user names: what we read from them, checked before it is parsed (a regular file, of
bounded size, UTF-8 text where text is read), and what we write to them, whole or not at all,
and only to a regular file or a new file in an existing folder: never through a device, a fifo,
a socket or a symlink to one (renaming over `/dev/full` would replace the device)."""

from __future__ import annotations

import gzip
import os
import stat
import tempfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

from xdscheduler.errors import UserError

MAX_CSV_BYTES = 64 << 20  # 64 MiB: the largest shared trace is under 4 MB


def checked_input(path: Path, what: str, max_bytes: int) -> Path:
    """`path`, once it is known to be a regular file of at most `max_bytes` (for a file a
    library opens itself: SQLite, Parquet); UserError naming `what` and what is wrong."""
    path = Path(path)
    try:
        if not path.is_file():  # a folder, a device (/dev/zero), a pipe, nothing
            found = (
                "a folder"
                if path.is_dir()
                else "missing (no such file)"
                if not path.exists()
                else "not a regular file"
            )
            raise UserError(f"cannot read {what} {path}: {found}")
        size = path.stat().st_size
    except OSError as err:
        raise UserError(f"cannot read {what} {path}: {err.strerror or err}") from None
    if size > max_bytes:
        raise UserError(f"{what} {path} is {size:,} bytes; at most {max_bytes:,} are read")
    return path


def read_bytes(path: Path, what: str, max_bytes: int) -> bytes:
    """The content of the regular file `path`, at most `max_bytes` of it (UserError else); a
    `.gz` file's content decompressed, at most `max_bytes` of that too (a small file may
    inflate to gigabytes)."""
    path = checked_input(path, what, max_bytes)
    gz = path.suffix.lower() == ".gz"
    try:
        with gzip.open(path, "rb") if gz else path.open("rb") as f:
            data = f.read(max_bytes + 1)  # the size again: the file may have grown since
    except OSError as err:  # gzip.BadGzipFile too
        raise UserError(f"cannot read {what} {path}: {err.strerror or err}") from None
    except (EOFError, zlib.error) as err:
        raise UserError(f"cannot read {what} {path}: a damaged gzip file ({err})") from None
    if len(data) > max_bytes:
        size = f"over {max_bytes:,} bytes" + (" unpacked" if gz else "")
        raise UserError(f"{what} {path} is {size}; at most {max_bytes:,} are read")
    return data


def read_text(path: Path, what: str, max_bytes: int, kind: str) -> str:
    """The text of `path`; UserError naming `what` (e.g. "scenario file") and what is wrong.
    `kind` names the format in the message for a binary file (e.g. "YAML", "CSV")."""
    data = read_bytes(path, what, max_bytes)
    if b"\x00" in data:
        raise UserError(f"{what} {path} is binary (or UTF-16/32); a {kind} text in UTF-8 is read")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UserError(
            f"{what} {path} is not UTF-8 text (byte {err.start}); save it as UTF-8"
        ) from None


def unzipped(name: str) -> str:
    """A file's name as its content is named: without `.gz` (vc6YE.csv for vc6YE.csv.gz)."""
    return name[:-3] if name.lower().endswith(".gz") else name


def data_stem(path: str | Path) -> str:
    """A data file's name without its suffix, gzipped or not (vc6YE for vc6YE.csv.gz)."""
    return Path(unzipped(Path(path).name)).stem


def read_frame(path: Path, what: str, max_bytes: int = MAX_CSV_BYTES):
    """The CSV at `path` as a pandas DataFrame, read as `read_text` reads, its columns named
    as `column_name` reads them; UserError where it is not a CSV pandas can read or has no
    data row."""
    import io
    import warnings

    import pandas as pd

    text = read_text(path, what, max_bytes, "CSV")
    try:
        with warnings.catch_warnings():
            # a row longer than the header: never its first field taken for an index (a
            # trailing comma shifting every column) nor its last dropped without a word
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(
                io.StringIO(text),
                sep=csv_delimiter(text),
                skipinitialspace=True,
                index_col=False,
            )
    except (ValueError, pd.errors.ParserWarning) as err:  # ParserError, EmptyDataError too
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{what} {path} is not a readable CSV: {first}") from None
    if frame.empty:
        raise UserError(f"{what} {path}: no data rows after the header line")
    frame.columns = [column_name(c) for c in frame.columns]
    twice = frame.columns[frame.columns.duplicated()]
    if len(twice):
        raise UserError(f"{path}: column {twice[0]!r} appears twice in the header")
    return frame


def csv_delimiter(text: str) -> str:
    """The delimiter of a CSV: a semicolon where the header has one and no comma (a
    spreadsheet's export where the comma is the decimal mark), else a comma."""
    header = next((line for line in text.splitlines() if line.strip()), "")
    return ";" if ";" in header and "," not in header else ","


def column_name(name) -> str:
    """A header's name as the readers match it: case and the spaces around and between its
    words aside ('Running GPU Num ' names running_gpu_num)."""
    return "_".join(str(name).split()).lower()


def numeric_column(frame, column: str, path: Path):
    """Column `column` of a frame `read_frame` read (or rows cut from it), as numbers (empty
    cells NaN); UserError naming the first cell that is not a finite number by file, row (as
    the file counts it, the header its first) and column."""

    import pandas as pd

    number = pd.to_numeric(frame[column], errors="coerce")
    bad = (number.isna() & frame[column].notna()) | number.abs().eq(float("inf"))
    if bad.any():
        row = bad.idxmax()  # the label: a row's place in the file, in a frame cut from it too
        value = str(frame[column][row])
        raise UserError(f"{path}: row {int(row) + 2}, {column}: {value!r} is not a finite number")
    return number


def output_file(path: Path, what: str = "output") -> Path:
    """Where an output named `path` is written: the regular file it is (or a symlink leads
    to), or a new file in an existing folder; UserError otherwise, before any work."""
    path = Path(path)
    real = Path(os.path.realpath(path))
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise UserError(
                f"cannot write {what} {path}: a symlink to nothing ({os.readlink(path)})"
            ) from None
        if not real.parent.is_dir():
            raise UserError(f"cannot write {what} {path}: no folder {real.parent}") from None
        return real
    except OSError as err:
        raise UserError(f"cannot write {what} {path}: {err.strerror or err}") from None
    if not stat.S_ISREG(mode):
        found = "a folder" if stat.S_ISDIR(mode) else "a device, fifo or socket"
        raise UserError(
            f"cannot write {what} {path}: it is {found}, not a regular file; name a file"
        )
    return real


def output_folder(path: Path, what: str = "output folder") -> Path:
    """The folder `path`, made if it is not there; UserError if it cannot be."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"cannot write the {what} {path}: it is a file, not a folder") from None
    except OSError as err:
        raise UserError(f"cannot write the {what} {path}: {err.strerror or err}") from None
    return path


def unclaimed(folder: Path, names: Iterable[str], what: str) -> None:
    """UserError naming the first of `names` that `folder` holds: `what` would write over a
    file it may not have written (a user's own report.html), which only `--force` allows."""
    for name in names:
        if os.path.lexists(Path(folder) / name):
            raise UserError(
                f"{folder} holds {name}, which {what} would write over: --force to replace "
                f"it, or pick another --out"
            )


def write_atomic(
    path: Path, data: str | bytes | Callable[[Path], object], what: str = "output"
) -> Path:
    """Write `data` (text, bytes, or a function writing the file at the path it is given) to
    `path` (see `output_file`) through a new temporary file renamed over it: a reader (or a
    full disk) never sees half a file. The temporary file keeps the suffix, which some writers
    read the format from. UserError, with nothing changed, where it cannot be written."""
    real = output_file(path, what)
    try:
        mode = os.stat(real).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    try:
        fd, name = tempfile.mkstemp(
            prefix=f".{real.stem}.", suffix=f".tmp{real.suffix}", dir=real.parent
        )  # a new file of ours, whatever was there
    except OSError as err:
        raise UserError(f"cannot write {what} {path}: {err.strerror or err}") from None
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, str | bytes):
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
        if callable(data):
            data(tmp)
        os.chmod(tmp, mode)
        tmp.replace(real)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {what} {path}: {err.strerror or err}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
