"""A training set of real files, labelled where independent labellers agree (StarPII's recipe, with what runs here).

StarPII pseudo-labelled 18,000 real files with two large NER models and kept the spans they agreed on. Here the
labellers are the ones that run offline, each blind to the others:

- **patterns**: the stage's recognizers and post-processing (`stackcurate.stages.pii`, no model), with the rule
  that spares each span they leave (example addresses, forge URLs, versions, hashes...);
- **detect-secrets** (Yelp's scanner): secret keywords, known key formats, high-entropy strings;
- **presidio**'s own email and IP recognizers (not the project's);
- **the shipped model** (`minilm-l3`), on every candidate line, gated or not;
- **a gazetteer of people's names**: first and last names of 19 locales from Faker, `First [M.] Last`.

A line is kept for training when every span on it is agreed on (the rules, per type):

| type | labelled when | line dropped when |
|---|---|---|
| EMAIL, IP_ADDRESS | patterns and presidio | one of them alone |
| KEY, PASSWORD | patterns and detect-secrets (same value; entropy findings above its limits) | patterns alone |
| NAME | patterns and (model or gazetteer); or model and gazetteer | one labeller alone |
| USERNAME | patterns and model | one of them alone |

A span the patterns spare by a stated rule is a labelled negative (outside: O), whatever the others say. Lines
where detect-secrets alone finds a keyword secret are dropped; its high-entropy findings below its limits are
ignored. Lines with no span of any labeller are negatives: all of the candidate lines (the model's training
gate, `line_ranges(text, "context")`, plus every line of people files and changelogs) and a share
(`other_lines`) of the rest.

Keys and passwords are rare in real files: each agreed one is planted again `plants` times in its own line, the
value replaced by a seeded random one of the same shape (each character's class kept: lower, upper, digit,
other), so the model sees the file's own idiom with other values.

Files come from folders given on the command line (the model card lists the ones used: Debian packages of
ecosystems beside Python, this machine's `/usr/share/doc` changelogs and people files, its installed Python
packages), minus every package of the two evaluation sets (`--exclude`), at most `per_kind` files of a kind
(extension, or people file / changelog) and the first `max_bytes` of each (of gzip'd ones, as Debian ships its
packages' changelogs, uncompressed).

    python -m pii_model.realset --out work/pii/real.parquet --root DIR [--root DIR...] [--files 25000]
"""

import argparse
import bisect
import functools
import gzip
import json
import os
import random
import re
import time
from collections import Counter
from collections.abc import Iterator
from multiprocessing import Pool
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from stackcurate.core.schema import extension_of
from stackcurate.stages.pii import Detector, PiiConfig, is_config, is_history_file, is_people_file
from stackcurate.stages.pii.entities import EMAIL, IP_ADDRESS, KEY, NAME, PASSWORD, USERNAME
from stackcurate.stages.pii.model import line_ranges
from stackcurate.stages.pii.recognizers import _NETWORK_WORDS

ROOT = Path(__file__).resolve().parent
EXTENSIONS = frozenset(
    "py go php pm pl pod t rb erb rake gemspec r rmd rd java kt kts scala groovy gradle js ts c h cc cpp sh bash "
    "zsh sql lua rs cs swift md rst txt adoc html htm xml pom properties yml yaml json toml ini cfg conf env "
    "j2 tmpl in service".split()
)
COLUMNS = pa.schema(
    [
        ("path", pa.string()),
        ("kind", pa.string()),
        ("text", pa.string()),
        ("spans", pa.list_(pa.struct([("entity", pa.string()), ("start", pa.int32()), ("end", pa.int32())]))),
        ("ranges", pa.list_(pa.list_(pa.int32(), 2))),  # the lines trained on
        ("planted", pa.bool_()),
    ]
)
LOCALES = (
    "en_US", "en_GB", "en_IN", "ga_IE", "de_DE", "fr_FR", "es_ES", "it_IT", "pt_BR", "pl_PL", "nl_NL", "sv_SE",
    "cs_CZ", "fi_FI", "da_DK", "no_NO", "hu_HU", "ro_RO", "tr_TR",
)  # fmt: skip
_WORD = r"[^\W\d_][^\W\d_'’\-]*(?:[-'’][^\W\d_]+)?"
_NAME_WORD = re.compile(rf"(?<![\w.])[A-Z]\.(?=[^\S\n])|{_WORD}")


