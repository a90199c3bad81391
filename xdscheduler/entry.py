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
    """`xds` from a shell: the command, then its exit (`arguments.exit_with`, `calm_at_exit`).
    A Ctrl-C while the command's modules load is one line and exit 130, as during its work."""
    from xdscheduler.arguments import calm_at_exit, exit_with

    calm_at_exit()
    try:
        status = main()
    except KeyboardInterrupt:  # before the command began (its imports): nothing to keep
        print("xds: interrupted", file=sys.stderr)
        status = 130
    exit_with(status)


if __name__ == "__main__":
    console()
