"""Language selection: go-enry detection, as The Stack v2 did (SC2 §2.1), then the pipeline's language list.

go-enry (the Go port of GitHub linguist) decides from the file name, extension, shebang, modeline and
content heuristics; `enry-python` binds it, so linguist's rules are not re-implemented here.

Input columns: `path`, `content` (file records). Output columns: `language` (enry's name, null when enry
finds none), `extension`, `is_vendor`, `is_generated`; all other columns pass through.

Drop reasons: `language_unknown` (enry found no language, only when a list is set), `language_not_selected`
(not in the list), `vendor`, `generated` (only when `drop_vendor` / `drop_generated`).

What users read (`stackcurate <stage> --help`, with examples) is the stage class's docstring.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stackcurate.core.config import option
from stackcurate.core.contract import StageOutput, split_by_reason
from stackcurate.core.records import RecordStage
from stackcurate.core.schema import put_column
from stackcurate.core.tables import read_name_list


@dataclass(frozen=True, kw_only=True)
class LanguageConfig:
    """Which languages to keep, and whether vendored or generated files go."""

    languages: str | None = option(
        None,
        "file listing the languages to keep, one enry name a line (under filters/languages/: the shipped list when"
        " no such file is beside the YAML); null keeps every file",
        path=True,
    )
    drop_vendor: bool = option(False, "drop files enry calls vendored (The Stack v2 keeps them, flagged)")
    drop_generated: bool = option(False, "drop files enry calls generated (The Stack v2 keeps them, flagged)")
    batch_rows: int = option(1024, "rows per in-memory batch")


def is_enry_language(name: str) -> bool:
    import enry

    return enry.get_language_type(name) != "unknown"


def detect(table: pa.Table) -> pa.Table:
    """Add enry's `language`, `is_vendor` and `is_generated` (and `extension` where missing) to file records."""
    import enry

    paths = table.column("path").to_pylist()
    contents = table.column("content").to_pylist()
    languages, vendor, generated = [], [], []
    for path, text in zip(paths, contents, strict=True):
        data = (text or "").encode("utf-8", errors="surrogatepass")
        rel = path.lstrip("/")  # enry's vendor/generated rules match repository-relative paths
        languages.append(enry.get_language(rel, data) or None)
        vendor.append(bool(enry.is_vendor(rel)))
        generated.append(bool(enry.is_generated(rel, data)))
    columns = {
        "language": pa.array(languages, pa.string()),
        "is_vendor": pa.array(vendor, pa.bool_()),
        "is_generated": pa.array(generated, pa.bool_()),
    }
    for name, column in columns.items():
        table = put_column(table, name, column)
    return table


# pyarrow.compute functions are generated at import time, so type checkers cannot see them.
def _not_in(values: pa.ChunkedArray, keep: pa.Array) -> pa.ChunkedArray:
    return pc.invert(pc.is_in(values, keep))  # pyright: ignore[reportAttributeAccessIssue]


class LanguageStage(RecordStage):
    """detect each file's language (GitHub linguist's rules) and keep the listed languages

    Detect each file's programming language from its name, extension, shebang and content (go-enry, the Go port
    of GitHub linguist, as The Stack v2 did), mark vendored and generated files, and keep the languages listed in
    --languages (a file with one language name per line).

    Adds the columns language, extension, is_vendor and is_generated.
    Removed, by reason: language_unknown and language_not_selected (when a list is given), vendor and generated
    (with --drop-vendor, --drop-generated).

    Example:
      stackcurate language --out work/run --languages filters/languages/starcoder2_smol_v1.txt
    """

    name = "language"
    mb_per_s = 20  # one core, end to end: go-enry
    config = LanguageConfig
    needs = ("path", "content")

    def __init__(self, cfg: LanguageConfig) -> None:
        super().__init__(cfg)
        self.keep = (
            pa.array(read_name_list(cfg.languages, is_valid=is_enry_language, what="enry language"))
            if cfg.languages
            else None
        )

    def adds(self) -> list[pa.Field]:
        return [
            pa.field("language", pa.string()),
            pa.field("is_vendor", pa.bool_()),
            pa.field("is_generated", pa.bool_()),
        ]

    def __call__(self, table: pa.Table) -> StageOutput:
        table = detect(table)
        rules: list[tuple[str, Callable[[pa.Table], pa.ChunkedArray]]] = []
        if self.keep is not None:
            keep = self.keep
            rules.append(("language_unknown", lambda t: t.column("language").is_null()))
            rules.append(("language_not_selected", lambda t: _not_in(t.column("language"), keep)))
        if self.cfg.drop_vendor:
            rules.append(("vendor", lambda t: t.column("is_vendor")))
        if self.cfg.drop_generated:
            rules.append(("generated", lambda t: t.column("is_generated")))
        reasons: list[str | None] = [None] * table.num_rows
        for reason, rule in rules:  # in order: a row is removed for the first rule that matches it
            for i in np.nonzero(pc.fill_null(rule(table), False).to_numpy(zero_copy_only=False))[0]:
                reasons[i] = reasons[i] or reason
        return split_by_reason(table, reasons)
