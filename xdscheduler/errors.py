"""The one exception type that speaks to the user: what was wrong, where, what is accepted."""


class UserError(Exception):
    """Bad input from a person: the CLI prints the message and exits with status 2."""

    exit_code = 2
