"""Attribution: which training file a piece of text copies, exactly, on the token stream the model trained on.

The index stage (stages/index.py) writes an index of a run's Megatron shards into `<out>/index`: one part per
shard (`build_part`, a shard of the stage, on the run's workers), a suffix array of the shard's token stream, so
any span of tokens that the shards hold is found with its every occurrence, and the file of each token range (its
segments: the repository documents of format are cut at their `<file_sep>` tokens, each piece a file of
`doc_ids`); then `write_catalog` adds each file's repository, path, SWHID or URL, and licenses from the rows
format read, and their text's BM25 index. `Index(folder).attribute(text)` tokenizes a
text with the run's tokenizer and returns its maximal spans of at least `min_tokens` tokens that occur in the
shards, longest first, each with its sources; `Index(folder).search(query)` ranks the files by BM25 (tantivy, MIT),
for near copies and questions in words, as BigCode's search of The Stack did (a quoted query is a phrase).

Why a suffix array over bytes: libdivsufsort (`pydivsufsort`, MIT) builds one in C and searches it in
microseconds, but over bytes; the shard's `.bin` is the token stream as bytes already, so the array is built on
them, and of the matches it finds only those where a token starts count (a match at any other byte would
straddle two tokens).
A hit is then an exact copy of the tokens, never a hash collision (Data Portraits' Bloom filter has both false
positives and a 50-character floor). infini-gram does the same over token ids; its package forbids commercial
use, so this is written here.

The index is resumable (a stage: finished parts are kept) and incremental: a rebuild after the shards changed
takes the suffix array of every shard whose bytes (SHA-256) an earlier part indexed.
"""

import ctypes
import json
import re
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stackcurate.core import megatron
from stackcurate.core.contract import SHARD_DIGITS
from stackcurate.core.errors import StackcurateError
from stackcurate.core.layout import StageDir

FORMAT = "stackcurate-attribution-index"
VERSION = 1
MIN_TOKENS = 16  # about Data Portraits' 50 characters of code
MIN_COPIED = 32  # tokens the text copies of a file, all its spans together, for its spans to be reported
MAX_FILES = 20  # a span more files hold is common text (a license, generated code): it counts for none of them
MAX_OCCURRENCES = 1000  # occurrences of one span looked up for its sources (the count is exact beyond)
SEGMENTS = pa.schema([("start", pa.int64()), ("end", pa.int64()), ("file_id", pa.int64()), ("doc_id", pa.int64())])
FILE_COLUMNS = ("repo_name", "path", "swhid", "origin", "kind", "license_type", "detected_licenses")


FOLDER = "attribution"  # in a run folder: the index (the index stage's rows, in `index/`, are its segments)


def default_folder(out: str | Path) -> Path:
    return Path(out) / FOLDER


def part_folder(folder: str | Path, number: int) -> Path:
    """Part `number`: its suffix array and segments."""
    return Path(folder) / f"part-{number:0{SHARD_DIGITS}d}"


def shard_documents(out: Path, number: int) -> tuple[list[int], dict[int, list[int]]]:
    """The doc_ids of Megatron shard `number` in their order there, and each one's files (format's `doc_ids`)."""
    placement = pq.read_table(out / "megatron" / "documents", filters=[("shard", "=", number)],
                              columns=["position", "doc_id"]).sort_by("position")  # fmt: skip
    doc_ids = placement.column("doc_id").to_pylist()
    wanted = pa.array(doc_ids, pa.int64())
    found: dict[int, list[int]] = {}
    for path in sorted((out / "format").glob("*.parquet")):
        table = pq.read_table(path, columns=["doc_id", "doc_ids"])
        mine = pc.is_in(table.column("doc_id"), value_set=wanted)  # pyright: ignore[reportAttributeAccessIssue]
        table = table.filter(mine)
        for doc_id, members in zip(table.column("doc_id").to_pylist(), table.column("doc_ids").to_pylist(),
                                   strict=True):  # fmt: skip
            found[doc_id] = members or [doc_id]
    if doc_ids and not found:
        raise StackcurateError(f"{out} has no format output to name the shards' documents; run format first")
    return doc_ids, found


