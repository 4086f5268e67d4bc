"""Fast-LLM's own dataset format (`.fast_llm_dataset`, ServiceNow/Fast-LLM `fast_llm/data/dataset/memmap/`), which it
reads natively; Megatron's `.bin/.idx` it reads with a deprecation warning.

A file is, in order:

    25 bytes  b"fast_llm_prepared_dataset"
    u64 (big-endian, Python's `int.to_bytes` default)  the offset of the reader config
    b"lm begin"                       a language-model section, holding
      b"token begin"                  a token section:
        tokens x T                    every document's token ids, concatenated (the shard's dtype)
        i64 x (N + 1)                 the running sum of document lengths, from 0 (native order: little-endian)
      b"token end"
    b"lm end"
    u32 (big-endian)                  the size of the reader config
    the reader config, JSON           {"type": "language_model", "begin", "end", "tokens": {"type": "token",
                                      "begin", "end", "num_documents", "num_tokens", "data_type"}, and the
                                      optional sections (loss masking and preference spans, image patches,
                                      GRPO data) as {"type": "none"}}

`begin`/`end` are the file offsets of each section, headers and footers included. Beside the shards,
`fast_llm_config.yaml` is the dataset config Fast-LLM's `data: {datasets: {training: {type: file, path: ...}}}`
reads: one `memmap` dataset, or a `blended` one of all shards weighted by their tokens, with their metadata.

Why hand-written: Fast-LLM is not on PyPI and needs Python 3.12; its writer (`MemmapDataset.write_dataset`)
takes its own document objects. This writes the same bytes from a Megatron shard, streaming, through any
pyarrow filesystem, sizes known up front (no seek back, so S3 works).
"""

import json
import uuid
from typing import Any

import numpy as np

from stackcurate.core.errors import StackcurateError

FILE_HEADER = b"fast_llm_prepared_dataset"
LM_HEADER, LM_FOOTER = b"lm begin", b"lm end"
TOKEN_HEADER, TOKEN_FOOTER = b"token begin", b"token end"
OPTIONAL = ("loss_masking_spans", "chosen_spans", "rejected_spans", "image_patches", "advantages",
            "old_log_probabilities")  # fmt: skip
SUFFIX = ".fast_llm_dataset"
CHUNK = 1 << 24


def reader_config(lengths: np.ndarray, dtype: np.dtype) -> dict[str, Any]:
    """The reader config of a file of documents of `lengths` tokens of `dtype`, offsets included."""
    begin = len(FILE_HEADER) + 8
    tokens_begin = begin + len(LM_HEADER)
    tokens = int(lengths.sum())
    tokens_end = tokens_begin + len(TOKEN_HEADER) + tokens * dtype.itemsize + (len(lengths) + 1) * 8
    tokens_end += len(TOKEN_FOOTER)
    config = {"type": "language_model", "begin": begin, "end": tokens_end + len(LM_FOOTER),
              "tokens": {"type": "token", "begin": tokens_begin, "end": tokens_end,
                         "num_documents": len(lengths), "num_tokens": tokens, "data_type": dtype.name}}  # fmt: skip
    return config | {name: {"type": "none"} for name in OPTIONAL}


def write_shard(fs: Any, bin_path: str, lengths: np.ndarray, dtype: np.dtype, out_path: str) -> dict[str, Any]:
    """A Megatron shard (`bin_path`, its documents' `lengths`) as one `.fast_llm_dataset` at `out_path`, written
    under a temporary name and moved into place; returns its reader config."""
    config = reader_config(lengths, dtype)
    blob = json.dumps(config).encode()
    cumsum = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype("<i8")
    tmp = f"{out_path}.tmp-{uuid.uuid4().hex[:8]}"
    with fs.open_output_stream(tmp) as out:
        out.write(FILE_HEADER + config["end"].to_bytes(8, "big") + LM_HEADER + TOKEN_HEADER)
        copied = 0
        with fs.open_input_stream(bin_path) as source:
            while chunk := source.read(CHUNK):
                out.write(chunk)
                copied += len(chunk)
        if copied != config["tokens"]["num_tokens"] * dtype.itemsize:
            raise StackcurateError(f"{bin_path} holds {copied} bytes, not the {len(lengths)} documents its index says")
        out.write(cumsum.tobytes() + TOKEN_FOOTER + LM_FOOTER + len(blob).to_bytes(4, "big") + blob)
    fs.move(tmp, out_path)
    return config


def dataset_config(names: list[str], configs: list[dict[str, Any]]) -> dict[str, Any]:
    """`fast_llm_config.yaml`'s content: the shards (paths relative to it), blended by tokens when several."""
    tokens = [c["tokens"]["num_tokens"] for c in configs]
    metadata = [{"num_tokens": c["tokens"]["num_tokens"], "tokens": {"num_tokens": c["tokens"]["num_tokens"],
                 "num_documents": c["tokens"]["num_documents"], "data_type": c["tokens"]["data_type"]}}
                for c in configs]  # fmt: skip
    datasets = [{"type": "memmap", "path": name} for name in names]
    if len(datasets) == 1:
        return {"config": datasets[0], "metadata": metadata[0]}
    return {"config": {"type": "blended", "datasets": datasets, "weights": tokens},
            "metadata": {"num_tokens": sum(tokens), "tokens": {"num_tokens": sum(tokens),
                         "num_documents": sum(c["tokens"]["num_documents"] for c in configs),
                         "data_type": configs[0]["tokens"]["data_type"]}}}  # fmt: skip


def read(data: bytes) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """(reader config, tokens, document length running sum) of a `.fast_llm_dataset`'s bytes, every header,
    footer and offset checked as Fast-LLM's reader checks them; a one-line error for anything else."""
    if not data.startswith(FILE_HEADER):
        raise StackcurateError("not a Fast-LLM dataset (no fast_llm_prepared_dataset header)")
    at = int.from_bytes(data[len(FILE_HEADER) : len(FILE_HEADER) + 8], "big")
    size = int.from_bytes(data[at : at + 4], "big")
    config = json.loads(data[at + 4 : at + 4 + size])
    token = config["tokens"]
    for begin, end, head, foot in ((config["begin"], config["end"], LM_HEADER, LM_FOOTER),
                                   (token["begin"], token["end"], TOKEN_HEADER, TOKEN_FOOTER)):  # fmt: skip
        if data[begin : begin + len(head)] != head or data[end - len(foot) : end] != foot:
            raise StackcurateError("a Fast-LLM dataset with a section's header or footer out of place")
    dtype = np.dtype(token["data_type"])
    start = token["begin"] + len(TOKEN_HEADER)
    tokens = np.frombuffer(data, dtype=dtype, count=token["num_tokens"], offset=start)
    cumsum = np.frombuffer(data, dtype="<i8", count=token["num_documents"] + 1, offset=start + tokens.nbytes)
    if start + tokens.nbytes + cumsum.nbytes + len(TOKEN_FOOTER) != token["end"]:
        raise StackcurateError("a Fast-LLM dataset whose token section is not its config's size")
    return config, tokens, cumsum
