"""The `xds` command's entry point: the live cluster's HTTP commands (`jobs`, `logs`, `cancel`,
`domains`, `submit`) run without importing the rest of the package, a second of imports on a
busy machine; every other command is `xdscheduler.cli`'s."""

from __future__ import annotations

import contextlib
import os
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from xdscheduler.live.cli import HTTP_COMMANDS, http_main

    if argv[:1] and argv[0] in HTTP_COMMANDS:
        return http_main(argv)
    if argv[:1] == ["live"] and argv[1:2] and argv[1] in HTTP_COMMANDS:  # the group's name
        return http_main(argv[1:], prog="xds live")
    from xdscheduler.cli import main as full

    return full(argv)


def console() -> None:
    """`xds` from a shell: the command, then its exit. A Ctrl-C while the command's modules
    load is one line and exit 130, as during its work; one that comes once its work is done,
    while libraries tear down (Ray's shutdown), ends the process at once with the command's
    status: Python would die of the signal (exit -2), or print a traceback from the teardown
    it interrupted."""
    try:
        status = main()
    except KeyboardInterrupt:  # before the command began (its imports): nothing to keep
        print("xds: interrupted", file=sys.stderr)
        status = 130
    if status == 130:
        _interrupt_handled()
    signal.signal(signal.SIGINT, lambda *_: os._exit(status))
    sys.exit(status)


def _interrupt_handled() -> None:
    """CPython marks a KeyboardInterrupt that leaves code run by `exec` of a string (a
    dataclass's or a namedtuple's methods are made so) as unhandled, though ours caught
    it; under `python -m` the process then dies of SIGINT at exit (-2), not with our 130.
    Clear that mark."""
    import ctypes

    with contextlib.suppress(AttributeError, ValueError):  # another interpreter: no such mark
        ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 0


if __name__ == "__main__":
    console()
