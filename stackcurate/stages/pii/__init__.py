"""PII redaction: presidio with code-aware pattern recognizers and an encoder model, StarCoder's post-processing.

Detection is a presidio `AnalyzerEngine` with no spaCy model (`NoOpNlpEngine`: nothing to download) holding
the recognizers of `recognizers.py`: emails, IPv4/IPv6 (ports excluded, version numbers not taken), keys
and tokens (cloud, VCS, chat and payment tokens, JWTs, private-key blocks, random-looking values assigned to
key-like names, signing keys), passwords (assignments, connection strings, hashing and login arguments, unquoted
values in config files and `NAME=value`), names where code credits people and handles; and the encoder model
of `model.py` (shipped with the package, `shipped.py`; made by `stackcurate pii-model train`) for the names and
usernames in prose, on the lines with a person's context, and keys on the lines with a key's word. The patterns
also read each text's lines with escapes unescaped (`escapes.py`), so they see the code inside JSON strings (a raw
notebook), string literals and `\\"` quotes, and names written with entities (POD's `E<ntilde>`, HTML's
`&eacute;`). Then `rules.py` spares what StarCoder did not redact (short
spans, private IPs and DNS servers, example, license, no-reply and list emails and SSH protocol names, keys
that read like words, one-word, lowercase and made-up names, organisations, placeholders, and usernames inside
a forge URL), a value found in one text of a file is also found wherever
else it occurs in the file's texts, and `redact.py` replaces the spans of the types in `redact` with
`<EMAIL>`, `<KEY>`, `<PASSWORD>`, `<NAME>`, `<USERNAME>`, and IPs with a fixed private pool.

Detected versus redacted: `entities` (default all six) are detected and recorded in `pii_spans`; of those,
the types in `redact` are replaced in the text. The default `redact` is what StarCoder and StarCoder2
published: every type but USERNAME (BD `pii_redaction/utils.py` does not redact usernames), so a handle is
recorded, and can be queried, but stays in the text unless `redact` lists USERNAME. Even then a forge URL
(`github.com/<owner>/<repo>`, `<owner>.github.io`, `git@gitlab.com:owner/repo.git`) is never rewritten.

Input columns: every column of `schema.TEXT_COLUMNS` present (`content`, and filter's `notebook_script` and
`notebook_cells`: every string in them), `path`, `extension`, `language` (config files get the
unquoted-value rules on `content`).
Output columns: the text columns with the `redact` types replaced, types unchanged; `pii_spans`, one struct
per detected span: `column` (which text: `content`, `notebook_script`, `notebook_cells[2].source`),
`entity`, `start` and `end` (character offsets into that original text), `detector` (`pattern:<rule>`,
`model:<name>`, or `same_value` for another occurrence of a found value), `score`, and `replacement` (the
text that replaced the span, or null for a detected-only type: the span is still in the text). The value
itself is never stored, logged or counted. No row is removed. Stats, per language and entity / sparing rule,
over every text column: `spans_redacted`, `spans_detected_only` (recorded, not replaced) and `spans_spared`.

Example:
    stackcurate pii --out work/run --entities EMAIL KEY PASSWORD IP_ADDRESS    # --model none: patterns only
    stackcurate pii --out work/run --redact EMAIL IP_ADDRESS KEY PASSWORD NAME USERNAME    # handles too
"""

import dataclasses
import functools
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from stackcurate.core import io
from stackcurate.core.config import option
from stackcurate.core.contract import StageContext, StageOutput
from stackcurate.core.errors import StackcurateError
from stackcurate.core.records import RecordStage
from stackcurate.core.schema import TEXT_COLUMNS, extension_of, put_column
from stackcurate.stages.pii import escapes, redact, rules
from stackcurate.stages.pii.entities import DETECTOR, EMAIL, ENTITIES, IP_ADDRESS, KEY, NAME, PASSWORD
from stackcurate.stages.pii.model import MODEL_ENTITIES, EncoderModel, cache_dir
from stackcurate.stages.pii.shipped import DEFAULT_MODEL

if TYPE_CHECKING:
    from presidio_analyzer import AnalyzerEngine

log = logging.getLogger("stackcurate.pii")

