"""License classification and opt-out, as The Stack v2 did (SC2 §2.1; TSv2 3_file_dataset).

Two passes over the same input:
1. `license_scan` finds license-like files by name (go-license-detector's pattern: LICENSE, COPYING,
   README, NOTICE, ...) and records the SPDX ids ScanCode finds in each, with its folder.
2. `license` gives every file a `license_type`:
   - a repository license from GitHub metadata (`gha_license_id`) decides when present: permissive if it is
     in the permissive list, otherwise non_permissive (`NOASSERTION` does not decide, and with no license file
     found it means non_permissive);
   - otherwise the ids detected in license files of the same repository, in the file's folder or any folder
     above it, after dropping amendment ids (and the unknown-license reference when a permissive id is found):
     all permissive -> permissive; none -> no_license; else non_permissive;
   - rows that already carry a `license_type` (The Stack v2 metadata) keep it when `trust_metadata`;
   - rows that carry `detected_licenses` and no type (pull requests and commits: the ids found in their
     repository's license files by ingest) are classified from those ids, as SC2 gave them their repository's.
   Files of opted-out repositories or owners are removed first (reason `opt_out`), then files whose type
   is not in `keep` (reason `license_<type>`).

Input columns: `repo_name`, `path`, `content`, `gha_license_id`, `license_type`, `detected_licenses`.
Output columns: `license_type`, `detected_licenses` (filled); everything else unchanged.
Drop reasons: `opt_out`, `license_non_permissive`, `license_no_license` (when not kept).

What users read (`stackcurate <stage> --help`, with examples) is the stage class's docstring.
"""

import dataclasses
import functools
import json
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from stackcurate.core import io
from stackcurate.core.config import option, output_settings
from stackcurate.core.contract import StageContext, StageOutput, split_by_reason
from stackcurate.core.errors import StackcurateError
from stackcurate.core.paths import filters_dir
from stackcurate.core.records import RecordStage
from stackcurate.core.schema import FILE_KIND, put_column
from stackcurate.core.tables import read_name_list
from stackcurate.stages import license_detect

LICENSE_TYPES = ("permissive", "no_license", "non_permissive")
SCAN_SCHEMA = pa.schema(
    [
        pa.field("repo_name", pa.string()),
        pa.field("folder", pa.string()),
        pa.field("path", pa.string()),
        pa.field("licenses", pa.list_(pa.string())),
    ]
)
_FILTERS = filters_dir() / "licenses"
LICENSE_FILES = str(_FILTERS / "license_file_patterns_v1.txt")  # the-stack-v2's license-like file names


@dataclass(frozen=True, kw_only=True)
class LicenseConfig:
    """License lists, what to keep, and who opted out."""

    permissive: str = option(str(_FILTERS / "permissive_v1.txt"), "permissive SPDX ids, one a line", path=True)
    amendments: str = option(str(_FILTERS / "amendments_v1.txt"), "ids that amend a license, ignored", path=True)
    ignore_if_permissive: str = option(
        str(_FILTERS / "ignore_if_permissive_v1.txt"), "ids ignored when a permissive id is also found", path=True
    )
    detection: str = option("stack_v2", "ScanCode mode: stack_v2 (exact matching, as The Stack v2) or full")
    file_pattern: str = option(LICENSE_FILES, "regex (one line) matching license-like file names", path=True)
    keep: tuple[str, ...] = option(("permissive", "no_license"), "license types to keep (The Stack v2: these two)")
    trust_metadata: bool = option(True, "keep a license_type already in the input (The Stack v2 metadata)")
    opt_out: tuple[str, ...] = option((), "opt-out lists (files or http(s) URLs): owner/repo or owner per line")
    detections: str | None = option(None, "license_scan output to use (default: the run's own license_scan)")
    batch_rows: int = option(1024, "rows per in-memory batch")

    def __post_init__(self) -> None:
        if self.detection not in license_detect.MODES:
            raise ValueError(f"detection must be one of {', '.join(license_detect.MODES)}")
        bad = [k for k in self.keep if k not in LICENSE_TYPES]
        if bad:
            raise ValueError(f"keep: unknown license type '{bad[0]}' (types: {', '.join(LICENSE_TYPES)})")


