"""Per-type precision and recall of the pii stage on real files, labelled by reading them.

The set (`pii_model/real_files/`, its README says how it was made and what is labelled) holds windows of
released packages that neither the generator nor the rules' development used: real names, emails and handles
where they are (copyright headers, manifests, AUTHORS files, changelogs), and keys, passwords and public IPs
planted in each file's own idiom. The stage runs on it as a pipeline runs it (`PiiStage` on a table of
`path`/`content` rows: patterns, escapes, repeats and the post-processing rules), once per set of detectors.

- A label is **found** when spans of its type, redacted or recorded, cover all of it.
- A span is **right** when it overlaps a label of its type; it counts for nothing when it lies on a label the
  scheme ignores (`NAME_EXAMPLE`, `USERNAME_EXAMPLE`, `EMAIL_LICENSE`), and it is a **false positive** anywhere
  else (on an example email, an organisation, a private IP, a version, a hash, code...).
- USERNAME is scored for detection: the stage records handles and redacts them only when asked (`redact`).

- A **decoy** is a label the scheme ignores (`*_EXAMPLE`: example addresses, placeholders, demo logins): the
  `decoys` row counts how many of them a redacted span touches, which should be at most 2%.
- Labels of the second set (`real_files2/`) carry the idiom `family` they are written in (`maven_developers`,
  `cli_credentials`, ...): `families()` scores each family apart; the first set's, each kind of window.

    python -m pii_model.real_eval [--set real_files2] [--detectors patterns both] [--files 'part4.jsonl']
                                  [--families] [--json FILE]
"""

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa

from stackcurate.stages.pii import PiiConfig, PiiStage, default_model_folder
from stackcurate.stages.pii.entities import EMAIL, ENTITIES, NAME, USERNAME

ROOT = Path(__file__).resolve().parent
FILES = ROOT / "real_files"
DETECTORS = {"patterns": {"model": "none"}, "both": {}}  # name -> PiiConfig settings; `both` is the default
DECOYS = "decoys"
IGNORED = {
    "NAME_EXAMPLE": NAME,
    "USERNAME_EXAMPLE": USERNAME,
    "EMAIL_LICENSE": EMAIL,
    "EMAIL_NOREPLY": EMAIL,
}  # label -> its type
# StarPII's published test-set figures (REFERENCE.md §e): type -> (recall, precision).
STARPII = {
    "EMAIL": (0.99, 0.97), "IP_ADDRESS": (0.85, 0.97), "KEY": (0.91, 0.78), "PASSWORD": (0.91, 0.86),
    "NAME": (0.89, 0.94), "USERNAME": (0.74, 0.86),
}  # fmt: skip
COPYRIGHT = "NAME, copyright lines"
# Addresses the stage spares by design, reported in rows of their own (how many it found should be 0): on a
# copyright or license line (`EMAIL_LICENSE` in BigCode's scheme; StarCoder's data kept them), and forges'
# no-reply addresses (`12345+jroe@users.noreply.github.com`: issue 15 asks that they are never redacted).
POLICY = ("EMAIL_LICENSE", "EMAIL_NOREPLY")
_NOREPLY = re.compile(r"(?i)(?:^|\.)no-?reply\.")


def load(folder: Path = FILES, pattern: str = "part*.jsonl") -> list[dict]:
    """Every window of every file of `folder` matching `pattern`, labels checked against their text."""
    rows = []
    for path in sorted(folder.glob(pattern)):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            row = json.loads(line)
            for label in row["labels"]:
                if not 0 <= label["start"] < label["end"] <= len(row["text"]):
                    raise ValueError(f"{path.name}:{number}: label {label} is outside the window's text")
            rows.append(row)
    return rows


def detect(rows: list[dict], settings: dict, batch: int = 64) -> list[list[dict]]:
    """The stage's spans (redacted and detected-only) for each window."""
    stage = PiiStage(PiiConfig(**settings))
    spans: list[list[dict]] = []
    for at in range(0, len(rows), batch):
        part = rows[at : at + batch]
        table = pa.table(
            {"path": [r["origin"]["path"] for r in part], "content": [r["text"] for r in part]}
        )  # fmt: skip
        out = stage(table).kept
        spans += [[s for s in row if s["column"] == "content"] for row in out.column("pii_spans").to_pylist()]
    return spans


