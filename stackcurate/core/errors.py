"""The one exception type that the CLI turns into a one-line message."""


class StackcurateError(Exception):
    """A problem the user can fix (bad argument, missing input, conflicting output).

    The message is a single sentence that says what is wrong and what to do; `stackcurate` prints it as
    one line and exits with status 2 (set `STACKCURATE_DEBUG=1` for the traceback).
    """
