"""The report's Hugging Face dataset card: a YAML header, then the curation steps that ran, with their numbers."""

from typing import Any

import yaml

from stackcurate.report.summary import SIZES, plural, runs_line


def _size_category(n: int) -> str:
    for limit, name in SIZES:
        if n < limit:
            return name
    return "n>1T"


def card(summary: dict[str, Any]) -> str:
    """A Hugging Face dataset card for the run's final Parquet files (paths relative to the output folder)."""
    final = next((f for f in reversed(summary["funnel"]) if f["stage"] != "tokenize"), summary["funnel"][-1])
    header = {
        "license": "other",
        "language": ["code"],
        "size_categories": [_size_category(final["docs_out"])],
        "task_categories": ["text-generation"],
        "tags": ["code", "stackcurate"],
        "configs": [
            {"config_name": "default", "data_files": [{"split": "train", "path": f"{final['stage']}/*.parquet"}]}
        ],
    }
    steps = "\n".join(f"- **{f['stage']}**: {f['docs_in']:,} in, {f['docs_out']:,} kept, {f['docs_removed']:,} "
                      f"removed, {plural(f['docs_error'], 'error')}" for f in summary["funnel"])  # fmt: skip
    reasons = "\n".join(f"- {r['stage']} / {r['reason']}: {plural(r['docs'], 'file')}"
                        for r in summary["removed_by_reason"])  # fmt: skip
    return (f"---\n{yaml.safe_dump(header, sort_keys=False)}---\n\n# A code dataset curated with stackcurate\n\n"
            f"Files of source code, curated by the stages below ({runs_line(summary['run']['run_ids'])}). The "
            f"final rows are `{final['stage']}/*.parquet` of the output folder (copy this card to its top to publish "
            f"it). Licenses vary by file: see each row's `license_type` and `detected_licenses`.\n\n"
            f"## Curation steps\n\n"
            f"{steps}\n\n## Removed, by reason\n\n{reasons or '- nothing'}\n\nVersions: "
            + ", ".join(f"{k} {v}" for k, v in summary["run"]["versions"].items()) + "\n")  # fmt: skip