def build_part(prefix: Path, folder: Path, sha256: str, doc_ids: list[int], documents: dict[int, list[int]],
               file_sep: int, reuse: Path | None = None) -> tuple[pa.Table, dict[str, Any]]:  # fmt: skip
    """One shard's part: its suffix array, written to `folder`, and the file of each token range (its segments,
    returned). A suffix array of the same shard bytes under `reuse/<sha256>` (an earlier index) is taken, not
    rebuilt."""
    dtype, lengths, _ = megatron.read_index(Path(f"{prefix}.idx").read_bytes(), f"{prefix}.idx")
    data = np.fromfile(f"{prefix}.bin", dtype=np.uint8)
    tokens = data.view(dtype.newbyteorder("<"))
    starts = (np.cumsum(lengths) - lengths).astype(np.int64)
    seps = np.flatnonzero(tokens == file_sep)
    segments: list[tuple[int, int, int, int]] = []
    for start, length, doc_id in zip(starts.tolist(), lengths.tolist(), doc_ids, strict=True):
        members = documents.get(doc_id, [doc_id])
        inside = seps[(seps >= start) & (seps < start + length)].tolist()
        if len(members) > 1 and len(inside) == len(members):  # a repository: each file from its `<file_sep>`
            bounds = [start, *inside[1:], start + length]
            segments += [(bounds[i], bounds[i + 1], members[i], doc_id) for i in range(len(members))]
        else:
            segments.append((start, start + length, members[0], doc_id))
    table = pa.table({n: [s[i] for s in segments] for i, n in enumerate(SEGMENTS.names)}, schema=SEGMENTS)
    folder.mkdir(parents=True, exist_ok=True)
    earlier = reuse / sha256 / "sa.npy" if reuse is not None else None
    partial = folder / "sa.npy.tmp"  # renamed once whole: a worker that dies leaves no half array behind
    if earlier is not None and earlier.is_file():
        shutil.copyfile(earlier, partial)
    else:
        from pydivsufsort import divsufsort

        with partial.open("wb") as f:
            np.save(f, divsufsort(data))
    partial.replace(folder / "sa.npy")
    pq.write_table(table, folder / "segments.parquet")
    info = {"shard": prefix.name, "bin": str(prefix) + ".bin", "bin_sha256": sha256, "dtype": dtype.name,
            "tokens": int(tokens.size), "sequences": int(lengths.size)}  # fmt: skip
    (folder / "part.json").write_text(json.dumps(info))
    return table, info


def write_catalog(
    out: Path,
    folder: Path,
    parts: list[dict[str, Any]],
    min_tokens: int = MIN_TOKENS,
    min_copied: int = MIN_COPIED,
    max_files: int = MAX_FILES,
) -> dict[str, Any]:
    """What the parts share: the tokenizer, the table of files, the BM25 index of their text, and `index.json`
    (written last: an index without it is not one). Returns the index's description."""
    manifest = json.loads((out / "megatron" / "manifest.json").read_text())
    tokenizer = Path(manifest["tokenizer"]) / "tokenizer.json"
    if not tokenizer.is_file():
        tokenizer = out / "tokenizer" / "tokenizer.json"
    shutil.copyfile(tokenizer, folder / "tokenizer.json")
    wanted: set[int] = set()
    for number in range(len(parts)):
        segments = pq.read_table(part_folder(folder, number) / "segments.parquet", columns=["file_id"])
        wanted.update(segments.column("file_id").to_pylist())
    files = _files(out, wanted, folder / "search")
    (folder / "files").mkdir(exist_ok=True)  # a folder of Parquet, as DuckDB and dataframes read one
    pq.write_table(files, folder / "files" / "files.parquet")
    info = {"format": FORMAT, "version": VERSION, "run": str(out.resolve()), "min_tokens": min_tokens,
            "min_copied": min_copied, "max_files": max_files, "eod_id": manifest["eod_id"], "parts": parts,
            "tokens": sum(p["tokens"] for p in parts), "files": files.num_rows}  # fmt: skip
    (folder / "index.json").write_text(json.dumps(info, indent=1))
    return info


