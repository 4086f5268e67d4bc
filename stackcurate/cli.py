"""Curate source code into training data: Software Heritage archives or local repositories, filtered,
deduplicated and PII-redacted, to tokenized Megatron shards.

examples:
  stackcurate sample work/sample                      # build the embedded default input
  stackcurate run pipelines/demo.yaml                 # every stage of a pipeline
  stackcurate run pipelines/demo.yaml --dry-run       # what a run would do: which stages are done, which run
  stackcurate ingest --repos ~/src/proj --out work/x  # one stage; --config takes that stage's YAML block
  stackcurate language --out work/x --languages filters/languages/starcoder2_smol_v1.txt
  stackcurate stats work/x                            # documents, bytes and the share kept, per stage
  stackcurate query work/x "select language, count(*) from pii group by 1"
  stackcurate purge work/x                            # drop the unredacted text once pii has finished
  stackcurate index --out work/x                      # which training file a generation copies:
  stackcurate attribute work/x --file gen.txt   #   its spans, with their files and licenses

Stages run on an embedded local Ray by default, or in this process where their work is too small for Ray to pay
off (--runner ray always uses it); --ray-address HOST:PORT (or RAY_ADDRESS) runs them on an existing cluster,
--runner local in this process. Each run saves its resolved config as _config.yaml in the
output folder (-v also prints it). Errors print as one line; STACKCURATE_DEBUG=1 shows the traceback.
"""

import os
import sys
from typing import TYPE_CHECKING

from stackcurate import __version__

if TYPE_CHECKING:
    from stackcurate.commands.parsing import Parser

DESCRIPTION, EPILOG = (__doc__ or "").split("\n\n", 1)
# The trainer's own CLI (torch, numpy and transformers: none of the pipeline's libraries); so the commands,
# which import those, are imported only for the other commands.
LIGHT = ("train", "generate", "export")


def build_parser() -> "Parser":
    from stackcurate.commands import attribution, evaluation, models, outputs, pipeline
    from stackcurate.commands.parsing import VERBOSE, Parser

    parser = Parser(prog="stackcurate", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pipeline.add_parsers(sub)
    outputs.add_parsers(sub)
    models.add_parsers(sub)
    attribution.add_parsers(sub)
    evaluation.add_parsers(sub)
    pipeline.add_sample_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The `stackcurate` console script."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in LIGHT:
        from stackcurate.train.cli import main as light

        return light(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if callable(getattr(sys.stdout, "reconfigure", None)):  # each line as it is printed, into a pipe or file too
        sys.stdout.reconfigure(line_buffering=True)  # pyright: ignore[reportAttributeAccessIssue]
    from stackcurate.commands.parsing import check_flags, late_positionals
    from stackcurate.core import log
    from stackcurate.core.errors import exit_code

    parser = build_parser()
    check_flags(parser, argv)
    args, extras = parser.parse_known_args(argv)
    late_positionals(parser, args, extras)

    log.setup(args.verbose)
    return exit_code(lambda: args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
