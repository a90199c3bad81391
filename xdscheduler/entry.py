"""The `xds` command's entry point: the live cluster's HTTP commands (`jobs`, `logs`, `cancel`,
`domains`, `submit`) run without importing the rest of the package, a second of imports on a
busy machine; every other command is `xdscheduler.cli`'s."""

from __future__ import annotations

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
    """`xds` from a shell: the command, run and ended as `arguments.as_command` says."""
    from xdscheduler.arguments import as_command

    as_command(main)


if __name__ == "__main__":
    console()
