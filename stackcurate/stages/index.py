"""The attribution index as a stage after tokenize: one part per Megatron shard, then the catalog.

Its shards are the Megatron shards: each one's part (stackcurate/attribution.py, `build_part`) is its suffix
array and its segments (the file of each token range) in OUT/attribution, the segments also the stage's kept
rows (so DuckDB and the report see them). Once
every part is done, `after_shards` writes what they share (`write_catalog`): the tokenizer, the files' table and
BM25 index, and `index.json`. Parts are resumed like any stage's shards; a rebuild whose shards changed (a rerun
with --overwrite) takes the suffix array of every shard whose bytes an earlier part indexed, set aside by
`before_shards` before the stage's folder is replaced.
"""

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from stackcurate import attribution
from stackcurate.core import tokens as tk
from stackcurate.core.config import option
from stackcurate.core.contract import Shard, Stage, StageContext, StageOutput
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import STATE

NAME = "index"
REUSE = "index-reuse"  # in the run's state folder: suffix arrays of an earlier index, by their shard's SHA-256


@dataclass(frozen=True, kw_only=True)
class IndexConfig:
    """What `attribute` and `serve` report by default."""

    min_tokens: int = option(16, "shortest copied span reported by default, in tokens (about 50 characters of code)")
    min_copied: int = option(
        32, "tokens a text must copy of a file, all its spans together, for its spans to be reported by default "
        "(0: every span; a single short span is more often shared boilerplate than a copy)",
    )  # fmt: skip
    max_files: int = option(
        20, "a span held by more files than this is common text (a license header, generated code): it counts "
        "for none of them",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.min_tokens < 1 or self.min_copied < 0 or self.max_files < 1:
            raise ValueError("min_tokens and max_files must be at least 1, and min_copied at least 0")


def _run_folder(input_uri: str | None) -> Path:
    """The run folder whose Megatron shards are indexed: the one holding the input (tokenize's rows)."""
    if input_uri is None or "://" in input_uri:
        raise StackcurateError(f"index: the attribution index is built in a local run folder, not {input_uri}; "
                               "copy the run's megatron, format and its input stage's folders here first")  # fmt: skip
    out = Path(input_uri).parent
    if not (out / "megatron" / "manifest.json").is_file():
        raise StackcurateError(f"{out} has no Megatron shards (megatron/manifest.json); run tokenize first")
    return out


class IndexStage(Stage):
    """build the attribution index of the shards: which training file a text copies, and its license

    For each Megatron shard, a suffix array of its tokens (the stream the model trains on: a match is a copy of
    those tokens, never a hash collision) and the file of every token range; then each file's repository, path,
    SWHID or URL and licenses, and a BM25 index of their text, in OUT/attribution. A shard is a part, built on
    the run's workers; a rerun resumes, and a rebuild after tokenize changed (--overwrite) reuses the part of
    every shard whose bytes did not change. Query it with `stackcurate attribute OUT` or `stackcurate serve OUT`.
    Its kept rows, in OUT/index, are the token ranges of each file (start, end, file_id, doc_id).

    Examples:
      stackcurate index --out work/run
      stackcurate attribute work/run --file generated.txt
    """

    name = NAME
    config = IndexConfig
    kinds = None
    folders = (attribution.FOLDER,)  # the index itself
    needs = ("doc_id",)  # tokenize's rows; it reads the Megatron shards beside them

    @classmethod
    def plan(cls, cfg: IndexConfig, input_uri: str | None) -> list[Shard]:
        out = _run_folder(input_uri)
        manifest = json.loads((out / "megatron" / "manifest.json").read_text())
        shards = []
        for number, shard in enumerate(manifest["shards"]):
            path = out / "megatron" / f"{shard['shard']}.bin"
            shards.append(
                Shard(index=number, kind="megatron", path=str(path), source_index=number, weight=path.stat().st_size)
            )
        return shards

    @classmethod
    def before_shards(cls, cfg: IndexConfig, ctx: StageContext) -> IndexConfig:
        """Set aside (linked, not copied) the suffix arrays of an index already here, by the SHA-256 of their
        shard's bytes, before the stage's folder may be replaced."""
        out = _run_folder(ctx.input_uri)
        reuse = out / STATE / REUSE
        for done in sorted(attribution.default_folder(out).glob("part-*/part.json")):
            sha256 = json.loads(done.read_text()).get("bin_sha256")
            earlier = done.parent / "sa.npy"
            if sha256 and earlier.is_file() and not (reuse / sha256 / "sa.npy").is_file():
                (reuse / sha256).mkdir(parents=True, exist_ok=True)
                try:
                    os.link(earlier, reuse / sha256 / "sa.npy")
                except OSError:  # a file system without hard links
                    shutil.copyfile(earlier, reuse / sha256 / "sa.npy")
        return cfg

    @classmethod
    def after_shards(cls, cfg: IndexConfig, ctx: StageContext) -> None:
        out = _run_folder(ctx.input_uri)
        folder = attribution.default_folder(out)
        parts = [json.loads((attribution.part_folder(folder, s.index) / "part.json").read_text()) for s in ctx.shards]
        attribution.write_catalog(out, folder, parts, cfg.min_tokens, cfg.min_copied, cfg.max_files)
        shutil.rmtree(out / STATE / REUSE, ignore_errors=True)

    def output_schema(self, shard: Shard) -> pa.Schema:
        return attribution.SEGMENTS

    def read(self, shard: Shard) -> Iterator[pa.Table]:
        bin_path = Path(shard.path)
        out = bin_path.parent.parent
        manifest = json.loads((out / "megatron" / "manifest.json").read_text())
        doc_ids, documents = attribution.shard_documents(out, shard.index)
        segments, _ = attribution.build_part(
            bin_path.with_suffix(""), attribution.part_folder(attribution.default_folder(out), shard.index),
            manifest["shards"][shard.index]["bin_sha256"], doc_ids, documents,
            manifest["special_tokens"].get(tk.FILE_SEP, -1), reuse=out / STATE / REUSE,
        )  # fmt: skip
        yield segments

    def __call__(self, table: pa.Table) -> StageOutput:
        tokens = float(sum(e - s for s, e in zip(table.column("start").to_pylist(), table.column("end").to_pylist(),
                                                  strict=True)))  # fmt: skip
        return StageOutput(kept=table, stats={("tokens", None, None): tokens})