def kind_of(path: str) -> str:
    name = path.rsplit("/", 1)[-1].removesuffix(".gz")  # Debian compresses its packages' docs
    if is_people_file(path):
        return "people"
    if is_history_file(name):
        return "history"
    return extension_of(name).lower() or name


def package_names(sets: list[Path]) -> frozenset[str]:
    """Every package an evaluation set's windows come from, with the spellings its folders go by
    (PyPI's `python-jose` as `jose`, `flask-login` as `flask_login`; Debian's as they are)."""
    names = set()
    for folder in sets:
        for part in folder.glob("*.jsonl"):
            for line in part.open():
                origin = json.loads(line)["origin"]
                package = origin["package"].lower()
                names.add(package)
                if origin.get("registry") != "debian":  # Debian's own names are folder names (`/usr/share/doc`)
                    names |= {package.replace("-", "_"), package.removeprefix("python-"), package.split("-")[0]}
                    names |= {package.removeprefix("py"), package.removesuffix(".py"), package.removesuffix("-sdk")}
    # Faker's tables are the gazetteer's: every line of them would agree with it.
    return frozenset(n for n in names if len(n) > 1) | {"faker"}


def collect(roots: list[Path], exclude: frozenset[str], files: int, per_kind: int, seed: int) -> list[Path]:
    """Up to `files` paths under `roots` (sorted, then drawn with `seed`), at most `per_kind` of a kind."""
    found = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d.lower() not in exclude and not d.startswith("."))
            for name in filenames:
                path = Path(dirpath, name)
                if name.split(".")[0].lower() in exclude:  # `/usr/share/doc` copies: `wget.changelog`
                    continue
                plain = name.removesuffix(".gz")
                if kind_of(str(path)) in EXTENSIONS or is_people_file(plain) or is_history_file(plain):
                    found.append(path)
    random.Random(seed).shuffle(found)
    taken, counts = [], Counter()
    for path in found:
        kind = kind_of(str(path))
        if counts[kind] < per_kind and len(taken) < files:
            counts[kind] += 1
            taken.append(path)
    return taken


def read(path: Path, max_bytes: int) -> str | None:
    try:
        if path.suffix == ".gz":
            with gzip.open(path) as f:
                data = f.read(max_bytes)
        else:
            data = path.read_bytes()[:max_bytes]
        text = data.decode("utf-8", errors="strict" if len(data) < max_bytes else "ignore")
    except (OSError, EOFError, UnicodeDecodeError):
        return None
    if "\0" in text or text.count("\n") < 3:
        return None
    return text[: text.rfind("\n") + 1] if len(data) == max_bytes else text


@functools.cache
def gazetteer() -> tuple[frozenset[str], frozenset[str]]:
    from faker import Faker

    first, last = set(), set()
    for locale in LOCALES:
        person = Faker(locale).provider("faker.providers.person")
        first |= set(getattr(person, "first_names", ()))
        last |= set(getattr(person, "last_names", ()))
    return frozenset(first), frozenset(last)


def gazetteer_names(text: str) -> list[tuple[int, int]]:
    """`First Last` (a middle initial allowed): a known first name, then a known last name, both capitalised,
    one space or tab apart."""
    first, last = gazetteer()
    words = list(_NAME_WORD.finditer(text))
    out = []
    for i, given in enumerate(words[:-1]):
        if given.group() not in first:
            continue
        j = i + 2 if words[i + 1].group().endswith(".") and i + 2 < len(words) else i + 1
        pieces = words[i : j + 1]
        gaps = [text[a.end() : b.start()] for a, b in zip(pieces, pieces[1:], strict=False)]
        if all(gap and not gap.strip(" \t") for gap in gaps) and words[j].group() in last:
            out.append((given.start(), words[j].end()))
    return out


@functools.cache
def _presidio() -> tuple:
    from presidio_analyzer.predefined_recognizers import EmailRecognizer, IpRecognizer

    return EmailRecognizer(), IpRecognizer()