SPAN_TYPE = pa.struct(
    [
        pa.field("column", pa.string()),  # where the text lies: `content`, `notebook_cells[2].source`, ...
        pa.field("entity", pa.string()),
        pa.field("start", pa.int32()),
        pa.field("end", pa.int32()),
        pa.field("detector", pa.string()),
        pa.field("score", pa.float32()),
        pa.field("replacement", pa.string()),
    ]
)
SPANS_FIELD = pa.field("pii_spans", pa.list_(SPAN_TYPE))

# Files whose values go unquoted (`KEY=value`, `key: value`): by extension, file name, or enry language.
CONFIG_EXTENSIONS = frozenset(
    {"env", "ini", "cfg", "conf", "config", "properties", "yaml", "yml", "toml", "cnf", "npmrc", "pypirc", "netrc",
     "s3cfg", "boto", "cf"}
)  # fmt: skip
TEMPLATE_SUFFIXES = frozenset({"example", "sample", "dist", "template", "tmpl", "default", "orig", "bak", "in"})
CONFIG_LANGUAGES = frozenset({"INI", "YAML", "TOML", "Java Properties", "Dotenv", "Git Config", "Nginx"})

# What StarCoder and StarCoder2 replaced (BD `pii/ner/pii_redaction/utils.py`: USERNAME and AMBIGUOUS are not
# redacted): a handle in code is mostly public project metadata (a commit author, an issue's reporter).
PUBLISHED_REDACT = (EMAIL, IP_ADDRESS, KEY, PASSWORD, NAME)

MODEL_CHOICES = "'auto' (the model shipped with stackcurate), 'none' (patterns only), or a model folder"
LINE_CHOICES = ("gated", "all")


@dataclass(frozen=True, kw_only=True)
class PiiConfig:
    """Which PII types to detect, which of those to redact, and with which detectors.

    `entities` are detected and recorded in `pii_spans`; those also in `redact` are replaced in the text, the
    others are recorded with a null `replacement` and stay in the text. A type in `redact` but not in
    `entities` is never detected, so nothing replaces it."""

    entities: tuple[str, ...] = option(ENTITIES, f"types detected and recorded, from {', '.join(ENTITIES)}")
    redact: tuple[str, ...] = option(
        PUBLISHED_REDACT, "types replaced in the text, of those detected (default StarCoder's: all but USERNAME)"
    )
    score_threshold: float = option(0.5, "lowest detector score redacted")
    patterns: bool = option(True, "run the pattern recognizers")
    model: str = option("auto", f"the encoder model: {MODEL_CHOICES}", path=True, keywords=("auto", "none"))
    model_entities: tuple[str, ...] = option(MODEL_ENTITIES, "types the model may report")
    model_lines: str = option(
        "gated", "lines the model reads: 'gated' (those with a person's context or a key's) or 'all'"
    )
    device: str = option("auto", "where the model runs: 'auto' (a GPU if torch sees one), 'cpu', 'cuda', 'cuda:1'...")
    num_gpus: float = option(0.0, "GPUs per model actor on Ray (0: CPU actors)")
    batch_rows: int = option(256, "rows per in-memory batch")

    def __post_init__(self) -> None:
        unknown = sorted(set(self.entities + self.redact + self.model_entities) - set(ENTITIES))
        if unknown:
            raise StackcurateError(f"pii: unknown entity {unknown[0]!r}; choose from {', '.join(ENTITIES)}")
        if not 0.0 <= self.score_threshold <= 1.0:
            raise StackcurateError(f"pii: score_threshold must be in [0, 1], got {self.score_threshold}")
        if self.model_lines not in LINE_CHOICES:
            raise StackcurateError(f"pii: model_lines must be 'gated' or 'all', got {self.model_lines!r}")
        if not self.patterns and self.model == "none":
            raise StackcurateError("pii: no detector left; keep the patterns or name a model")
        if self.num_gpus < 0:
            raise StackcurateError(f"pii: num_gpus must be >= 0, got {self.num_gpus}")

    @property
    def redacted(self) -> frozenset[str]:
        """The types replaced in the text: detected and listed in `redact`."""
        return frozenset(self.entities) & frozenset(self.redact)

    @property
    def uses_model(self) -> bool:
        return self.model != "none" and bool(set(self.model_entities) & set(self.entities))