FILE_SCHEMA = pa.schema([("doc_id", pa.int64()), ("repo_name", pa.string()), ("path", pa.string()),
                         ("swhid", pa.string()), ("origin", pa.string()), ("kind", pa.string()),
                         ("license_type", pa.string()), ("detected_licenses", pa.list_(pa.string()))])  # fmt: skip


def _files(out: Path, wanted: set[int], search: Path) -> pa.Table:
    """The sources of the files `wanted`, from the rows format read (its input stage), read once: their columns
    for the table, their text into the BM25 index at `search` (rebuilt whole: it is small beside the suffix
    arrays)."""
    import tantivy

    shutil.rmtree(search, ignore_errors=True)
    search.mkdir(parents=True)
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("doc_id", stored=True, indexed=True)
    builder.add_text_field("content", stored=False)
    # a heap of 512 MB: few segments, so little merging (on 840 MB of code, 12 s where the default took 21)
    writer = tantivy.Index(builder.build(), path=str(search)).writer(heap_size=512_000_000)
    source = StageDir(str(out), "format").completion().get("input")
    folder = out / source if source else None
    keys = pa.array(sorted(wanted), pa.int64())
    found = []
    for path in sorted(folder.glob("*.parquet")) if folder and folder.is_dir() else []:
        names = pq.read_schema(path).names
        columns = ["doc_id", "content", *(c for c in FILE_COLUMNS if c in names)]
        for batch in pq.ParquetFile(path).iter_batches(columns=columns, batch_size=1024):
            mine = pc.is_in(batch.column("doc_id"), value_set=keys)  # pyright: ignore[reportAttributeAccessIssue]
            table = pa.Table.from_batches([batch]).filter(mine)
            for doc_id, text in zip(table.column("doc_id").to_pylist(), table.column("content").to_pylist(),
                                    strict=True):  # fmt: skip
                if text:
                    writer.add_document(tantivy.Document(doc_id=doc_id, content=text))
            n = table.num_rows
            found.append(pa.table({f.name: table.column(f.name) if f.name in columns else pa.nulls(n, f.type)
                                   for f in FILE_SCHEMA}).cast(FILE_SCHEMA))  # fmt: skip
    writer.commit()
    writer.wait_merging_threads()
    rows = pa.concat_tables(found) if found else FILE_SCHEMA.empty_table()
    at = pc.index_in(keys, value_set=rows.column("doc_id"))  # pyright: ignore[reportAttributeAccessIssue]
    every = rows.take(at)  # a file no row names: nulls but its doc_id
    return every.set_column(0, FILE_SCHEMA.field("doc_id"), keys)


@dataclass(frozen=True)
class Source:
    """Where a copied span comes from: the file, and the span in it (token offsets in that file's piece)."""

    doc_id: int
    repo_name: str | None
    path: str | None
    swhid: str | None
    origin: str | None
    kind: str | None
    license_type: str | None
    detected_licenses: list[str] | None


@dataclass
class Span:
    """A span of the text that occurs in the shards: character offsets in the text, its tokens, its sources."""

    start: int
    end: int
    tokens: int
    text: str
    occurrences: int  # in the shards (a document trained on twice counts twice)
    documents: int  # distinct files among the occurrences looked up (at most MAX_OCCURRENCES)
    copied: int  # tokens of the first source that the whole text copies (its spans together)
    sources: list[Source] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Search:
    """libdivsufsort's `sa_search` over one text and its suffix array: (how many suffixes start with a pattern,
    the first one's rank). Called through ctypes with the arrays' addresses taken once: pydivsufsort's own
    `sa_search` builds ctypes views of both whole arrays on every call, which took most of a query's time."""

    def __init__(self, data: np.ndarray, sa: np.ndarray) -> None:
        from pydivsufsort import dll

        wide = sa.dtype == np.int64  # a text over 2 GB: the 64-bit build
        self.index = ctypes.c_int64 if wide else ctypes.c_int32
        self.function = dll.libdivsufsort64.sa_search64 if wide else dll.libdivsufsort.sa_search
        self.function.restype = self.index
        self.function.argtypes = [ctypes.c_void_p, self.index, ctypes.c_char_p, self.index, ctypes.c_void_p,
                                  self.index, ctypes.POINTER(self.index)]  # fmt: skip
        self.arrays = (data, sa)  # kept alive: the addresses below point into them
        self.text, self.size = data.ctypes.data if data.size else None, data.size
        self.sa = sa.ctypes.data if sa.size else None

    def __call__(self, pattern: bytes) -> tuple[int, int]:
        if not self.size:
            return 0, 0
        left = self.index()
        count = self.function(self.text, self.size, pattern, len(pattern), self.sa, self.size, ctypes.byref(left))
        if count < 0:
            raise StackcurateError(f"libdivsufsort's search failed ({count})")
        return count, left.value


