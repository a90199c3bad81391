"""Reading a CSV a user hands us (a demand trace, a loss curve): the file checked as text first
(a regular file of bounded size, UTF-8; comma- or semicolon-delimited), then its header for the
columns a reader needs (case and spaces aside, as `column_name` reads them), then
every row's number of fields and every value of those columns, naming the row (and column) of
the first bad one. Rows are counted from 1, the first line after the header; blank lines are
skipped and not counted."""

from __future__ import annotations

import csv
import io
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

from xdscheduler.errors import UserError
from xdscheduler.textfile import MAX_CSV_BYTES, column_name, csv_delimiter, read_text

MAX_ROWS = 2_000_000  # bounds what reading holds in memory: 3.8 years of a row a minute
# Timestamps outside these years are a typo (a trace from before the epoch, or centuries out).
FIRST_TIME, END_TIME = pd.Timestamp("1970-01-01"), pd.Timestamp("2201-01-01")
SAMPLE_ROWS = 10_000  # of a long time column, to choose between dd/mm and mm/dd on


class MissingColumns(UserError):
    """The header lacks the columns a reader needs: another kind of CSV, not a broken one."""


def read_csv(
    path: str | Path, what: str, needs: Sequence[Sequence[str]], optional: Sequence[str] = ()
) -> pd.DataFrame:
    """The columns of the first set in `needs` that the header has, and those of `optional` it
    has, as the text written (a message quotes a bad value as typed; `numbers` and
    `timestamps` read them). Every row must have the header's number of fields: one more or
    fewer shifts the values after it into the wrong columns."""
    path = Path(path)
    text = read_text(path, what, MAX_CSV_BYTES, "CSV")
    # strict: a quote left open or text after a closing quote is an error, not a value
    rows = csv.reader(
        io.StringIO(text), delimiter=csv_delimiter(text), skipinitialspace=True, strict=True
    )
    try:
        header = next((row for row in rows if row), None)  # blank lines are skipped
        if header is None:
            raise UserError(f"{path}: empty; a CSV with a header line and data rows is read")
        cols = pick(header, needs, str(path))
        names = [column_name(c) for c in header]
        cols += [c for c in optional if c in names and c not in cols]
        twice = [c for c in cols if names.count(c) > 1]
        if twice:
            raise UserError(f"{path}: column {twice[0]!r} appears twice in the header")
        return _columns(rows, names, cols, path)
    except csv.Error as err:
        raise UserError(f"{path}, line {rows.line_num}: not a readable CSV ({err})") from None


def _columns(rows, header: list[str], cols: list[str], path: Path) -> pd.DataFrame:
    at = [header.index(c) for c in cols]
    data: list[list[str]] = [[] for _ in cols]
    for row in rows:
        if not row:
            continue
        if len(row) == len(header) + 1 and not row[-1]:
            row.pop()  # a trailing comma the header lacks: an exporter's habit, not a value
        if len(row) != len(header):
            raise UserError(
                f"{path}, row {len(data[0]) + 1}: {len(row)} fields where the "
                f"header has {len(header)}"
            )
        if len(data[0]) == MAX_ROWS:
            raise UserError(f"{path}: more than {MAX_ROWS:,} data rows; at most that many are read")
        for values, i in zip(data, at, strict=True):
            values.append(row[i])
    if not data[0]:
        raise UserError(f"{path}: no data rows after the header line")
    return pd.DataFrame(dict(zip(cols, data, strict=True)))


def pick(columns: Sequence, needs: Sequence[Sequence[str]], where: str) -> list[str]:
    """The first set of `needs` that `columns` holds (as `column_name` reads them);
    MissingColumns naming them all if none."""
    have = set(map(column_name, columns))
    for cols in needs:
        if set(cols) <= have:
            return list(cols)
    sets = [", ".join(map(repr, cols)) for cols in needs]
    wanted = (
        f"a {sets[0]} column"
        if len(needs) == 1 and len(needs[0]) == 1
        else f"columns {sets[0]}"
        if len(needs) == 1
        else "columns " + " or ".join(f"({s})" for s in sets)
    )
    found = ", ".join(repr(str(c)) for c in columns) or "none"  # quoted: a stray space shows
    raise MissingColumns(f"{where}: needs {wanted}; found {found}")


