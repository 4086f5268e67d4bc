"""PII redaction: presidio with code-aware pattern recognizers and an encoder model, StarCoder's post-processing.

Detection is a presidio `AnalyzerEngine` with no spaCy model (`NoOpNlpEngine`: nothing to download) holding
the recognizers of `recognizers.py`: emails, IPv4/IPv6 (ports excluded, version numbers not taken), keys
and tokens (cloud, VCS, chat and payment tokens, JWTs, private-key blocks, random-looking values assigned to
key-like names), passwords (assignments, connection strings, and unquoted values in config files); and the
encoder model of `model.py` (trained by `stackcurate pii-model train`, or on first use) for names,
usernames, keys and passwords, on the lines with a person or secret context. Then
`rules.py` spares what StarCoder did not redact (short spans, private IPs and DNS servers, example and
license emails, keys that read like words, one-word names, placeholders), and `redact.py` replaces the rest
with `<EMAIL>`, `<KEY>`, `<PASSWORD>`, `<NAME>`, `<USERNAME>`, and IPs with a fixed private pool.

Input columns: `content` (and `path`, `extension`, `language`: config files get the unquoted-value rules).
Output columns: `content` redacted; `pii_spans`, one struct per redacted span: `entity`, `start` and `end`
(character offsets into the original text), `detector` (`pattern:<rule>` or `model:<name>`), `score`,
`replacement`. The secret itself is never stored, logged or counted. No row is removed. Stats:
`spans_redacted` and `spans_spared` counts per language and entity / sparing rule.

Example:
    stackcurate pii --out work/run --entities EMAIL KEY PASSWORD IP_ADDRESS    # --model none: patterns only
"""

import dataclasses
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from stackcurate.core.config import option
from stackcurate.core.errors import StackcurateError
from stackcurate.core.schema import put_column
from stackcurate.core.stage import Shard, StageOutput, TaskContext, read_records, records_schema
from stackcurate.stages.ingest.content import extension_of
from stackcurate.stages.pii import redact, rules
from stackcurate.stages.pii.entities import DETECTOR, ENTITIES
from stackcurate.stages.pii.model import MODEL_ENTITIES, EncoderModel, cache_dir

if TYPE_CHECKING:
    from presidio_analyzer import AnalyzerEngine

log = logging.getLogger("stackcurate.pii")
DEFAULT_MODEL = "minilm-l3"  # the folder under the cache that `model: auto` uses

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


MODEL_CHOICES = "'auto' (the cached default model, trained on first use), 'none' (patterns only), or a model folder"
LINE_CHOICES = ("gated", "all")


@dataclass(frozen=True, kw_only=True)
class PiiConfig:
    """Which PII types to redact, and with which detectors."""

    entities: tuple[str, ...] = option(ENTITIES, f"types to redact, from {', '.join(ENTITIES)}")
    score_threshold: float = option(0.5, "lowest detector score redacted")
    patterns: bool = option(True, "run the pattern recognizers")
    model: str = option("auto", f"the encoder model: {MODEL_CHOICES}", path=True, keywords=("auto", "none"))
    model_entities: tuple[str, ...] = option(MODEL_ENTITIES, "types the model may report")
    model_lines: str = option(
        "gated", "lines the model reads: 'gated' (those with a person or secret context) or 'all'"
    )
    device: str = option("auto", "where the model runs: 'auto' (a GPU if torch sees one), 'cpu', 'cuda', 'cuda:1'...")
    num_gpus: float = option(0.0, "GPUs per model actor on Ray (0: CPU actors)")
    batch_rows: int = option(256, "rows per in-memory batch")

    def __post_init__(self) -> None:
        unknown = sorted(set(self.entities + self.model_entities) - set(ENTITIES))
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
    def uses_model(self) -> bool:
        return self.model != "none" and bool(set(self.model_entities) & set(self.entities))


def default_model() -> Path:
    """The folder `model: auto` uses."""
    return cache_dir() / DEFAULT_MODEL


