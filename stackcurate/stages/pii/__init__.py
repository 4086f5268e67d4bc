"""PII redaction: presidio with code-aware pattern recognizers, StarCoder's post-processing and replacements.

Detection is a presidio `AnalyzerEngine` with no spaCy model (`NoOpNlpEngine`: nothing to download) holding
the recognizers of `recognizers.py`: emails, IPv4/IPv6 (ports excluded, version numbers not taken), keys
and tokens (cloud, VCS, chat and payment tokens, JWTs, private-key blocks, random-looking values assigned to
key-like names), passwords (assignments, connection strings, and unquoted values in config files). Then
`rules.py` spares what StarCoder did not redact (short spans, private IPs and DNS servers, example and
license emails, keys that read like words, one-word names, placeholders), and `redact.py` replaces the rest
with `<EMAIL>`, `<KEY>`, `<PASSWORD>`, `<NAME>`, `<USERNAME>`, and IPs with a fixed private pool.

Input columns: `content` (and `path`, `extension`, `language`: config files get the unquoted-value rules).
Output columns: `content` redacted; `pii_spans`, one struct per redacted span: `entity`, `start` and `end`
(character offsets into the original text), `detector` (`pattern:<rule>`), `score`, `replacement`. The
secret itself is never stored, logged or counted. No row is removed. Stats: `spans_redacted` and `spans_spared`
counts per language and entity / sparing rule.

Example:
    stackcurate pii --out work/run --entities EMAIL KEY PASSWORD IP_ADDRESS
"""

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from stackcurate.core.config import option
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import put_column
from stackcurate.core.stage import Shard, StageOutput, read_records, records_schema
from stackcurate.stages.ingest.content import extension_of
from stackcurate.stages.pii import recognizers, redact, rules
from stackcurate.stages.pii.recognizers import DETECTOR, ENTITIES

if TYPE_CHECKING:
    from presidio_analyzer import AnalyzerEngine

SPAN_TYPE = pa.struct(
    [
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
    {"env", "ini", "cfg", "conf", "config", "properties", "yaml", "yml", "toml", "cnf", "npmrc", "pypirc", "netrc"}
)
CONFIG_LANGUAGES = frozenset({"INI", "YAML", "TOML", "Java Properties", "Dotenv", "Git Config", "Nginx"})


@dataclass(frozen=True, kw_only=True)
class PiiConfig:
    """Which PII types to redact."""

    entities: tuple[str, ...] = option(ENTITIES, f"types to redact, from {', '.join(ENTITIES)}")
    score_threshold: float = option(0.5, "lowest detector score redacted")
    batch_rows: int = option(256, "rows per in-memory batch")

    def __post_init__(self) -> None:
        unknown = sorted(set(self.entities) - set(ENTITIES))
        if unknown:
            raise StackcurateError(f"pii: unknown entity {unknown[0]!r}; choose from {', '.join(ENTITIES)}")
        if not 0.0 <= self.score_threshold <= 1.0:
            raise StackcurateError(f"pii: score_threshold must be in [0, 1], got {self.score_threshold}")


def analyzer() -> "AnalyzerEngine":
    """A presidio AnalyzerEngine with the code recognizers and no NLP model (works offline)."""
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NoOpNlpEngine

    registry = RecognizerRegistry(recognizers=recognizers.code_recognizers(), supported_languages=["en"])
    return AnalyzerEngine(
        registry=registry,
        nlp_engine=NoOpNlpEngine(models=[{"lang_code": "en", "model_name": "none"}]),
        supported_languages=["en"],
    )


def is_config(path: str | None, extension: str | None, language: str | None) -> bool:
    """Whether a file's values may go unquoted: by enry language, extension, or a `.env*` name."""
    path = path or ""
    ext = (extension or extension_of(path)).lower()
    return language in CONFIG_LANGUAGES or ext in CONFIG_EXTENSIONS or path.rsplit("/", 1)[-1].startswith(".env")


class Detector:
    """Finds the spans to redact in one text, and the ones it spares (with the sparing rule)."""

    def __init__(self, cfg: PiiConfig) -> None:
        self.cfg = cfg
        self.engine = analyzer()
        self.config_recognizers = recognizers.config_recognizers()
        supported = set(self.engine.get_supported_entities("en"))
        self.entities = [e for e in cfg.entities if e in supported]

    def find(self, text: str, config: bool = False) -> tuple[list[rules.Span], list[str]]:
        """(spans to redact in text order, the names of the rules that spared the others)."""
        found = self.engine.analyze(
            text,
            language="en",
            entities=self.entities,
            ad_hoc_recognizers=self.config_recognizers if config else None,
            score_threshold=self.cfg.score_threshold,
        )
        spans, spared = [], []
        for result in found:
            detector = (result.recognition_metadata or {}).get(DETECTOR, "presidio")
            span = rules.Span(result.entity_type, result.start, result.end, float(result.score), detector)
            reason = rules.spared_by(span, text)
            if reason is None:
                spans.append(span)
            else:
                spared.append(reason)
        return rules.resolve_overlaps(spans), spared


class PiiStage:
    """Redact PII in `content` and record the spans (see the module docstring)."""

    name = "pii"

    def __init__(self, cfg: PiiConfig) -> None:
        self.cfg = cfg
        self.detector = Detector(cfg)

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        return read_records(shard, self.cfg.batch_rows)

    def output_schema(self, shard: Shard) -> pa.Schema:
        schema = records_schema(shard)
        index = schema.get_field_index(SPANS_FIELD.name)
        return schema.set(index, SPANS_FIELD) if index >= 0 else schema.append(SPANS_FIELD)

    def __call__(self, table: pa.Table) -> StageOutput:
        texts, paths, extensions, languages = (
            table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows
            for name in ("content", "path", "extension", "language")
        )
        stats: Counter[tuple[str, str | None, str | None]] = Counter()
        out_texts, out_spans = [], []
        for text, path, ext, language in zip(texts, paths, extensions, languages, strict=True):
            spans, spared = self.detector.find(text, is_config(path, ext, language)) if text else ([], [])
            with_ = redact.replacements(text, spans)
            out_texts.append(redact.redact(text, spans, with_) if spans else text)
            out_spans.append(
                [
                    {"entity": s.entity, "start": s.start, "end": s.end, "detector": s.detector,
                     "score": s.score, "replacement": r}
                    for s, r in zip(spans, with_, strict=True)
                ]
            )  # fmt: skip
            stats.update(("spans_redacted", language, s.entity) for s in spans)
            stats.update(("spans_spared", language, reason) for reason in spared)
        content = table.schema.field("content")
        table = put_column(table, content, pa.array(out_texts, content.type))
        table = put_column(table, SPANS_FIELD, pa.array(out_spans, SPANS_FIELD.type))
        return StageOutput(kept=table, stats={key: float(n) for key, n in stats.items()})
