"""The one exception type that speaks to the user: what was wrong, where, what is accepted."""


class UserError(Exception):
    """Bad input from a person: the CLI prints the message and exits with status 2."""

    exit_code = 2


class Interrupted(UserError):
    """The user stopped a command (Ctrl-C): what was kept and how to go on, exit status 130
    (128 + SIGINT, as a shell reports it)."""

    exit_code = 130
