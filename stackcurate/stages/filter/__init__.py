# pyright: reportAttributeAccessIssue=false
# (pyarrow.compute functions are generated at import time, so type checkers cannot see them.)
"""Heuristic filters: score every file, keep the scores as columns, remove by the first rule that holds.

Two published rule sets ship as data: `filters/starcoder_v1.yaml` (StarCoder: per-extension thresholds from
BigCode's visual inspection, XML, HTML and JSON/YAML size filters) and `filters/starcoder2_v1.yaml` (The
Stack v2: line counts and lengths with their language exceptions, auto-generated, alpha, encoded data,
per-language line caps, the Text allow-list, HTML). `overrides` changes any threshold by rule name.

Jupyter notebooks are converted first (script in the kernel's language, plus structured cells); their
scores are computed on the script, so a notebook is judged as code, not as JSON.

Input columns: `content`, `path`, `language`, `extension`, `is_generated` (file records).
Output columns: every input column, one float64 column per score the rule set uses (`max_line_length`,
`alpha_fraction`, ...; re-threshold later with one query), and `notebook_script`, `notebook_language`,
`notebook_cells` (null for other files).
Drop reasons: the rule names of the rule set, and `notebook_unreadable`.

Example:
    stackcurate filter --out work/run --rules filters/starcoder2_v1.yaml --overrides max_line_length=2000
"""

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stackcurate.core.config import option
from stackcurate.core.contract import StageOutput, split_by_reason
from stackcurate.core.errors import StackcurateError
from stackcurate.core.records import RecordStage
from stackcurate.core.schema import NOTEBOOK_CELLS, NOTEBOOK_SCRIPT, put_column
from stackcurate.core.text import as_texts
from stackcurate.stages.filter import notebooks, scores
from stackcurate.stages.filter.rules import RuleSet, applies, decide, load_rule_set, table_score

# The script and the cells are text derived from `content`: schema.TEXT_COLUMNS names them, so pii redacts them.
NOTEBOOK_FIELDS = [
    pa.field(NOTEBOOK_SCRIPT, pa.large_string()),
    pa.field("notebook_language", pa.string()),
    pa.field(NOTEBOOK_CELLS, pa.list_(pa.struct([(name, pa.large_string()) for name in notebooks.CELL_FIELDS]))),
]
# Scores computed together (one pass gives several columns).
_GROUPS = {
    "line_stats": ("num_lines", "max_line_length", "avg_line_length"),
    "char_fractions": ("alphanum_fraction", "alpha_fraction"),
    "encoded": ("encoded_fraction", "encoded_max_match"),
    "html": ("html_visible_fraction", "html_visible_chars"),
}


@dataclass(frozen=True, kw_only=True)
class FilterConfig:
    """Which rule set, which thresholds to change, and whether to convert notebooks."""

    rules: str | None = option(
        None,
        "rule set YAML: filters/starcoder2_v1.yaml or filters/starcoder_v1.yaml (the shipped one when no such file"
        " is beside the YAML)",
        path=True,
    )
    overrides: tuple[str, ...] = option((), "RULE=VALUE pairs replacing a rule's threshold; RULE=null turns it off")
    notebooks: bool = option(True, "convert Jupyter notebooks to script + cells and filter the script")
    batch_rows: int = option(1024, "rows per in-memory batch")