def presidio_spans(text: str) -> list[tuple[str, int, int]]:
    email, ip = _presidio()
    found = [(EMAIL, r.start, r.end) for r in email.analyze(text, ["EMAIL_ADDRESS"])] if "@" in text else []
    return found + [(IP_ADDRESS, r.start, r.end) for r in ip.analyze(text, ["IP_ADDRESS"])]


@functools.cache
def _entropy_plugins() -> dict:
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString

    return {plugin.secret_type: plugin for plugin in (Base64HighEntropyString(), HexHighEntropyString())}


def secrets_of(line: str) -> tuple[set[str], bool]:
    """detect-secrets on a line: (the values it finds, whether a keyword or key-format finding is among them).
    `scan_line` reports every string of the line as high-entropy: those below the plugins' limits are dropped."""
    from detect_secrets.core.scan import scan_line

    values, keyword = set(), False
    for secret in scan_line(line):
        value = secret.secret_value or ""
        plugin = _entropy_plugins().get(secret.type)
        if plugin is None:
            keyword = True
        elif plugin.calculate_shannon_entropy(value) < plugin.entropy_limit:
            continue
        values.add(value)
    return values, keyword


def _lines(text: str) -> Iterator[tuple[int, int]]:
    at = 0
    for line in text.splitlines(keepends=True):
        yield at, at + len(line.rstrip("\r\n"))
        at += len(line)


_DETECTOR: Detector | None = None
_SECRET_WORDS = ("pass", "pwd", "secret", "token", "key", "auth", "credential")


def _first_pass(item: tuple[str, str]) -> dict:
    """The labellers that need no model, on one file: patterns (kept and spared), presidio, detect-secrets,
    the gazetteer; keyed by line start."""
    global _DETECTOR
    if _DETECTOR is None:
        _DETECTOR = Detector(PiiConfig(model="none"))
    from detect_secrets.settings import default_settings

    path, text = item
    kind = kind_of(path)
    kept, spared = _DETECTOR.pattern_spans(text, is_config(path, None, None), kind == "people")
    lines: dict[int, dict] = {start: {"end": end} for start, end in _lines(text) if text[start:end].strip()}
    starts = sorted(lines)

    def entry_of(at: int) -> dict:
        return lines[starts[bisect.bisect_right(starts, at) - 1]]

    for entity, s, t in presidio_spans(text):
        entry_of(s).setdefault("presidio", []).append((entity, s, t))
    for s, t in gazetteer_names(text):
        entry_of(s).setdefault("gazetteer", []).append((NAME, s, t))
    with default_settings():
        for start, entry in lines.items():
            line = text[start : entry["end"]]
            low = line.lower()
            if any(word in low for word in _SECRET_WORDS) or any(
                s.entity in (KEY, PASSWORD) and start <= s.start < entry["end"] for s in kept
            ):
                entry["secrets"] = secrets_of(line)
    return {
        "path": path,
        "kind": kind,
        "text": text,
        "lines": lines,
        "kept": [(s.entity, s.start, s.end) for s in kept],
        "spared": [(s.entity, s.start, s.end) for s, _ in spared],
    }


def _overlaps(a: tuple[str, int, int], spans: list[tuple[str, int, int]], entity: str | None = None) -> bool:
    return any(a[1] < e and s < a[2] and (entity or a[0]) == t for t, s, e in spans)