def resolve_model(cfg: PiiConfig, *, progress: bool = True) -> PiiConfig:
    """`cfg` naming a model folder that exists: `auto` becomes the cached default model, trained now (with
    a message saying so) if it is missing."""
    if not cfg.uses_model or cfg.model != "auto":
        return cfg
    folder = default_model()
    if not (folder / "config.json").is_file():
        from pii_model.train import DEFAULT, train

        log.warning(
            "no PII model at %s; training the default one now (a few minutes on CPU, once; "
            "`stackcurate pii-model train` does this ahead of time)",
            folder,
        )
        train(DEFAULT, folder, progress=progress)
    return dataclasses.replace(cfg, model=str(folder))


def prepare(cfg: PiiConfig, ctx: TaskContext) -> PiiConfig:
    return resolve_model(cfg)


def resources(cfg: PiiConfig) -> dict[str, float]:
    return {"num_gpus": cfg.num_gpus} if cfg.uses_model else {}


def analyzer() -> "AnalyzerEngine":
    """A presidio AnalyzerEngine with the code recognizers and no NLP model (works offline)."""
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NoOpNlpEngine

    from stackcurate.stages.pii import recognizers  # presidio: seconds to import, so only when detecting

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
    """Finds the spans to redact in texts, and the ones it spares (with the sparing rule).

    The model loads on first use, so building the stage (done once to check the config) stays cheap."""

    def __init__(self, cfg: PiiConfig) -> None:
        self.cfg = cfg
        self.engine = analyzer()
        from stackcurate.stages.pii import recognizers

        self.config_recognizers = recognizers.config_recognizers()
        supported = set(self.engine.get_supported_entities("en"))
        self.entities = [e for e in cfg.entities if e in supported]
        self._model: EncoderModel | None = None

    @property
    def model(self) -> EncoderModel | None:
        if self._model is None and self.cfg.uses_model:
            folder = default_model() if self.cfg.model == "auto" else Path(self.cfg.model)
            if self.cfg.model == "auto" and not (folder / "config.json").is_file():
                raise StackcurateError("pii: the default PII model is missing; run `stackcurate pii-model train`")
            entities = tuple(e for e in self.cfg.model_entities if e in self.cfg.entities)
            self._model = EncoderModel(folder, entities=entities, lines=self.cfg.model_lines, device=self.cfg.device)
        return self._model

    def find_batch(self, texts: list[str], configs: list[bool]) -> list[tuple[list[rules.Span], list[str]]]:
        """For each text: (spans to redact in text order, the names of the rules that spared the others)."""
        model = self.model
        model_spans = model.spans(texts) if model is not None else [[] for _ in texts]
        out = []
        for text, config, found in zip(texts, configs, model_spans, strict=True):
            candidates = self._patterns(text, config) + found if self.cfg.patterns else found
            spans, spared = [], []
            for span in candidates:
                if span.score < self.cfg.score_threshold:
                    continue
                reason = rules.spared_by(span, text)
                if reason is None:
                    spans.append(span)
                else:
                    spared.append(reason)
            out.append((rules.resolve_overlaps(spans), spared))
        return out

    def find(self, text: str, config: bool = False) -> tuple[list[rules.Span], list[str]]:
        return self.find_batch([text], [config])[0]

    def _patterns(self, text: str, config: bool) -> list[rules.Span]:
        found = self.engine.analyze(
            text,
            language="en",
            entities=self.entities,
            ad_hoc_recognizers=self.config_recognizers if config else None,
        )  # the score threshold applies in find_batch, to pattern and model spans alike
        return [
            rules.Span(
                r.entity_type, r.start, r.end, float(r.score), (r.recognition_metadata or {}).get(DETECTOR, "presidio")
            )
            for r in found
        ]


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
        configs = [
            is_config(path, ext, language) for path, ext, language in zip(paths, extensions, languages, strict=True)
        ]
        found = self.detector.find_batch([text or "" for text in texts], configs)
        for text, language, (spans, spared) in zip(texts, languages, found, strict=True):
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