def default_model() -> Path:
    """The folder `model: auto` uses."""
    return cache_dir() / DEFAULT_MODEL


def default_model_folder() -> Path:
    """The default model's folder, assembled from the weights shipped with the package if this machine does not
    hold it yet (seconds, once; no training: every machine redacts the same way)."""
    from stackcurate.stages.pii import shipped

    folder = default_model()
    if shipped.is_current(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # One process at a time: two runs starting together on a machine would otherwise write the same folder.
    with io.machine_lock(folder.with_name(folder.name + ".lock")):
        if not shipped.is_current(folder):  # not assembled by the process that held the lock before
            log.info("assembling the shipped PII model %s in %s", DEFAULT_MODEL, folder)
            shipped.materialize(folder)
    return folder


def resolve_model(cfg: PiiConfig) -> PiiConfig:
    """`cfg` naming a model folder that exists: `auto` becomes the shipped default model's folder."""
    if not cfg.uses_model or cfg.model != "auto":
        return cfg
    return dataclasses.replace(cfg, model=str(default_model_folder()))


def analyzer() -> "AnalyzerEngine":
    """A presidio AnalyzerEngine with the code recognizers and no NLP model (works offline)."""
    # Presidio picks a device for NLP engines we do not use, by importing torch (heavy, in every process):
    # naming one spares that; the encoder model has its own `device`.
    os.environ.setdefault("PRESIDIO_DEVICE", "cpu")
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NoOpNlpEngine

    from stackcurate.stages.pii import recognizers  # presidio: seconds to import, so only when detecting

    registry = recognizers.OrderedRegistry(recognizers=recognizers.code_recognizers(), supported_languages=["en"])
    return AnalyzerEngine(
        registry=registry,
        nlp_engine=NoOpNlpEngine(models=[{"lang_code": "en", "model_name": "none"}]),
        supported_languages=["en"],
    )


# A run-control file: `wgetrc`, `.fetchmailrc`, `.curlrc` hold `name = value` settings.
_RC_FILE = re.compile(r"\.?[a-z0-9_\-]+rc")
_IN_ETC = re.compile(r"(?:^|/)etc/")
# In `etc/`, files of code and documents are no settings files, whatever their language column says.
_NOT_SETTINGS = frozenset(
    {"py", "sh", "bash", "zsh", "pl", "pm", "rb", "php", "js", "ts", "java", "c", "h", "go", "lua", "tcl", "ps1",
     "html", "htm", "xml", "json", "md", "rst", "txt", "csv"}
)  # fmt: skip


def is_config(path: str | None, extension: str | None, language: str | None) -> bool:
    """Whether a file's values may go unquoted: by enry language, extension, a `.env*` or a run-control name."""
    path = path or ""
    ext = (extension or extension_of(path)).lower()
    if ext in TEMPLATE_SUFFIXES:  # `settings.yml.example`, `.env.sample`: the config file's template
        ext = extension_of(path.rsplit(".", 1)[0]).lower()
    name = path.rsplit("/", 1)[-1]
    return (
        language in CONFIG_LANGUAGES
        or ext in CONFIG_EXTENSIONS
        or name.startswith(".env")
        or _RC_FILE.fullmatch(name) is not None
        or (not language and ext not in _NOT_SETTINGS and _IN_ETC.search(path) is not None)  # `etc/backup.d/20.mysql`
    )


# Files that list people, one a line (`AUTHORS`, `THANKS.md`, `CONTRIBUTORS.txt`, `MAINTAINERS`, `CREDITS-2.x`,
# Debian's `THANKS.gz`, `.mailmap`): there a line that starts with a name, or is a handle, names a person whatever
# follows it. In capitals any suffix goes; in lower case only a document's (`authors.py` is code).
_PEOPLE_WORDS = r"(?:authors|thanks|contributors|contributers|maintainers|credits|(?:code)?owners|committers|people)"
_PEOPLE_FILE = re.compile(
    rf"(?i:{_PEOPLE_WORDS}(?:\.(?:txt|md|rst|markdown|adoc|asciidoc|org|list|in))?|\.mailmap)"
    rf"|{_PEOPLE_WORDS.upper()}(?:[._\-][\w.\-]*)?"
)


def is_people_file(path: str | None) -> bool:
    return _PEOPLE_FILE.fullmatch((path or "").rsplit("/", 1)[-1]) is not None


# A project's history: who did what, a name on every few lines with no word before it (`* Fix x (Jane Roe)`,
# `[ Jane Roe ]`, ` -- Jane Roe <jane@...>`). `ChangeLog`, `NEWS`, `CHANGES.md`, `HISTORY.rst`, Debian's
# `changelog.Debian`, `/usr/share/doc` copies as `wget.changelog`, `RELEASE-NOTES.md`, Maven's `changes.xml` and
# Tomcat's `changelog.xml`, gzipped as Debian ships them (`changelog.gz`), and the files of a `release-notes/`
# folder (Jackson's `release-notes/VERSION-2.x`); not code (`news.py`).
_HISTORY_FILE = re.compile(
    r"(?i)(?:[\w+\-]+\.)?(?:changelog|changes|news|history|release[-_]?notes)"
    r"(?:[._\-](?:md|rst|txt|markdown|adoc|org|debian|old|xml|\d[\w.\-]*))?(?:\.gz)?"
)
_HISTORY_FOLDER = re.compile(r"(?i)release[-_]?notes")


def is_history_file(path: str | None) -> bool:
    folder, _, name = (path or "").rpartition("/")
    in_notes = _HISTORY_FOLDER.fullmatch(folder.rpartition("/")[2]) is not None
    return in_notes or _HISTORY_FILE.fullmatch(name) is not None


class Detector:
    """Finds the spans to redact in texts, and the ones it spares (with the sparing rule).

    The model loads on first use, so building the stage (done once to check the config) stays cheap."""

    def __init__(self, cfg: PiiConfig) -> None:
        self.cfg = cfg
        self._model: EncoderModel | None = None

    # Presidio loads on first use (it imports spaCy, and with it torch: heavy), so the driver, which builds
    # the stage only to check its settings, never holds it.
    @functools.cached_property
    def engine(self) -> "AnalyzerEngine":
        return analyzer()

    @functools.cached_property
    def config_recognizers(self) -> list[Any]:
        from stackcurate.stages.pii import recognizers

        return recognizers.config_recognizers()

    @functools.cached_property
    def people_recognizers(self) -> list[Any]:
        from stackcurate.stages.pii import idioms

        return idioms.people_recognizers()

    @functools.cached_property
    def history_recognizers(self) -> list[Any]:
        from stackcurate.stages.pii import idioms

        return idioms.history_recognizers()

    @functools.cached_property
    def entities(self) -> list[str]:
        supported = set(self.engine.get_supported_entities("en"))
        return [e for e in self.cfg.entities if e in supported]

    @property
    def model(self) -> EncoderModel | None:
        if self._model is None and self.cfg.uses_model:
            # A worker on another node may not hold the default model yet: it assembles its own copy.
            default = self.cfg.model == "auto" or Path(self.cfg.model) == default_model()
            folder = default_model_folder() if default else Path(self.cfg.model)
            entities = tuple(e for e in self.cfg.model_entities if e in self.cfg.entities)
            self._model = EncoderModel(folder, entities=entities, lines=self.cfg.model_lines, device=self.cfg.device)
        return self._model

    def find_batch(
        self,
        texts: list[str],
        configs: list[bool],
        people: list[bool] | None = None,
        histories: list[bool] | None = None,
    ) -> list[tuple[list[rules.Span], list[str]]]:
        """For each text: (spans to redact in text order, the names of the rules that spared the others).
        `configs` says which texts are config files, `people` which are lists of people (`is_people_file`),
        `histories` which are changelogs (`is_history_file`); the model reads every line of those two.

        The patterns also read each unescaped view of a text (`escapes.py`: a raw notebook's JSON strings, a
        string literal holding code), and their spans there count at the offsets they map back to."""
        model = self.model
        people = people or [False] * len(texts)
        histories = histories or [False] * len(texts)
        whole = [a or b for a, b in zip(people, histories, strict=True)]
        model_spans = model.spans(texts, whole) if model is not None else [[] for _ in texts]
        out = []
        for text, config, listed, history, found in zip(texts, configs, people, histories, model_spans, strict=True):
            patterns = self._patterns(text, config, listed, history) if self.cfg.patterns else []
            spans, spared = self._judge(text, patterns + found)
            for view in [*escapes.views(text), *escapes.entity_views(text)] if self.cfg.patterns else []:
                in_view, spared_in_view = self._judge(view.text, self._patterns(view.text, config, listed))
                spans += [_to_original(span, view) for span in in_view]
                spared += [(_to_original(span, view), reason) for span, reason in spared_in_view]
            redacted = {(s.entity, s.start, s.end) for s in spans}
            # A span the original text and a view both spare (or one spares and the other redacts) counts once.
            reasons = {(s.entity, s.start, s.end, reason): reason for s, reason in spared}
            kept = [
                reason for (entity, start, end, _), reason in reasons.items() if (entity, start, end) not in redacted
            ]
            out.append((rules.resolve_overlaps(spans), kept))
        return out

    def find(
        self, text: str, config: bool = False, people: bool = False, history: bool = False
    ) -> tuple[list[rules.Span], list[str]]:
        return self.find_batch([text], [config], [people], [history])[0]

    def pattern_spans(
        self, text: str, config: bool = False, people: bool = False
    ) -> tuple[list[rules.Span], list[tuple[rules.Span, str]]]:
        """The patterns' spans of `text` (no model, no escaped views): those kept, and those spared with the rule
        that spares each (`pii_model.realset` labels with both)."""
        return self._judge(text, self._patterns(text, config, people))

    def _judge(self, text: str, candidates: list[rules.Span]) -> tuple[list[rules.Span], list[tuple[rules.Span, str]]]:
        """The candidates to redact, and the others with the rule that spares each (below-threshold ones go)."""
        spans, spared = [], []
        for span in candidates:
            if span.score < self.cfg.score_threshold:
                continue
            reason = rules.spared_by(span, text)
            if reason is None:
                spans.append(span)
            else:
                spared.append((span, reason))
        return spans, spared

    def _patterns(self, text: str, config: bool, people: bool = False, history: bool = False) -> list[rules.Span]:
        extra = (
            (self.config_recognizers if config else [])
            + (self.people_recognizers if people else [])
            + (self.history_recognizers if history else [])
        )
        found = self.engine.analyze(
            text, language="en", entities=self.entities, ad_hoc_recognizers=extra or None
        )  # the score threshold applies in find_batch, to pattern and model spans alike
        return [
            rules.Span(
                r.entity_type, r.start, r.end, float(r.score), (r.recognition_metadata or {}).get(DETECTOR, "presidio")
            )
            for r in found
        ]


def _to_original(span: rules.Span, view: escapes.View | escapes.Joined) -> rules.Span:
    start, end = view.to_original(span.start, span.end)
    return rules.Span(span.entity, start, end, span.score, span.detector)


# Where a text lies in a column's Python values: the list or dict holding it, its index or key, and its name
# (`notebook_cells[2].source`), so the redacted text is written back in its place.
Place = tuple[Any, int | str, str]


def _texts(holder: Any, key: int | str, where: str) -> Iterator[Place]:
    """The place of each non-empty string in `holder[key]`, nested lists and structs included."""
    value = holder[key]
    if isinstance(value, str):
        if value:
            yield holder, key, where
    elif isinstance(value, list):
        for i in range(len(value)):
            yield from _texts(value, i, f"{where}[{i}]")
    elif isinstance(value, dict):
        for name in value:
            yield from _texts(value, name, f"{where}.{name}")


class PiiStage(RecordStage):
    """find and redact emails, IP addresses, keys, passwords, names and usernames

    Find personal and secret data in every text column (EMAIL, IP_ADDRESS, KEY, PASSWORD, NAME, USERNAME) with
    code-aware patterns and a small encoder model shipped with stackcurate (--model none: patterns only), then
    spare what StarCoder did not redact (short values, private IPs, example and no-reply addresses, placeholders).

    The types in --entities are detected and recorded; of those, the types in --redact are replaced in the text by
    <EMAIL>, <KEY>, <PASSWORD>, <NAME>, <USERNAME> (IP addresses by addresses of a fixed private pool). Every
    detected span is recorded in the pii_spans column (which text, type, offsets, detector, replacement); the value
    itself is never stored or logged. No file is removed.

    Examples:
      stackcurate pii --out work/run --entities EMAIL KEY PASSWORD IP_ADDRESS --model none
      stackcurate pii --out work/run --redact EMAIL IP_ADDRESS KEY PASSWORD NAME USERNAME
    """

    name = "pii"
    mb_per_s = 1.0  # one core, end to end: the model and the patterns, `benchmarks/pii_throughput.py`
    config = PiiConfig
    kinds = None
    needs = ("content",)

    @classmethod
    def before_shards(cls, cfg: PiiConfig, ctx: StageContext) -> PiiConfig:
        """The model the workers load, resolved once on the driver (`auto`: the shipped one, assembled)."""
        return resolve_model(cfg)

    @classmethod
    def resources(cls, cfg: PiiConfig) -> dict[str, float]:
        return {"num_gpus": cfg.num_gpus} if cfg.uses_model else {}

    def __init__(self, cfg: PiiConfig) -> None:
        super().__init__(cfg)
        self.detector = Detector(cfg)
        self.redacted = cfg.redacted

    def adds(self) -> list[pa.Field]:
        return [SPANS_FIELD]

    def __call__(self, table: pa.Table) -> StageOutput:
        paths, extensions, languages = (
            table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows
            for name in ("path", "extension", "language")
        )
        columns = {name: table.column(name).to_pylist() for name in TEXT_COLUMNS if name in table.column_names}
        # Every text of every row, in row order, each with where it lies; the texts go to the detector in one
        # batch (the model shares its forward passes), and are written back where they came from.
        places: list[list[Place]] = [
            [place for name, values in columns.items() for place in _texts(values, row, name)]
            for row in range(table.num_rows)
        ]
        texts = [holder[key] for row in places for holder, key, _ in row]
        configs = [
            where == "content" and is_config(path, ext, language)  # notebook scripts and cells are code
            for row, path, ext, language in zip(places, paths, extensions, languages, strict=True)
            for _, _, where in row
        ]
        people = [
            where == "content" and is_people_file(path)
            for row, path in zip(places, paths, strict=True)
            for *_, where in row
        ]
        histories = [
            where == "content" and is_history_file(path)
            for row, path in zip(places, paths, strict=True)
            for *_, where in row
        ]
        found = iter(self.detector.find_batch(texts, configs, people, histories))
        stats: Counter[tuple[str, str | None, str | None]] = Counter()
        out_spans = []
        for row, language in zip(places, languages, strict=True):
            row_texts = [holder[key] for holder, key, _ in row]
            row_found = [next(found) for _ in row]
            # A value redacted in one text of the row is redacted wherever else it occurs in the row: a
            # notebook's secret is in its JSON, its script and its cells, printed in an output, or repeated.
            spans_by_text = redact.with_repeats(row_texts, [spans for spans, _ in row_found])
            seen: dict[str, str] = {}  # one IP mapping per row, so a notebook's columns agree
            row_spans = []
            for (holder, key, where), text, spans in zip(row, row_texts, spans_by_text, strict=True):
                # Detected-only types (not in `redact`) stay in the text and get a null replacement; only the
                # redacted spans take an IP from the pool, so the pool's order does not depend on the others.
                replaced = [s for s in spans if s.entity in self.redacted]
                with_ = redact.replacements(text, replaced, seen)
                if replaced:
                    holder[key] = redact.redact(text, replaced, with_)
                by_offsets = {(s.start, s.end): r for s, r in zip(replaced, with_, strict=True)}  # spans are disjoint
                row_spans += [
                    {"column": where, "entity": s.entity, "start": s.start, "end": s.end, "detector": s.detector,
                     "score": s.score, "replacement": by_offsets.get((s.start, s.end))}
                    for s in spans
                ]  # fmt: skip
                stats.update(
                    ("spans_redacted" if s.entity in self.redacted else "spans_detected_only", language, s.entity)
                    for s in spans
                )
            stats.update(("spans_spared", language, reason) for _, spared in row_found for reason in spared)
            out_spans.append(row_spans)
        for name, values in columns.items():
            field = table.schema.field(name)
            table = put_column(table, field, pa.array(values, field.type))
        table = put_column(table, SPANS_FIELD, pa.array(out_spans, SPANS_FIELD.type))
        return StageOutput(kept=table, stats={key: float(n) for key, n in stats.items()})