def score(rows: list[dict], spans: list[list[dict]]) -> dict[str, dict]:
    """{row name: {labels, found, spans, false_positives, recall, precision}}, per type and for copyright names."""
    labels, found, right, wrong = Counter(), Counter(), Counter(), Counter()
    for row, predicted in zip(rows, spans, strict=True):
        by_type: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for s in predicted:
            by_type[s["entity"]].append((s["start"], s["end"]))
        for label in row["labels"]:
            entity = _policy(row["text"], label)
            if entity in POLICY:
                labels[entity] += 1
                found[entity] += _covered(by_type[EMAIL], label["start"], label["end"])
                continue
            if entity not in ENTITIES:
                continue
            names = [entity] + ([COPYRIGHT] if entity == NAME and label.get("place") == "copyright" else [])
            start = label["start"] + (entity == USERNAME and row["text"][label["start"]] == "@")
            hit = _covered(
                by_type[entity], start, label["end"]
            )  # `@jroe` is found as `jroe`, as BigCode's rules strip it
            for name in names:
                labels[name] += 1
                found[name] += hit
        for s in predicted:
            on = [
                _policy(row["text"], lab)
                for lab in row["labels"]
                if lab["start"] < s["end"] and s["start"] < lab["end"]
            ]
            if s["entity"] in on:
                right[s["entity"]] += 1
            elif not any(IGNORED.get(entity) == s["entity"] for entity in on):
                wrong[s["entity"]] += 1
    table = {}
    decoys = [
        (lab, predicted)
        for row, predicted in zip(rows, spans, strict=True)
        for lab in row["labels"]
        if lab["entity"].endswith("_EXAMPLE") or lab["entity"] in IGNORED and lab["entity"] not in POLICY
    ]
    touched = sum(
        any(s["start"] < lab["end"] and lab["start"] < s["end"] and s.get("replacement", "") is not None for s in p)
        for lab, p in decoys
    )  # redacted: a USERNAME the stage only records (its default) leaves the text as it is
    at = ENTITIES.index(NAME) + 1
    for name in [*ENTITIES[:at], COPYRIGHT, *ENTITIES[at:], *POLICY]:
        n_spans = right[name] + wrong[name]
        table[name] = {
            "labels": labels[name],
            "found": found[name],
            "recall": round(found[name] / labels[name], 3) if labels[name] else None,
            "spans": n_spans if name in ENTITIES else None,
            "false_positives": wrong[name] if name in ENTITIES else None,
            "precision": round(right[name] / n_spans, 3) if n_spans and name in ENTITIES else None,
        }
    table[DECOYS] = {
        "labels": len(decoys), "found": touched, "recall": round(touched / len(decoys), 3) if decoys else None,
        "spans": None, "false_positives": None, "precision": None,
    }  # fmt: skip
    return table


def families(rows: list[dict], spans: list[list[dict]]) -> dict[str, dict]:
    """{family: {type: {labels, found, recall}, "false_positives": n}} for the labels that carry a `family`: how
    well each idiom is found, and how many wrong spans lie in the windows of each family a window lists. The first
    set's labels carry no family: its windows' kinds (`header`, `docs`, `code`, `manifest`, ...) stand for them."""
    out: dict[str, dict] = defaultdict(lambda: {"false_positives": 0})
    for row, predicted in zip(rows, spans, strict=True):
        by_family: dict[str, list[dict]] = defaultdict(list)
        for label in row["labels"]:
            family = label.get("family") or row.get("kind")
            if family:
                by_family[family].append(label)
        for family, labels in by_family.items():
            table = score([{**row, "labels": labels}], [predicted])
            for entity, cells in table.items():
                if entity in ENTITIES and cells["labels"] or entity == DECOYS and cells["labels"]:
                    mine = out[family].setdefault(entity, {"labels": 0, "found": 0})
                    mine["labels"] += cells["labels"]
                    mine["found"] += cells["found"]
        wrong = score([row], [predicted])
        for family in row.get("families") or ([row["kind"]] if row.get("kind") else []):
            out[family]["false_positives"] += sum(wrong[e]["false_positives"] or 0 for e in ENTITIES)
    for cells in out.values():
        for entity, mine in cells.items():
            if entity != "false_positives":
                mine["recall"] = round(mine["found"] / mine["labels"], 3)
    return dict(sorted(out.items()))


