"""Command-line arguments checked as they are parsed: numbers within their physical range (the
range named in the message), and errors in one line."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import math
import os
import signal
import sys
import unicodedata
from collections.abc import Callable
from typing import NoReturn, overload

from xdscheduler.errors import Interrupted, UserError

SEED_LIMIT = 2**32  # numpy's seeds
PORT = (1, 65535)
# Unicode categories that show nothing, or move what is shown (a right-to-left mark, a zero-width
# space, a terminal escape): a name holding one is not the name it looks like.
INVISIBLE = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}


class Parser(argparse.ArgumentParser):
    """argparse with one line on standard error for bad arguments (exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"xds: error: {one_line(message)} (see {self.prog} --help)\n")


def run(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse `argv` and run the command it names (`args.fn`); the exit status: 2 with one line
    on standard error for bad input, 130 with one line for Ctrl-C, 0 for --help and a closed
    pipe."""
    try:
        for word in sys.argv[1:] if argv is None else argv:
            if why := invisible(word):  # a look-up ignoring punctuation would drop it
                raise UserError(f"{word!r} {why}; type it plainly")
        try:
            args = parser.parse_args(argv)
        except SystemExit as stop:  # --help (0), or a bad argument, said in one line (2)
            return stop.code if isinstance(stop.code, int) else 2
        args.fn(args)
    except Interrupted as err:
        print(f"xds: {one_line(err)}", file=sys.stderr)
        return err.exit_code
    except UserError as err:
        print(f"xds: error: {one_line(err)}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("xds: interrupted", file=sys.stderr)
        return Interrupted.exit_code
    except BrokenPipeError:
        return 0
    return 0


def as_command(main: Callable[[], int]) -> NoReturn:
    """Run `main` as the `xds` command runs and ends, with its exit status. A Ctrl-C
    - before `main`'s own handling begins (its imports) is one line and exit 130;
    - once the work is done, while libraries tear down (Ray's shutdown), ends the process at
      once with the status: Python would die of the signal (exit -2), or print a traceback from
      the teardown it interrupted;
    - while Python finalizes, after every exit hook `main`'s libraries add (the hook below is
      added before them, so it runs after them), is ignored: Python puts the signal's default
      action back as it finalizes, unless it is ignored, and the process died of it.
    And a Ctrl-C the command handled (130) is not left marked as unhandled: CPython marks one
    that left code run by `exec` of a string (a dataclass's or a namedtuple's methods are made
    so) though ours caught it, and under `python -m` the process then dies of SIGINT at exit."""
    atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
    try:
        status = main()
    except KeyboardInterrupt:  # before the command's own handling began: nothing to keep
        print("xds: interrupted", file=sys.stderr)
        status = Interrupted.exit_code
    if status == Interrupted.exit_code:
        import ctypes

        with contextlib.suppress(AttributeError, ValueError):  # another interpreter: no mark
            ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 0
    signal.signal(signal.SIGINT, lambda *_: os._exit(status))
    sys.exit(status)


def one_line(text: object) -> str:
    """`text` with what a user typed that is not printable (newlines, escapes) spelled out."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def invisible(text: str) -> str | None:
    """Why `text` is not what it looks like (its first invisible or control character), or
    None."""
    for i, c in enumerate(text):
        if unicodedata.category(c) in INVISIBLE:
            return f"holds an invisible or control character (U+{ord(c):04X}) at {i + 1}"
    return None


@overload
def number(
    kind: type[int], lo: float | None = None, hi: float | None = None, above: bool = False
) -> Callable[[str], int]: ...


@overload
def number(
    kind: type[float] = float, lo: float | None = None, hi: float | None = None, above: bool = False
) -> Callable[[str], float]: ...


def number(
    kind: type = float, lo: float | None = None, hi: float | None = None, above: bool = False
) -> Callable[[str], float | int]:
    """An argparse type: a finite `kind` (int or float) in [lo, hi] ((lo, hi] when `above`)."""
    span = (
        ("(" if above else "[")
        + ("-inf" if lo is None else _show(lo))
        + ", "
        + ("inf" if hi is None else _show(hi))
        + "]"
    )

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        low_ok = lo is None or (value > lo if above else value >= lo)
        if not (math.isfinite(value) and low_ok and (hi is None or value <= hi)):
            raise argparse.ArgumentTypeError(f"{text} is outside {span}")
        return value

    parse.__name__ = "integer" if kind is int else "number"  # what argparse calls it
    return parse


def port(text: str) -> int:
    return number(int, *PORT)(text)


def seed(text: str) -> int:
    return number(int, 0, SEED_LIMIT - 1)(text)


def _show(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"