def parse_overrides(pairs: tuple[str, ...]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise StackcurateError(f"override '{pair}' must be RULE=VALUE (or RULE=null)")
        try:
            out[name.strip()] = None if value.strip().lower() in ("null", "none", "") else float(value)
        except ValueError:
            raise StackcurateError(f"override '{pair}': '{value}' is not a number or null") from None
    return out


class FilterStage(RecordStage):
    """score every file with heuristic quality rules and remove those that fail one

    Score every file with the rules of a rule set, and remove it by the first rule that fails. Two published rule
    sets ship with stackcurate: filters/starcoder2_v1.yaml (The Stack v2: line counts and lengths, auto-generated
    files, alphabetic share, encoded data, per-language caps, HTML) and filters/starcoder_v1.yaml (StarCoder:
    per-extension thresholds, XML, HTML and JSON/YAML sizes). --overrides changes a rule's threshold by name.
    Jupyter notebooks are judged on their code, not on their JSON.

    Adds one score column per rule (max_line_length, alpha_fraction, ...: re-threshold later with a query), and
    notebook_script, notebook_language and notebook_cells for notebooks.
    Removed, by reason: the name of the rule that failed, and notebook_unreadable.

    Example:
      stackcurate filter --out work/run --rules filters/starcoder2_v1.yaml --overrides max_line_length=2000
    """

    name = "filter"
    mb_per_s = 45  # one core, end to end: compiled scores, reading and writing
    config = FilterConfig
    needs = ("path", "content", "language", "extension")

    def __init__(self, cfg: FilterConfig) -> None:
        if not cfg.rules:
            raise StackcurateError(
                "filter needs a rule set: --rules filters/starcoder2_v1.yaml (or starcoder_v1.yaml)"
            )
        super().__init__(cfg)
        self.rules: RuleSet = load_rule_set(cfg.rules, parse_overrides(cfg.overrides))
        self.score_names = self.rules.score_names
        self.by_name = {rule.name: rule for rule in self.rules.rules}  # a removed row's rule, for its detail
        if set(self.score_names) & set(_GROUPS["html"]):
            scores.score_html_visible(pa.array(["<p>&amp;&#65;</p>"]))  # html.parser and bs4's tables, once

    def adds(self) -> list[pa.Field]:
        return [pa.field(name, pa.float64()) for name in self.score_names] + (
            NOTEBOOK_FIELDS if self.cfg.notebooks else []
        )

    def __call__(self, table: pa.Table) -> StageOutput:
        unreadable: list[tuple[int, str]] = []
        if self.cfg.notebooks:
            table, unreadable = _convert_notebooks(table)
        text = table.column("content")
        scripts = table.column("notebook_script") if self.cfg.notebooks else None
        if scripts is not None and scripts.null_count < len(scripts):  # (coalesce copies every text)
            text = pc.coalesce(scripts, text)
        text = as_texts(text)  # one contiguous array for every scorer (they would each copy it)
        languages = np.array(pc.fill_null(table.column("language"), "").to_pylist(), dtype=object)
        extensions = np.array(
            [(e or "").lower().lstrip(".") for e in table.column("extension").to_pylist()], dtype=object
        )
        values = self._scores(table, text, languages, extensions)
        for name in self.score_names:
            table = put_column(table, name, pa.array(values[name], pa.float64()))
        reasons = decide(self.rules, values, languages, extensions)
        details = self._details(reasons, values, text)
        for i, why in unreadable:
            reasons[i], details[i] = "notebook_unreadable", why
        return split_by_reason(table, reasons, details)

    def _details(self, reasons: list[str | None], values: dict[str, np.ndarray], text: pa.ChunkedArray) -> list:
        """For each removed row, the test that removed it with the file's value and, for the rules about a line,
        the line's number: `max_line_length 1532 > 1000 (line 17)`. No text: a removed file may hold secrets
        that pii never redacts (the report shows the line only where the removed rows keep their content)."""
        params = self.rules.score_params
        details: list[str | None] = [None] * len(reasons)
        for i, reason in enumerate(reasons):
            rule = self.by_name.get(reason) if reason is not None else None
            if rule is None:
                continue
            value = float(values[rule.score][i])
            limit = f" {rule.value:g}" if isinstance(rule.value, int | float) else ""
            detail = f"{rule.score} {value:g} {rule.op}{limit}"
            line = scores.line_of(rule.score, text[i].as_py() or "", params)
            details[i] = detail + (f" (line {line})" if line else "")
        return details

    def _scores(
        self, table: pa.Table, text: pa.ChunkedArray, languages: np.ndarray, extensions: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Every score the rule set uses, computed only on the rows some rule using it applies to."""
        n, params = table.num_rows, self.rules.score_params
        wanted = set(self.score_names)
        out: dict[str, np.ndarray] = {}

        def rows_for(names: tuple[str, ...]) -> np.ndarray:
            mask = np.zeros(n, dtype=bool)
            for rule in self.rules.rules:
                if rule.score in names and rule.enabled:
                    mask |= applies(rule, languages, extensions)
            return mask

        def compute(names: tuple[str, ...], fn, column: pa.Array | pa.ChunkedArray) -> None:  # noqa: ANN001
            mask = rows_for(names)
            results = [np.full(n, np.nan) for _ in names]
            if mask.any():
                subset = column if mask.all() else column.filter(pa.array(mask))
                got = fn(subset)
                got = got if isinstance(got, tuple) else (got,)
                for result, values in zip(results, got, strict=True):
                    result[mask] = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
            out.update(zip(names, results, strict=True))

        # One compiled pass over every file gives the line, character-class and encoded-run statistics.
        needs_pass = wanted & {*_GROUPS["line_stats"], *_GROUPS["char_fractions"], *_GROUPS["encoded"]}
        stats = scores.text_stats(text) if needs_pass else None

        def with_stats(fn):  # noqa: ANN001, ANN202 - reuse the pass when a scorer gets every row
            return lambda column: fn(column, stats=stats if len(column) == n else None)

        if wanted & set(_GROUPS["line_stats"]):
            compute(_GROUPS["line_stats"], with_stats(scores.score_line_stats), text)
        if wanted & set(_GROUPS["char_fractions"]):
            compute(_GROUPS["char_fractions"], with_stats(scores.score_char_fractions), text)
        if wanted & set(_GROUPS["encoded"]):
            patterns = list(params["encoded_patterns"].values())
            compute(
                _GROUPS["encoded"], with_stats(lambda t, stats: scores.score_encoded(t, patterns, stats=stats)), text
            )
        if wanted & set(_GROUPS["html"]):
            compute(_GROUPS["html"], scores.score_html_visible, text)
        if "num_chars" in wanted:
            compute(("num_chars",), scores.score_num_chars, text)
        if "xml_header" in wanted:
            compute(("xml_header",), scores.score_xml_header, text)
        if "name_allowed" in wanted:
            compute(
                ("name_allowed",),
                lambda p: scores.score_name_allowed(p, params["text_name_contains"], params["text_name_stems"]),
                table.column("path"),
            )
        if "autogenerated" in wanted:
            compute(
                ("autogenerated",),
                lambda t: scores.score_autogen_phrase(t, params["autogen_phrases"], params["autogen_first_lines"]),
                text,
            )
            phrase = out["autogenerated"]
            generated = np.array(pc.fill_null(table.column("is_generated"), False).to_pylist(), dtype=np.float64)
            out["autogenerated"] = np.where(np.isnan(phrase), np.nan, np.maximum(phrase, generated))
        for name in wanted:
            if name.startswith("table:"):
                out[name] = table_score(self.rules.table_scores[name[6:]], self.rules, languages, extensions)
        return out


def _convert_notebooks(table: pa.Table) -> tuple[pa.Table, list[tuple[int, str]]]:
    """Add the notebook columns; return the rows whose notebook could not be read, with the reason."""
    n = table.num_rows
    scripts: list[str | None] = [None] * n
    langs: list[str | None] = [None] * n
    cells: list[list[dict] | None] = [None] * n
    unreadable = []
    is_notebook = pc.or_(
        pc.fill_null(pc.equal(table.column("language"), "Jupyter Notebook"), False),
        pc.fill_null(pc.ends_with(pc.utf8_lower(table.column("path")), ".ipynb"), False),
    )
    for i in np.nonzero(is_notebook.to_numpy(zero_copy_only=False))[0].tolist():
        try:
            nb = notebooks.convert(table.column("content")[i].as_py() or "")
        except ValueError as exc:
            unreadable.append((i, str(exc)))
            continue
        scripts[i], langs[i], cells[i] = nb.script, nb.language, nb.cells
    columns = [
        pa.array(scripts, NOTEBOOK_FIELDS[0].type),
        pa.array(langs, NOTEBOOK_FIELDS[1].type),
        pa.array(cells, NOTEBOOK_FIELDS[2].type),
    ]
    for field, column in zip(NOTEBOOK_FIELDS, columns, strict=True):
        table = put_column(table, field, column)
    return table, unreadable