def numbers(
    df: pd.DataFrame,
    col: str,
    where: str,
    low: float = 0.0,
    high: float = np.inf,
    above: bool = False,
    whole: bool = False,
) -> np.ndarray:
    """Column `col` as floats, each finite and in [low, high] ((low, high] when `above`; whole
    numbers when `whole`); else UserError naming the first bad row."""
    raw = df[col]
    x = pd.to_numeric(raw, errors="coerce").to_numpy(float)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(x) & ((x > low) if above else (x >= low)) & (x <= high)
        if whole:
            ok &= x == np.floor(x)
    if ok.all():
        return x
    i = int(np.argmin(ok))
    kind = "a whole number" if whole else "a finite number"
    bound = f"above {low:,.0f}" if above else f"from {low:,.0f}"
    accepted = f"{kind} {bound}" + (f" to {high:,.0f}" if np.isfinite(high) else "")
    raise UserError(f"{where}, row {i + 1}, column {col!r}: {_cell(raw.iloc[i])} is not {accepted}")


def timestamps(df: pd.DataFrame, col: str, where: str) -> pd.DatetimeIndex:
    """Column `col` as times (UTC wall time where an offset is given), each in the years read
    and written in the format of the first; else UserError naming the first bad row."""
    t = _times(df[col])
    ok = (t >= FIRST_TIME) & (t < END_TIME)  # unreadable (NaT) compares False
    if ok.all():
        return t
    i = int(np.argmin(ok))
    like = (
        f"written like row {np.argmax(ok) + 1} ({df[col].iloc[np.argmax(ok)]})"
        if ok.any()
        else "e.g. 2020-05-01 00:00:00"
    )
    raise UserError(
        f"{where}, row {i + 1}, column {col!r}: {_cell(df[col].iloc[i])} is not "
        f"a date and time from 1970 to 2200 {like}"
    )


def _times(values: pd.Series) -> pd.DatetimeIndex:
    """Times without a zone (UTC where one is given); NaT where unreadable."""
    if not pd.api.types.is_datetime64_any_dtype(values):
        text = values.astype(str).where(values.notna(), "")
        first = next((v for v in text if v.strip()), "")
        # The format of the first value, as pandas would infer it, but never its per-value
        # fallback (dateutil: minutes on a large file of junk); ISO 8601 where none is guessed.
        # 01/05/2020 reads month first or day first: the reading that fits the whole column.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            usual = guess_datetime_format(first) or "ISO8601"
            day_first = guess_datetime_format(first, dayfirst=True) or usual
            formats = [usual]
            if day_first != usual and day_first.startswith("%d"):  # never yyyy-dd-mm
                formats.append(day_first)
            values = _best_reading(text, formats)
    t = pd.DatetimeIndex(values)
    return t.tz_convert(None) if t.tz is not None else t


def _best_reading(text: pd.Series, formats: list[str]) -> pd.Series:
    """The column read in the format of `formats` that fits it best (`_misfit`), chosen on an
    even sample of a long column and read whole once; read whole in every format only where
    the chosen one leaves a row unreadable that the sample did not show."""

    def read(values: pd.Series, fmt: str) -> pd.Series:
        return pd.to_datetime(values, format=fmt, errors="coerce", utc=True)

    if len(formats) == 1:
        return read(text, formats[0])
    step = max(len(text) // SAMPLE_ROWS, 1)
    sample = text.iloc[np.unique(np.r_[np.arange(0, len(text), step), len(text) - 1])]
    ranked = sorted(formats, key=lambda f: _misfit(read(sample, f)))
    best = read(text, ranked[0])
    if best.notna().all():
        return best
    return min([best, *(read(text, f) for f in ranked[1:])], key=_misfit)


def _misfit(t: pd.Series) -> tuple[int, int, float]:
    """How badly a reading of a time column fits: unreadable rows, then steps back in time (a
    series is written in order; dd/mm read as mm/dd jumps months back and forth), then the
    time it spans; month first where two readings tie."""
    ns = t.to_numpy("datetime64[ns]").astype("int64")
    ok = t.notna().to_numpy()
    steps = np.diff(ns[ok])
    return int((~ok).sum()), int((steps < 0).sum()), float(np.ptp(ns[ok])) if ok.any() else 0.0


def by_key(keys, values: np.ndarray) -> pd.Series:
    """Values by key (a time, a step), sorted, one per key: the rows of one key averaged."""
    return pd.Series(values, index=keys).groupby(level=0).mean()


def _cell(value) -> str:
    """A cell as a message quotes it: empty, or its text cut to a readable length."""
    text = "" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)
    if not text.strip():
        return "an empty cell"
    return repr(text if len(text) <= 40 else text[:40] + "…")
