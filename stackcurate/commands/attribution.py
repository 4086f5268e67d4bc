"""`stackcurate attribute` and `serve`: which training file a text copies (stackcurate/attribution.py); the index
stage (stages/index.py) builds what they read."""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ATTRIBUTE = """\
The spans of a text that the run's shards hold, of at least --min-tokens tokens, longest first, each with the
files it comes from (repository, path, SWHID or URL, license) and how often the shards hold it.

examples:
  stackcurate attribute work/demo --file completion.txt
  echo 'def parse_args(argv):' | stackcurate attribute work/demo --file - --json
  stackcurate attribute work/demo --owner octocat --opt-out optout.txt   # am I in this set?
"""


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("attribute", help="the spans of a text copied from a run's training files",
                       description=ATTRIBUTE, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("index", help="a run folder whose index stage has finished (or its OUT/attribution)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text")
    source.add_argument("--file", help="a file holding the text (- for standard input)")
    source.add_argument("--owner", help="am I in this set: the repositories and files of a GitHub owner")
    source.add_argument("--search", help='the files that best match words or code (BM25; "quoted": a phrase)')
    p.add_argument("--opt-out", default=None, help="with --owner: write the opt-out lines that remove them here")
    p.add_argument("--min-tokens", type=int, default=None, help="shortest span (default: the index's)")
    p.add_argument("--min-copied", type=int, default=None,
                   help="tokens the text must copy of a file, all its spans together (default: the index's; 0: "
                        "every span)")  # fmt: skip
    p.add_argument(
        "--max-files",
        type=int,
        default=None,
        help="a span more files hold is common text: it counts for none (default: the index's)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (spans with their sources) for tools")
    p.set_defaults(handler=_cmd_attribute)

    p = sub.add_parser("serve", help="answer attribution queries over local HTTP (llm-vscode's /overlap API)",
                       description=SERVE, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("index", help="a run folder whose index stage has finished (or its OUT/attribution)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=8008, help="port to listen on")
    p.add_argument("--max-bytes", type=int, default=1_000_000, help="largest request body accepted")
    p.set_defaults(handler=_cmd_serve)


SERVE = """\
Answer attribution queries over local HTTP: POST /overlap with {"document": text} returns {"spans": [[start, end],
...]} (character offsets), the API of Hugging Face's llm-vscode "Show Code Attribution"; POST /attribute with
{"text": text} returns the spans with their sources; GET /search?q= ranks files by BM25; GET / is a page to
paste code into and see its copied spans. Listens on localhost unless --host says otherwise.

example:
  stackcurate serve work/demo --port 8008
  curl -s localhost:8008/overlap -d '{"document": "def main():"}'
"""


def _cmd_attribute(args: argparse.Namespace) -> None:
    from stackcurate.attribution import Index
    from stackcurate.core.errors import StackcurateError

    if args.owner is not None:
        _owner(Index(args.index), args.owner, args.opt_out)
        return
    if args.search is not None:
        hits = Index(args.index).search(args.search)
        if args.json:
            print(json.dumps({"hits": [{"score": score, **vars(source)} for score, source in hits]}, indent=1))
        for score, source in [] if args.json else hits:
            print(f"{score:7.2f}  {source.repo_name} {source.path} {source.swhid or source.origin or ''} "
                  f"[{source.license_type or 'license unknown'}]")  # fmt: skip
        if not hits and not args.json:
            print("no file matches")
        return
    if args.file is None:
        text = args.text
    elif args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(args.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise StackcurateError(f"cannot read {args.file} as UTF-8 text: {exc}") from None
    spans = Index(args.index).attribute(text, args.min_tokens, args.min_copied, args.max_files)
    if args.json:
        print(json.dumps({"spans": [s.to_dict() for s in spans]}, indent=1))
        return
    if not spans:
        print("no span of the text is in the training set")
        return
    for s in spans:
        where = s.sources[0]
        name = where.swhid or where.origin or ""
        print(f"chars {s.start}-{s.end} ({s.tokens} tokens, {s.occurrences} in the shards, {s.documents} files): "
              f"{where.repo_name} {where.path} {name} [{where.license_type or 'license unknown'}], "
              f"{s.copied} tokens of it copied in all")  # fmt: skip
        print("    " + s.text[:100].replace("\n", "\\n") + ("..." if len(s.text) > 100 else ""))


def _cmd_serve(args: argparse.Namespace) -> None:
    from stackcurate.attribution import Index
    from stackcurate.attribution_server import make_server

    server = make_server(Index(args.index), args.host, args.port, args.max_bytes)
    host, port = server.server_address[:2]
    print(f"serving {args.index} on http://{host}:{port} (POST /overlap, /attribute); Ctrl-C stops")
    try:
        server.serve_forever()
    finally:
        server.server_close()


def _owner(index: "Any", owner: str, opt_out: str | None) -> None:
    """The repositories and files of `owner` in the set, and the opt-out lines that remove them."""
    repos = index.owned(owner)
    if not repos:
        print(f"no repository of {owner} is in this set")
        return
    for repo, files in repos.items():
        print(f"{repo}: {len(files)} files")
        for f in files[:20]:
            print(f"    {f.path} {f.swhid or f.origin or ''}")
        if len(files) > 20:
            print(f"    ... and {len(files) - 20} more")
    lines = "".join(f"{repo}\n" for repo in repos)
    if opt_out:
        Path(opt_out).write_text(lines)
        print(f"opt-out lines for {len(repos)} repositories in {opt_out}: pass it to the license stage's --opt-out "
              "(and --gharchive-opt-out, --history-opt-out) in the next run")  # fmt: skip