@functools.cache
def read_pattern(path: str = LICENSE_FILES) -> re.Pattern[str]:
    """The regex of license-like file names in `path` (one line; the-stack-v2's by default)."""
    lines = read_name_list(path, what="license file pattern")
    if len(lines) != 1:
        raise StackcurateError(f"{path} must hold exactly one regex line")
    return re.compile(lines[0], re.IGNORECASE)


class LicenseScanStage(RecordStage):
    """Pass 1: detected licenses of the license-like files (see the module docstring)."""

    name = "license_scan"
    needs = ("repo_name", "path", "content")

    def __init__(self, cfg: LicenseConfig) -> None:
        super().__init__(cfg)
        self.pattern = read_pattern(cfg.file_pattern)

    def schema_after(self, schema: pa.Schema) -> pa.Schema:
        return SCAN_SCHEMA

    def __call__(self, table: pa.Table) -> StageOutput:
        paths = table.column("path").to_pylist()
        hits = [i for i, path in enumerate(paths) if self.pattern.match(PurePosixPath(path or "/").name)]
        if not hits:  # most batches: no file content is converted at all
            return StageOutput(kept=SCAN_SCHEMA.empty_table())
        found = pa.array(hits, pa.int64())
        rows = []
        for i, repo, content in zip(
            hits,
            table.column("repo_name").take(found).to_pylist(),
            table.column("content").take(found).to_pylist(),
            strict=True,
        ):
            if content:
                rows.append(
                    {
                        "repo_name": repo,
                        "folder": str(PurePosixPath(paths[i] or "/").parent),
                        "path": paths[i],
                        "licenses": license_detect.detect(content, self.cfg.detection),
                    }
                )
        return StageOutput(kept=pa.Table.from_pylist(rows, schema=SCAN_SCHEMA))


def scan(cfg: LicenseConfig, ctx: StageContext) -> LicenseConfig:
    """Pass 1 into `<out>/license_scan` (resumable; reused when done), unless `detections` names one."""
    if cfg.detections is not None:
        return cfg
    # The scan reads only license-like files: straight from the content store when ingest runs fused before.
    names = read_pattern(cfg.file_pattern).pattern
    uri = ctx.run_pass("license_scan", functools.partial(LicenseScanStage, cfg), output_settings(cfg), names)
    return dataclasses.replace(cfg, detections=uri)


def read_opt_out(sources: tuple[str, ...]) -> tuple[frozenset[str], frozenset[str]]:
    """(repositories, owners) to remove, lower-cased: `owner/name` lines are repositories, `owner` lines owners."""
    repos, owners = set(), set()
    for source in sources:
        if source.startswith(("http://", "https://")):
            try:
                with urllib.request.urlopen(source, timeout=60) as response:
                    text = response.read().decode()
            except OSError as exc:
                raise StackcurateError(f"could not read the opt-out list {source}: {exc}") from None
        else:
            if not Path(source).is_file():
                raise StackcurateError(f"opt-out list {source} does not exist")
            text = Path(source).read_text(encoding="utf-8")
        for line in text.splitlines():
            name = line.split("#", 1)[0].strip().strip("/").lower()
            if name.startswith("https://github.com/"):
                name = name.removeprefix("https://github.com/")
            if name:
                (repos if "/" in name else owners).add(name)
    return frozenset(repos), frozenset(owners)


