"""The one exception type that the CLI turns into a one-line message."""

import errno
import os
import sys
from collections.abc import Callable


class StackcurateError(Exception):
    """A problem the user can fix (bad argument, missing input, conflicting output).

    The message is a single sentence that says what is wrong and what to do; `stackcurate` prints it as
    one line and exits with status 2 (set `STACKCURATE_DEBUG=1` for the traceback).
    """


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or the user's quota) is full; pyarrow's OSErrors often carry the reason only
    in their message."""
    if not isinstance(exc, OSError):
        return False
    return exc.errno in (errno.ENOSPC, errno.EDQUOT) or any(
        text in str(exc) for text in ("No space left on device", "Disk quota exceeded")
    )


def exit_code(action: Callable[[], object], interrupted: str = "rerun the same command to resume") -> int:
    """Run a command's `action`: 0 when it returns (or when what read its output stopped reading); a
    StackcurateError printed as one line (the traceback with STACKCURATE_DEBUG=1) and 2; an interrupt told how to
    go on, and 130."""
    try:
        action()
        sys.stdout.flush()  # here, where a reader that left is caught (below), not as Python exits
    except BrokenPipeError:  # the reader of the output left (`stackcurate stats OUT | head`): not an error
        # Python would report the pipe again as it flushes stdout on exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except StackcurateError as exc:
        if os.environ.get("STACKCURATE_DEBUG"):
            raise
        print(f"stackcurate: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if not is_disk_full(exc) or os.environ.get("STACKCURATE_DEBUG"):
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        print(
            f"stackcurate: error: no space left on device{where}; free some space or choose another --out, "
            "then rerun the same command to resume",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"stackcurate: interrupted; {interrupted}", file=sys.stderr)
        return 130
    return 0