def agree(file: dict, model: list[tuple[str, int, int]]) -> tuple[list[tuple[str, int, int]], set[int], Counter]:
    """(agreed spans, starts of the lines dropped for disagreement, what happened per type) for one file."""
    labels, dropped, outcome = [], set(), Counter()
    spared = file["spared"]
    by_line: dict[int, list] = {}
    starts = sorted(file["lines"])

    def line_of(at: int) -> int | None:
        i = bisect.bisect_right(starts, at) - 1
        return starts[i] if i >= 0 and at <= file["lines"][starts[i]]["end"] else None

    for span in file["kept"]:
        by_line.setdefault(line_of(span[1]), []).append(("patterns", span))
    for span in model:
        by_line.setdefault(line_of(span[1]), []).append(("model", span))
    for start, entry in file["lines"].items():
        for who in ("presidio", "gazetteer"):
            for span in entry.get(who, ()):
                by_line.setdefault(start, []).append((who, span))
        if entry.get("secrets", (set(), False))[1]:
            by_line.setdefault(start, [])  # detect-secrets' keyword findings are settled below
    for start, found in by_line.items():
        if start is None:
            continue
        entry = file["lines"][start]
        line_text = file["text"][start : entry["end"]]
        values, keyword = entry.get("secrets", (set(), False))
        mine: list[tuple[str, int, int]] = []
        ok = True
        patterns = [s for who, s in found if who == "patterns"]
        others = {who: [s for w, s in found if w == who] for who in ("model", "presidio", "gazetteer")}
        for span in patterns:
            entity = span[0]
            if entity == EMAIL:
                agreed = _overlaps(span, others["presidio"])
            elif entity == IP_ADDRESS:  # both take version quads for addresses: a network word must agree too
                agreed = _overlaps(span, others["presidio"]) and _NETWORK_WORDS.search(line_text) is not None
            elif entity in (KEY, PASSWORD):
                value = file["text"][span[1] : span[2]]
                agreed = any(value == v or (len(v) >= 8 and v in value) for v in values)
            elif entity == NAME:
                agreed = _overlaps(span, others["model"]) or _overlaps(span, others["gazetteer"])
            else:
                agreed = _overlaps(span, others["model"])
            outcome[f"{entity} {'agreed' if agreed else 'patterns alone'}"] += 1
            if agreed:
                mine.append(span)
            else:
                ok = False
        for who, spans in others.items():
            for span in spans:
                if _overlaps(span, patterns) or _overlaps(span, spared, span[0]):
                    continue  # settled above, or spared by a stated rule
                if who == "model" and span[0] == NAME and _overlaps(span, others["gazetteer"]):
                    outcome["NAME model and gazetteer"] += 1
                    mine.append(span)
                elif who == "gazetteer" and _overlaps(span, others["model"], NAME):
                    continue  # counted from the model's side
                elif who == "model" and span[0] not in (NAME, USERNAME):
                    continue  # the stage takes only names and handles from the model
                else:
                    outcome[f"{span[0]} {who} alone"] += 1
                    ok = False
        if keyword and not any(s[0] in (KEY, PASSWORD) for s in mine):
            outcome["secret detect-secrets alone"] += 1
            ok = False
        if not ok or not line_text.strip():
            dropped.add(start)
        else:
            labels += mine
    return sorted(set(labels), key=lambda s: (s[1], s[2])), dropped, outcome


