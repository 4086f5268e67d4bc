"""The one exception type that the CLI turns into a one-line message."""

import os
import sys
from collections.abc import Callable


class StackcurateError(Exception):
    """A problem the user can fix (bad argument, missing input, conflicting output).

    The message is a single sentence that says what is wrong and what to do; `stackcurate` prints it as
    one line and exits with status 2 (set `STACKCURATE_DEBUG=1` for the traceback).
    """


def exit_code(action: Callable[[], object], interrupted: str = "rerun the same command to resume") -> int:
    """Run a command's `action`: 0 when it returns; a StackcurateError printed as one line (the traceback with
    STACKCURATE_DEBUG=1) and 2; an interrupt told how to go on, and 130."""
    try:
        action()
    except StackcurateError as exc:
        if os.environ.get("STACKCURATE_DEBUG"):
            raise
        print(f"stackcurate: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"stackcurate: interrupted; {interrupted}", file=sys.stderr)
        return 130
    return 0
