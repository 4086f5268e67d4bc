"""What every command's parser shares: no abbreviated flags, one-line errors that name the closest command or
flag, and the run options."""

import argparse
import dataclasses
import difflib
import sys
from typing import Any, NoReturn

VERBOSE = "debug logging, and print the resolved config"


class Parser(argparse.ArgumentParser):
    """Every parser and subparser of the command: no abbreviated flags (`--repo` is not taken for `--repos`), and
    an error shows the command's usage on one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"usage: {short_usage(self)}\n{self.prog}: error: {message}\n")


def short_usage(parser: argparse.ArgumentParser) -> str:
    """`stackcurate ingest --out OUT [options]`: the required arguments only, and where the rest are listed."""
    required, positionals, optional = [], [], False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            positionals.append(f"{action.metavar or 'COMMAND'} ...")
        elif not action.option_strings:
            name = str(action.metavar or action.dest)
            positionals.append(f"[{name}]" if action.nargs == "?" else name)
        elif action.required:
            required.append(f"{action.option_strings[-1]} {action.metavar or action.dest.upper()}")
        elif action.help != argparse.SUPPRESS:
            optional = True
    words = [parser.prog, *required, *(["[options]"] if optional else []), *positionals]
    return " ".join(words) + (f" ({parser.prog} --help lists the options)" if optional else "")


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return None


def check_flags(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Stop on an unknown command or flag with the (sub)command's usage and the closest name it has (argparse
    alone names neither, and shows the top-level usage for a subcommand's unknown flag)."""
    current = parser
    for token in argv:
        if token == "--":
            return
        commands = _commands(current)
        if not token.startswith("-"):
            if commands is None:
                continue
            if token not in commands:
                close = difflib.get_close_matches(token, list(commands), n=1)
                hint = f"did you mean {close[0]}?" if close else f"commands: {', '.join(commands)}"
                current.error(f"unknown command '{token}'; {hint}")
            current = commands[token]
            continue
        flag = token.split("=", 1)[0]
        if len(flag) < 2 or (not flag.startswith("--") and len(flag) > 2) or _is_number(token):
            continue  # `-`, combined short flags (-vh) and negative numbers: argparse's to judge
        known = [s for action in current._actions for s in action.option_strings]
        if flag not in known:
            names = {s.lstrip("-"): s for s in known if s.startswith("--")}  # `--` alone would make all alike
            close = difflib.get_close_matches(flag.lstrip("-"), list(names), n=1)
            hint = f"; did you mean {names[close[0]]}?" if close else f"; {current.prog} --help lists the options"
            current.error(f"unrecognized argument {flag}{hint}")


def late_positionals(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: list[str]) -> None:
    """Give the optional positionals of `args`'s command that argparse left empty the positionals it could not
    place: argparse fills a command's positionals from the first run of them, so `query OUT --format csv SQL`
    would leave SQL over. Anything else left over is an error, with the command's usage."""
    command = (_commands(parser) or {}).get(getattr(args, "command", None) or "", parser)
    empty = [
        a.dest for a in command._actions if not a.option_strings and a.nargs == "?" and getattr(args, a.dest) is None
    ]
    while extras and empty and not extras[0].startswith("-"):
        setattr(args, empty.pop(0), extras.pop(0))
    if extras:
        command.error(f"unrecognized arguments: {' '.join(extras)}")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def run_flags(parser: argparse.ArgumentParser) -> None:
    # -v after the command too (`stackcurate run p.yaml -v`); SUPPRESS leaves the top-level value when absent
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE)
    group = parser.add_argument_group("run options (do not change the final rows or shards)")
    group.add_argument(
        "--runner",
        choices=["auto", "ray", "local"],
        default=None,
        help="auto (default: this process where the work is too small for Ray to pay off, else an embedded local "
        "Ray), ray (embedded, or --ray-address) or local (this process)",
    )
    group.add_argument("--ray-address", default=None, help="address of an existing Ray cluster (or RAY_ADDRESS)")
    group.add_argument("--workers", type=int, default=None, help="parallel workers (default: all CPUs)")
    group.add_argument(
        "--ray-cpus", type=int, default=None, help="CPUs of the embedded Ray (default: this machine's); not --workers"
    )
    group.add_argument("--overwrite", action="store_true", default=None, help="replace existing output")
    group.add_argument("--no-progress", dest="progress", action="store_false", default=None, help="no progress bar")
    group.add_argument(
        "--progress", dest="progress", action="store_true", default=None,
        help="progress bars even where stderr is not a terminal (default: only on a terminal)",
    )  # fmt: skip
    group.add_argument("--dry-run", action="store_true", default=None, help="print config and plan, run nothing")
    group.add_argument(
        "--keep-intermediate",
        action="store_true",
        default=None,
        help="stages that run fused also write their kept rows (for debugging; the final output is the same)",
    )
    group.add_argument(
        "--removed-content",
        action="store_true",
        default=None,
        help="removed rows keep their text (default: content is null; doc_id, blob_id and path trace each row)",
    )


def run_options(args: argparse.Namespace, base: dict[str, Any] | None = None) -> Any:
    from stackcurate.pipeline import RunOptions, merge_run_options

    # every run option has its flag in run_flags (the same name)
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunOptions)}
    if overrides["progress"] is None and "progress" not in (base or {}):
        # Bars only on a terminal: in a log file their redraws run together into lines of several KB.
        overrides["progress"] = sys.stderr.isatty()
    return merge_run_options(base or {}, overrides)