class LicenseStage(RecordStage):
    """classify each file's license (permissive, no_license, non_permissive) and apply opt-outs

    Give every file a license_type as The Stack v2 did: the repository's license from GitHub metadata when there
    is one, otherwise the licenses found in the LICENSE, COPYING, README and NOTICE files of the same repository,
    in the file's folder or a folder above it. All permissive: permissive; none found: no_license; anything else:
    non_permissive. Rows whose metadata already carries a license_type keep it (--trust-metadata).

    Pull requests and commits take their repository's license, as StarCoder2's: the licenses ingest found in its
    license files (their detected_licenses), classified the same way. Issues carry no license and pass through.

    Removed, by reason: opt_out (repositories or owners listed in --opt-out), license_<type> (the types not in
    --keep).

    Example:
      stackcurate license --out work/run --opt-out optout.txt --keep permissive no_license
    """

    name = "license"
    mb_per_s = 10  # one core, end to end: the license files' scan
    config = LicenseConfig
    needs = ("repo_name", "path", "content")
    kinds = (FILE_KIND, "pull_request", "commit")  # sources/gharchive, sources/git_history

    @classmethod
    def before_shards(cls, cfg: LicenseConfig, ctx: StageContext) -> LicenseConfig:
        return scan(cfg, ctx)

    def __init__(self, cfg: LicenseConfig) -> None:
        super().__init__(cfg)
        self.permissive = frozenset(i.lower() for i in read_name_list(cfg.permissive, what="license id"))
        self.amendments = frozenset(i.lower() for i in read_name_list(cfg.amendments, what="license id"))
        self.ignore_if_permissive = frozenset(
            i.lower() for i in read_name_list(cfg.ignore_if_permissive, what="license id")
        )
        self.opt_out_repos, self.opt_out_owners = read_opt_out(cfg.opt_out)

    @functools.cached_property
    def found(self) -> dict[str | None, list[tuple[str, list[str]]]]:
        """repo -> [(folder, ids)] from pass 1; loaded by the workers on first use, not when the driver
        builds the stage to check its settings."""
        if self.cfg.detections is None:
            raise StackcurateError("license needs the license_scan output (run through `stackcurate license`)")
        found: dict[str | None, list[tuple[str, list[str]]]] = {}
        fs, root = io.filesystem(self.cfg.detections)
        for path in io.expand(fs, io.join(root, "*.parquet")):
            for row in pq.read_table(path, filesystem=fs).to_pylist():
                found.setdefault(row["repo_name"], []).append((row["folder"], row["licenses"] or []))
        return found

    def adds(self) -> list[pa.Field]:
        return [pa.field("license_type", pa.string()), pa.field("detected_licenses", pa.list_(pa.string()))]

    def classify(self, ids: list[str]) -> str:
        """The Stack v2's rule for the ids detected for one file."""
        ids = [i for i in ids if i.lower() not in self.amendments]
        if any(i.lower() in self.permissive for i in ids):
            ids = [i for i in ids if i.lower() not in self.ignore_if_permissive]
        if not ids:
            return "no_license"
        return "permissive" if all(i.lower() in self.permissive for i in ids) else "non_permissive"

    def file_licenses(self, repo: str | None, path: str) -> list[str]:
        """Ids detected in license files of `repo` in the folder of `path` or above it."""
        parents = {str(p) for p in PurePosixPath(path or "/").parents}
        ids: list[str] = []
        for folder, found in self.found.get(repo, []):
            if folder in parents:
                ids += [i for i in found if i not in ids]
        return ids

    def __call__(self, table: pa.Table) -> StageOutput:
        def column(name: str) -> list:
            return table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows

        repos, paths, gha_ids = column("repo_name"), column("path"), column("gha_license_id")
        kinds, detected = column("license_type"), column("detected_licenses")
        reasons: list[str | None] = []
        details: list[str | None] = []
        for i, (repo, path, gha) in enumerate(zip(repos, paths, gha_ids, strict=True)):
            name = (repo or "").lower()
            if name in self.opt_out_repos or name.split("/", 1)[0] in self.opt_out_owners:
                reasons.append("opt_out")
                details.append(None)
                continue
            if kinds[i] is None and detected[i] is not None:  # a pull request's or commit's repository's own
                kinds[i] = self.classify(detected[i])
            elif not (self.cfg.trust_metadata and kinds[i] in LICENSE_TYPES):
                if gha and gha != "NOASSERTION":
                    kinds[i] = "permissive" if gha.lower() in self.permissive else "non_permissive"
                    detected[i] = [gha]
                else:
                    ids = self.file_licenses(repo, path)
                    kinds[i] = "non_permissive" if gha == "NOASSERTION" and not ids else self.classify(ids)
                    detected[i] = ids
            keep = kinds[i] in self.cfg.keep
            reasons.append(None if keep else f"license_{kinds[i]}")
            details.append(None if keep else json.dumps(detected[i]))
        for field, values in zip(self.adds(), (kinds, detected), strict=True):
            table = put_column(table, field.name, pa.array(values, field.type))
        return split_by_reason(table, reasons, details)
