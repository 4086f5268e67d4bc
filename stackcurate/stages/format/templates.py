"""The published document formats, as pure functions of a row and a random generator.

- StarCoder (BigCode `preprocessing/add_content_with_meta.py`): `<reponame>`, `<filename>` and `<gh_stars>`
  each prepended with probability 0.2, a newline after them if any was, then the code.
- StarCoder2 repository context (SC2 §5.1): a repository's files in random order,
  `<repo_name>name<file_sep>path\\ncode<file_sep>path\\ncode...` with metadata (p = 0.5), else
  `<file_sep>code<file_sep>code...`; the end-of-document token is appended by the tokenizer.
- Fill-in-the-middle (Bavarian et al. 2022, as Megatron-LM's `permute`): two cut points drawn uniformly in
  `[0, len(code)]` (characters), sorted; PSM `<fim_prefix>pre<fim_suffix>suf<fim_middle>mid`, SPM
  `<fim_prefix><fim_suffix>suf<fim_middle>pre mid`. A file's metadata (the path, StarCoder's header) is
  kept whole at the head of the prefix, so it is never cut and `<repo_name>` is never inside a FIM span.
- Jupyter structured (SC2 §2.4): `<jupyter_start>`, then per cell `<jupyter_text>markdown` or
  `<jupyter_code>source<jupyter_output>output` (`<empty_output>` when there is none); or the notebook as a
  script after `<jupyter_script>`.

StarCoder applied FIM online to packed token windows, which can cut through the metadata header; here it is
applied to each file's code before tokenization, so a shuffled shard carries the same FIM on every read.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stackcurate.core import tokens as tk


def star_bucket(stars: int | None) -> str:
    """StarCoder's `<gh_stars>` buckets: 0, 1-10, 10-100, 100-1000, 1000+ (upper bounds inclusive)."""
    if not stars or stars <= 0:
        return "0"
    if stars <= 10:
        return "1-10"
    if stars <= 100:
        return "10-100"
    if stars <= 1000:
        return "100-1000"
    return "1000+"


def fim(head: str, code: str, rng: np.random.Generator, spm_rate: float) -> tuple[str, str]:
    """`head + code` in FIM form; returns (text, "psm" | "spm"). `head` stays whole at the prefix's start."""
    lo, hi = sorted(int(x) for x in rng.integers(0, len(code) + 1, size=2))
    prefix, middle, suffix = head + code[:lo], code[lo:hi], code[hi:]
    if rng.random() < spm_rate:
        return f"{tk.FIM_PREFIX}{tk.FIM_SUFFIX}{suffix}{tk.FIM_MIDDLE}{prefix}{middle}", "spm"
    return f"{tk.FIM_PREFIX}{prefix}{tk.FIM_SUFFIX}{suffix}{tk.FIM_MIDDLE}{middle}", "psm"


def unfim(text: str) -> tuple[str, str, str]:
    """(prefix, middle, suffix) of one FIM span in PSM or SPM form: the inverse of :func:`fim`."""
    if text.startswith(tk.FIM_PREFIX + tk.FIM_SUFFIX):  # SPM: suffix, then prefix + middle run together
        suffix, rest = text[len(tk.FIM_PREFIX + tk.FIM_SUFFIX) :].split(tk.FIM_MIDDLE, 1)
        return "", rest, suffix  # the prefix/middle boundary is not marked in SPM
    body = text.removeprefix(tk.FIM_PREFIX)
    prefix, rest = body.split(tk.FIM_SUFFIX, 1)
    suffix, middle = rest.split(tk.FIM_MIDDLE, 1)
    return prefix, middle, suffix


@dataclass(frozen=True)
class Rates:
    metadata: float  # StarCoder: each field; StarCoder2: the repository's metadata
    fim: float  # StarCoder: each file; StarCoder2: each repository
    fim_file: float  # StarCoder2: each file of a FIM repository
    spm: float


def starcoder_file(
    code: str, repo: str, path: str, stars: int | None, rng: np.random.Generator, rates: Rates
) -> tuple[str, int]:
    """One file in StarCoder's format; returns (text, 1 if FIM'd else 0)."""
    head = ""
    if rng.random() < rates.metadata:
        head += f"{tk.REPONAME}{repo}"
    if rng.random() < rates.metadata:
        head += f"{tk.FILENAME}{path.lstrip('/')}"
    if rng.random() < rates.metadata:
        head += f"{tk.GH_STARS}{star_bucket(stars)}"
    if head:
        head += "\n"
    if rng.random() < rates.fim:
        return fim(head, code, rng, rates.spm)[0], 1
    return head + code, 0


@dataclass(frozen=True)
class RepoFile:
    doc_id: int
    path: str
    code: str


def starcoder2_repo(
    repo: str, files: Sequence[RepoFile], rng: np.random.Generator, rates: Rates, max_chars: int
) -> list[tuple[str, list[int], int]]:
    """A repository in StarCoder2's format, split into documents of about `max_chars` at file boundaries.

    `files` must come in a fixed order (the caller sorts them); the random order is drawn here. Returns
    (text, doc_ids in the text's order, files FIM'd) per document. A file longer than `max_chars` is a
    document of its own; every document of a repository with metadata starts with `<repo_name>`.
    """
    order = rng.permutation(len(files))
    with_meta = rng.random() < rates.metadata
    fim_repo = rng.random() < rates.fim
    header = f"{tk.REPO_NAME}{repo}" if with_meta else ""
    documents: list[tuple[str, list[int], int]] = []
    parts: list[str] = []
    ids: list[int] = []
    size = fimmed = 0
    for i in order.tolist():
        f = files[i]
        head = f"{f.path.lstrip('/')}\n" if with_meta else ""
        if fim_repo and rng.random() < rates.fim_file:
            entry, fimmed_here = tk.FILE_SEP + fim(head, f.code, rng, rates.spm)[0], 1
        else:
            entry, fimmed_here = tk.FILE_SEP + head + f.code, 0
        if parts and size + len(entry) > max_chars:
            documents.append((header + "".join(parts), ids, fimmed))
            parts, ids, size, fimmed = [], [], 0, 0
        parts.append(entry)
        ids.append(f.doc_id)
        size += len(entry)
        fimmed += fimmed_here
    if parts:
        documents.append((header + "".join(parts), ids, fimmed))
    return documents


def jupyter_structured(cells: Sequence[dict[str, str]], max_output_chars: int) -> str:
    """A notebook's cells as StarCoder2's structured Jupyter sequence."""
    parts = [tk.JUPYTER_START]
    for cell in cells:
        source = cell.get("source") or ""
        if cell.get("cell_type") == "markdown":
            parts.append(f"{tk.JUPYTER_TEXT}{source}")
        elif cell.get("cell_type") == "code":
            output = (cell.get("output") or "")[:max_output_chars]
            parts.append(f"{tk.JUPYTER_CODE}{source}{tk.JUPYTER_OUTPUT}{output or tk.EMPTY_OUTPUT}")
    return "".join(parts)


def jupyter_script(script: str) -> str:
    return f"{tk.JUPYTER_SCRIPT}{script}"


def rng_for(seed: int, key: int) -> np.random.Generator:
    """The generator of one document or repository: depends on the seed and the key only, never on order."""
    return np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, key & 0xFFFFFFFFFFFFFFFF])