class _Part:
    def __init__(self, folder: Path, number: int, info: dict[str, Any]) -> None:
        # mapped, not read: a query touches a few pages of each; copy-on-write, as the search takes no read-only
        # array (nothing writes to them)
        empty = Path(info["bin"]).stat().st_size == 0  # a shard with no document: nothing to map
        self.data = np.zeros(0, np.uint8) if empty else np.memmap(info["bin"], dtype=np.uint8, mode="c")
        self.width = np.dtype(info["dtype"]).itemsize
        self.dtype = np.dtype(info["dtype"]).newbyteorder("<")
        sa = part_folder(folder, number) / "sa.npy"
        self.sa = np.load(sa) if empty else np.load(sa, mmap_mode="c")
        self.search = _Search(self.data, self.sa)
        segments = pq.read_table(part_folder(folder, number) / "segments.parquet", columns=["start", "file_id"])
        self.starts = segments.column("start").to_numpy()
        self.files = segments.column("file_id").to_numpy()

    def find(self, ids: np.ndarray) -> np.ndarray:
        """The token offsets where the token sequence `ids` occurs."""
        count, left = self.search(ids.astype(self.dtype).tobytes())
        if not count:
            return np.empty(0, dtype=np.int64)
        found = self.sa[left : left + count]
        return found[found % self.width == 0] // self.width  # where a token starts

    def files_at(self, positions: np.ndarray) -> list[int]:
        return self.files[np.searchsorted(self.starts, positions[:MAX_OCCURRENCES], side="right") - 1].tolist()

    def longest(self, ids: np.ndarray, least: int) -> np.ndarray:
        """For each position of `ids`, how many of its tokens from there on this part holds, where that is at
        least `least` (else 0): its matching statistics. A match from i less its first token is one from i + 1,
        so the search from i + 1 starts at that length."""
        lengths = np.zeros(len(ids), dtype=np.int64)
        known = 0
        for i in range(len(ids) - least + 1):
            low = max(least, known - 1)
            if low == least and not self.find(ids[i : i + least]).size:
                known = 0
                continue
            high = len(ids) - i  # the longest match from i: it holds `low` tokens
            while low < high:
                middle = (low + high + 1) // 2
                low, high = (middle, high) if self.find(ids[i : i + middle]).size else (low, middle - 1)
            lengths[i] = known = low
        return lengths