def families_markdown(table: dict[str, dict]) -> str:
    lines = ["| family | type | labels | found | recall |", "|---|---|---|---|---|"]
    for family, cells in table.items():
        for entity, mine in cells.items():
            if entity != "false_positives":
                lines.append(f"| {family} | {entity} | {mine['labels']} | {mine['found']} | {mine['recall']:.3f} |")
        if cells["false_positives"]:
            lines.append(f"| {family} | false positives in its windows | | {cells['false_positives']} | |")
    return "\n".join(lines)


def _policy(text: str, label: dict) -> str:
    """A label's entity, or the policy row it counts in: the addresses the stage leaves by design."""
    if label["entity"] == EMAIL and _NOREPLY.search(text[label["start"] : label["end"]].rpartition("@")[2]):
        return "EMAIL_NOREPLY"
    return label["entity"]


def _covered(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether the union of `spans` covers [start, end)."""
    at = start
    for a, b in sorted(spans):
        if a <= at < b:
            at = b
        if at >= end:
            return True
    return at >= end


def compare(rows: list[dict], model: str, names: list[str] | None = None) -> dict[str, dict]:
    return {name: score(rows, detect(rows, {"model": model, **DETECTORS[name]})) for name in names or DETECTORS}


def markdown(table: dict[str, dict]) -> str:
    lines = [
        "| detectors | type | labels | recall | StarPII recall | spans | false positives | precision "
        "| StarPII precision |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for detectors, rows in table.items():
        for name, s in rows.items():
            recall, precision = STARPII.get(name, ("", ""))
            cells = [detectors, name, s["labels"], _cell(s["recall"]), recall, _cell(s["spans"]),
                     _cell(s["false_positives"]), _cell(s["precision"]), precision]  # fmt: skip
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def _cell(value: float | int | None) -> str:
    return "" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def summary(rows: list[dict]) -> dict:
    """What the set holds: windows per kind and origin, labels per type (planted or not), NAME per place."""
    labels = Counter((lab["entity"], bool(lab.get("planted"))) for r in rows for lab in r["labels"])
    return {
        "windows": len(rows),
        "characters": sum(len(r["text"]) for r in rows),
        "packages": sorted(
            {f"{r['origin']['registry']}:{r['origin']['package']}=={r['origin']['version']}" for r in rows}
        ),
        "kinds": dict(Counter(r["kind"] for r in rows).most_common()),
        "labels": {f"{e}{' (planted)' if p else ''}": n for (e, p), n in sorted(labels.items())},
        "name_places": dict(Counter(lab.get("place") for r in rows for lab in r["labels"] if lab["entity"] == NAME)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", default="auto", help="model folder (default: the model shipped with stackcurate)")
    parser.add_argument("--detectors", nargs="+", choices=list(DETECTORS), help="default: all")
    parser.add_argument("--set", default="real_files", choices=["real_files", "real_files2"], help="which set")
    parser.add_argument("--files", default="part*.jsonl", help="which files of the set's folder (a glob)")
    parser.add_argument("--families", action="store_true", help="also score each idiom family (default detectors)")
    parser.add_argument("--json", help="also write the table and the set's summary as JSON here")
    args = parser.parse_args(argv)
    model = str(default_model_folder()) if args.model == "auto" else args.model
    folder = ROOT / args.set
    rows = load(folder, args.files)
    if not rows:
        raise SystemExit(f"real_eval: no windows in {folder}/{args.files}")
    table = compare(rows, model, args.detectors)
    print(markdown(table))
    report = {"set": summary(rows), "model_folder": model, "detectors": table}
    if args.families:
        report["families"] = families(rows, detect(rows, {"model": model}))
        print()
        print(families_markdown(report["families"]))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