def plant(text: str, span: tuple[str, int, int], rng: random.Random) -> tuple[str, tuple[str, int, int]]:
    """The line of `span` with its value replaced by a random one of the same shape."""
    start = text.rfind("\n", 0, span[1]) + 1
    end = text.find("\n", span[2])
    end = len(text) if end < 0 else end
    value = text[span[1] : span[2]]
    pools = {"lower": "abcdefghijklmnopqrstuvwxyz", "upper": "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "digit": "0123456789"}
    new = "".join(
        rng.choice(pools["lower"] if c.islower() else pools["upper"] if c.isupper() else pools["digit"])
        if c.isascii() and c.isalnum()
        else c
        for c in value
    )
    line = text[start : span[1]] + new + text[span[2] : end] + "\n"
    return line, (span[0], span[1] - start, span[1] - start + len(new))


def build(paths: list[Path], model_folder: Path, *, max_bytes: int, other_lines: float, plants: int, seed: int,
          progress: bool = True) -> tuple[pa.Table, dict]:  # fmt: skip
    from stackcurate.stages.pii.model import EncoderModel

    os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")
    started = time.perf_counter()
    items = [(str(p), t) for p in paths if (t := read(p, max_bytes)) is not None]
    with Pool(2) as pool:
        first = list(tqdm(pool.imap(_first_pass, items, chunksize=16), total=len(items), desc="label",
                          disable=not progress))  # fmt: skip
    model = EncoderModel(model_folder, entities=(NAME, USERNAME), lines="all")
    rng = random.Random(seed)
    rows, outcome, kinds, planted = [], Counter(), Counter(), 0
    for file in tqdm(first, desc="model", disable=not progress):
        text = file["text"]
        every = file["kind"] in ("people", "history")
        # The model reads the gated lines, every line of people files and changelogs, and the lines where
        # another labeller found a name or a handle; training also reads the context lines with none.
        asked = set(line_ranges(text, "gated"))
        asked |= {(s, e["end"]) for s, e in file["lines"].items() if every or "gazetteer" in e}
        asked |= {_line_at(text, s0) for entity, s0, _ in file["kept"] if entity in (NAME, USERNAME)}
        pieces = sorted(asked)
        candidates = asked | set(line_ranges(text, "context"))
        candidates |= {(s, e["end"]) for s, e in file["lines"].items() if len(e) > 1}
        candidates |= {_line_at(text, s0) for _, s0, _ in file["kept"]}
        found = model.spans([text[s:e] for s, e in pieces])
        spans = [(x.entity, s + x.start, s + x.end) for (s, _), got in zip(pieces, found, strict=True) for x in got]
        labels, dropped, counts = agree(file, spans)
        outcome += counts
        chosen = {r for r in candidates if r[0] not in dropped}
        chosen |= {
            (s, e["end"]) for s, e in file["lines"].items()
            if s not in dropped and (s, e["end"]) not in candidates and rng.random() < other_lines
        }  # fmt: skip
        chosen = {r for r in chosen if text[r[0] : r[1]].strip()}
        if not chosen:
            continue
        kinds[file["kind"]] += 1
        rows.append({"path": file["path"], "kind": file["kind"], "text": text,
                     "spans": [{"entity": e, "start": s, "end": t} for e, s, t in labels],
                     "ranges": sorted(chosen), "planted": False})  # fmt: skip
        for label in labels:
            if label[0] in (KEY, PASSWORD):
                for _ in range(plants):
                    line, span = plant(text, label, rng)
                    planted += 1
                    rows.append({"path": file["path"], "kind": file["kind"], "text": line,
                                 "spans": [{"entity": span[0], "start": span[1], "end": span[2]}],
                                 "ranges": [(0, len(line) - 1)], "planted": True})  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=COLUMNS)
    types = Counter(s["entity"] for row in rows if not row["planted"] for s in row["spans"])
    report = {
        "files_read": len(items),
        "files_kept": sum(not r["planted"] for r in rows),
        "megabytes": round(sum(len(t.encode()) for _, t in items) / 1e6, 2),
        "lines_trained_on": sum(len(r["ranges"]) for r in rows if not r["planted"]),
        "labels": dict(sorted(types.items())),
        "planted_lines": planted,
        "kinds": dict(kinds.most_common()),
        "agreement": dict(sorted(outcome.items())),
        "seconds": round(time.perf_counter() - started, 1),
    }
    return table, report


def _line_at(text: str, at: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return start, len(text) if end < 0 else end


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the Parquet file to write (its report beside it, .json)")
    parser.add_argument("--root", action="append", required=True, type=Path, help="a folder of real files")
    parser.add_argument("--exclude", action="append", type=Path, default=[ROOT / "real_files", ROOT / "real_files2"],
                        help="an evaluation set whose packages are left out (both sets by default)")  # fmt: skip
    parser.add_argument("--files", type=int, default=25000, help="files drawn at most")
    parser.add_argument("--per-kind", type=int, default=2500, help="files of one kind at most")
    parser.add_argument("--max-bytes", type=int, default=16384, help="bytes read from the start of each file")
    parser.add_argument("--other-lines", type=float, default=0.05, help="share of the other lines trained on")
    parser.add_argument("--plants", type=int, default=3, help="new values planted for each agreed key/password")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model", type=Path, help="the model labelling (default: the shipped one)")
    args = parser.parse_args(argv)
    from stackcurate.stages.pii import default_model_folder

    paths = collect(args.root, package_names(args.exclude), args.files, args.per_kind, args.seed)
    table, report = build(paths, args.model or default_model_folder(), max_bytes=args.max_bytes,
                          other_lines=args.other_lines, plants=args.plants, seed=args.seed)  # fmt: skip
    report["roots"] = [str(r) for r in args.root]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