class Index:
    """An attribution index (see the module docstring), loaded to answer queries."""

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        if not (folder / "index.json").is_file() and (default_folder(folder) / "index.json").is_file():
            folder = default_folder(folder)  # a run folder: its index
        info_path = folder / "index.json"
        if not info_path.is_file():
            raise StackcurateError(f"{folder} is not an attribution index (no index.json); build one with "
                                   "`stackcurate index --out OUT`")  # fmt: skip
        self.info = json.loads(info_path.read_text())
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.parts = [_Part(folder, i, p) for i, p in enumerate(self.info["parts"])]
        files = pq.read_table(folder / "files").to_pylist()
        self.sources = {r["doc_id"]: Source(**r) for r in files}
        self.min_tokens = int(self.info["min_tokens"])
        self.min_copied = int(self.info.get("min_copied", MIN_COPIED))
        self.max_files = int(self.info.get("max_files", MAX_FILES))
        self.folder = folder
        self.searcher: Any = None  # opened by the first search
        self.search_index: Any = None

    def search(self, query: str, limit: int = 10) -> list[tuple[float, Source]]:
        """The files that best match `query` by BM25, best first; a query in double quotes is a phrase. Like
        BigCode's search, the query is cut to 200 characters; its punctuation is not query syntax."""
        import tantivy

        if self.searcher is None:
            index = tantivy.Index.open(str(self.folder / "search"))
            self.searcher, self.search_index = index.searcher(), index
        query = query[:200]
        words = re.sub(r"[^\w]+", " ", query).strip().lower()  # lower: AND, OR, NOT are words, not operators
        if not words:
            return []
        phrase = len(query) > 1 and query.startswith('"') and query.endswith('"')
        parsed = self.search_index.parse_query(f'"{words}"' if phrase else words, ["content"])
        hits = self.searcher.search(parsed, limit).hits
        found = []
        for score, address in hits:
            doc_id = self.searcher.doc(address)["doc_id"][0]
            found.append((float(score), self.sources.get(doc_id) or Source(doc_id, *([None] * 7))))
        return found

    def owned(self, owner: str) -> dict[str, list[Source]]:
        """The files of each repository of `owner` (a GitHub login or organisation) in the set, by repository."""
        found: dict[str, list[Source]] = {}
        for source in self.sources.values():
            name = source.repo_name or ""
            if name.split("/", 1)[0].lower() == owner.lower() and "/" in name:
                found.setdefault(name, []).append(source)
        return {repo: sorted(files, key=lambda f: f.path or "") for repo, files in sorted(found.items())}

    def count(self, ids: np.ndarray) -> int:
        return sum(part.find(ids).size for part in self.parts)

    def attribute(
        self, text: str, min_tokens: int | None = None, min_copied: int | None = None, max_files: int | None = None
    ) -> list[Span]:
        """The maximal spans of `text` of at least `min_tokens` tokens that occur in the shards, longest first,
        those of a file the text copies at least `min_copied` tokens of (0: every span), counting the spans held
        by at most `max_files` files. Each span lists first the files the text copies most of.

        Why: a single span of 16 to 40 tokens of code the set never held is often held by some file anyway (an
        import block, a sentence of a license), while a copied file shows in several spans, or a long one; and a
        span that many files hold (a license header, generated code) says nothing of which one was copied.
        `benchmarks/attribution_eval.py` measures both sides of it."""
        least = min_tokens or self.min_tokens
        copied = self.min_copied if min_copied is None else min_copied
        common = self.max_files if max_files is None else max_files
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        ids, offsets = np.array(encoding.ids, dtype=np.int64), encoding.offsets
        # each part's longest matches, then the longest at each position. In this process one part after the other:
        # threads were slower (benchmarks/README.md); parts on several processes or machines merge the same way.
        per_part = [part.longest(ids, least) for part in self.parts]
        longest = np.max(per_part, axis=0) if per_part else np.zeros(len(ids), dtype=np.int64)
        found: list[tuple[int, int]] = []
        end = 0  # the end of the last span found: a span is kept only if it reaches past it
        for i, length in enumerate(longest.tolist()):
            if length and i + length > end:
                found.append((i, i + length))
                end = i + length
        matches = [(a, b, *self._occurrences(ids[a:b])) for a, b in found]
        tokens: Counter[int] = Counter()  # of each file, what the text copies (its spans may overlap: an upper bound)
        for a, b, _, files in matches:
            if len(files) <= common:
                tokens.update(dict.fromkeys(files, b - a))
        spans = []
        for a, b, occurrences, files in matches:
            ranked = sorted(files, key=lambda f: (-tokens[f], f))
            if tokens[ranked[0]] < copied:
                continue
            start, stop = offsets[a][0], offsets[b - 1][1]
            spans.append(Span(start, stop, b - a, text[start:stop], occurrences, len(files), tokens[ranked[0]],
                              [self.sources.get(f) or Source(f, *([None] * 7)) for f in ranked[:10]]))  # fmt: skip
        return sorted(spans, key=lambda s: (-s.tokens, s.start))

    def _occurrences(self, ids: np.ndarray) -> tuple[int, list[int]]:
        """How many times the shards hold `ids`, and the distinct files of (the first MAX_OCCURRENCES of) them."""
        occurrences, files = 0, []
        for part in self.parts:
            positions = part.find(ids)
            occurrences += positions.size
            files += part.files_at(positions)
        return occurrences, sorted(set(files))
