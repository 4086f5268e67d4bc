"""Tokenizer and Megatron shards: the BPE recipe round-trips real code, and the shards read back token for
token with an independent reader, with Megatron-Core's reader, and byte for byte as datatrove writes them."""

import json
import sysconfig
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import read_all
from megatron_reader import read as read_megatron

from stackcurate.core import io, megatron
from stackcurate.core import tokens as tk
from stackcurate.core.config import build_config
from stackcurate.core.errors import StackcurateError
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import get_stage
from stackcurate.stages.tokenize import tokenizer as bpe

STDLIB = Path(sysconfig.get_paths()["stdlib"])
NON_ASCII = ["shlex.py", "zipfile.py", "fractions.py", "ftplib.py", "runpy.py"]  # real code with non-ASCII


def _real_code(skip: set[str]) -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py")) if p.name not in skip][:60]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A small BPE (2,000 ids) trained on stdlib modules, none of the files the round trip checks."""
    folder = tmp_path_factory.mktemp("tok")
    bpe.train(_real_code(set(NON_ASCII)), folder, vocab_size=2000, info={"test": True})
    return folder


def test_round_trip_on_unseen_real_code_with_non_ascii(tokenizer_dir):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    for name in NON_ASCII:
        text = (STDLIB / name).read_text(encoding="utf-8")
        assert any(ord(c) > 127 for c in text)
        ids = hf(text, add_special_tokens=False)["input_ids"]
        assert hf.decode(ids) == text
    mixed = "naïve = '日本語'  # ünïcödé 🚀\n\tx = 0x1F<file_sep>"
    assert hf.decode(hf(mixed)["input_ids"]) == mixed


def test_recipe_digits_specials_and_vocabulary(tokenizer_dir):
    tok = bpe.load(tokenizer_dir)
    assert tok.get_vocab_size() == 2000
    assert [tok.token_to_id(t) for t in tk.SPECIAL_TOKENS] == list(range(len(tk.SPECIAL_TOKENS)))
    assert len(tok.encode("x = 1234567", add_special_tokens=False).ids) >= 7  # every digit its own token
    digits = tok.encode("1234567", add_special_tokens=False).tokens
    assert digits == list("1234567")
    assert tok.encode("<fim_prefix>a<fim_suffix>", add_special_tokens=False).ids[0] == 1  # one id, not text
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    assert config["eos_token"] == tk.EOD


def test_a_folder_without_a_tokenizer_is_a_one_line_error(tmp_path):
    with pytest.raises(StackcurateError, match="not a tokenizer folder"):
        bpe.load(tmp_path)


# ---- the Megatron writer ---------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab", [49_152, 65_499, 65_500, 200_000])
def test_writer_dtype_and_independent_reader(tmp_path, vocab):
    dtype = megatron.token_dtype(vocab)
    assert dtype == (np.uint16 if vocab < 65_500 else np.int32)
    rng = np.random.default_rng(vocab)
    docs = [rng.integers(0, vocab, size=n) for n in (5, 1, 300, 17)]
    fs, root = io.filesystem(str(tmp_path))
    written = megatron.write(fs, f"{root}/s", np.concatenate(docs), np.array([len(d) for d in docs]), dtype)
    got = read_megatron(tmp_path / "s")
    assert [g.tolist() for g in got] == [d.tolist() for d in docs]
    assert written.documents == 4 and written.tokens == 323
    assert (tmp_path / "s.idx").stat().st_size == 42 + 20 * 4  # 34 + 12N + 8(N + 1)
    assert (tmp_path / "s.idx").read_bytes()[17] == (8 if vocab < 65_500 else 4)


def test_writer_matches_datatrove_byte_for_byte(tmp_path):
    from datatrove.pipeline.tokens.megatron_tokenizer import MegatronTokenizedFile

    docs = [[5, 6, 7, 0], [9, 0], list(range(1, 400)) + [0]]
    theirs = MegatronTokenizedFile(str(tmp_path / "dt"), "x", token_size=2)
    for d in docs:
        theirs.write(d)
    theirs.close()
    fs, root = io.filesystem(str(tmp_path))
    fs.create_dir(f"{root}/ours")
    megatron.write(fs, f"{root}/ours/x", np.concatenate(docs), np.array([len(d) for d in docs]), np.dtype(np.uint16))
    for suffix in (".bin", ".idx"):
        assert (tmp_path / "ours" / f"x{suffix}").read_bytes() == (tmp_path / "dt" / f"x{suffix}").read_bytes()


# ---- the stage -------------------------------------------------------------------------------------------


def _documents(tmp_path: Path, files: int = 3) -> dict[int, str]:
    """Formatted-looking documents: real stdlib code, with special tokens, spread over `files` inputs."""
    texts = {}
    for i, p in enumerate(sorted(STDLIB.glob("*.py"))[:45]):
        texts[1000 + i] = f"<repo_name>std<file_sep>{p.name}\n" + p.read_text(encoding="utf-8")[:3000]
    folder = tmp_path / "in"
    folder.mkdir(parents=True)
    ids = sorted(texts)
    for part in range(files):
        chunk = ids[part::files]
        text = pa.array([texts[i] for i in chunk], pa.large_string())  # as the format stage writes it
        table = pa.table({"doc_id": pa.array(chunk, pa.int64()), "text": text,
                          "language": ["Python"] * len(chunk)})  # fmt: skip
        pq.write_table(table, folder / f"{part:05d}.parquet")
    return texts


def _tokenize(tmp_path: Path, out: str, opts: RunOptions | None = None, **cfg) -> Path:
    spec = get_stage("tokenize")
    config = build_config(spec.config, cfg)
    run_stage(spec, config, str(tmp_path / out), opts or RunOptions(runner="local", progress=False),
              input_uri=str(tmp_path / "in"))  # fmt: skip
    return tmp_path / out / "megatron"


def _shard_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("shard_*"))}


def test_shards_hold_every_document_token_for_token(tmp_path, tokenizer_dir, monkeypatch):
    from stackcurate.stages import tokenize

    monkeypatch.setattr(tokenize, "ENCODE_CHARS", 5000)  # a batch is encoded in several calls
    texts = _documents(tmp_path)
    folder = _tokenize(tmp_path, "out", tokenizer=str(tokenizer_dir), shard_mb=0.02)
    manifest = json.loads((folder / "manifest.json").read_text())
    tok = bpe.load(tokenizer_dir)
    placed = read_all(folder / "documents").to_pylist()
    assert len(manifest["shards"]) > 1 and manifest["documents"] == len(texts) == len(placed)
    assert manifest["dtype"] == "uint16" and manifest["vocab_size"] == 2000 and manifest["eod_id"] == 0
    assert manifest["special_tokens"]["<file_sep>"] == tk.SPECIAL_TOKENS.index("<file_sep>")
    seen = []
    for shard in manifest["shards"]:
        sequences = read_megatron(folder / shard["shard"])
        assert len(sequences) == shard["documents"] and sum(map(len, sequences)) == shard["tokens"]
        rows = [r for r in placed if f"shard_{r['shard']:05d}" == shard["shard"]]
        for row in rows:
            expected = tok.encode(texts[row["doc_id"]], add_special_tokens=False).ids + [0]
            assert sequences[row["position"]].tolist() == expected
            seen.append(row["doc_id"])
    assert sorted(seen) == sorted(texts)  # every document exactly once
    order = [r["doc_id"] for r in sorted(placed, key=lambda r: (r["shard"], r["position"]))]
    assert order != sorted(order)  # shuffled


def test_megatron_core_reads_the_shards(tmp_path, tokenizer_dir):
    with warnings.catch_warnings():  # megatron-core's import warns about what this test does not use
        warnings.filterwarnings("ignore", "Transformer Engine and Apex are not installed", UserWarning)
        warnings.filterwarnings("ignore", "`torch.jit.script_method` is deprecated", DeprecationWarning)
        warnings.filterwarnings("ignore", "The following imports from `dynamic_context.py`", DeprecationWarning)
        from megatron.core.datasets.indexed_dataset import IndexedDataset

    _documents(tmp_path)
    folder = _tokenize(tmp_path, "out", tokenizer=str(tokenizer_dir))
    ours = read_megatron(folder / "shard_00000")
    theirs = IndexedDataset(str(folder / "shard_00000"))
    assert len(theirs) == len(ours) == 45
    for i, sequence in enumerate(ours):
        assert theirs[i].tolist() == sequence.tolist()


def test_same_shards_for_any_worker_count_and_input_split(tmp_path, tokenizer_dir, ray_local):
    _documents(tmp_path / "a", files=3)
    _documents(tmp_path / "b", files=2)
    local = _shard_files(_tokenize(tmp_path / "a", "out", tokenizer=str(tokenizer_dir), shard_mb=0.02))
    on_ray = _shard_files(
        _tokenize(
            tmp_path / "b",
            "out",
            RunOptions(runner="ray", workers=2, progress=False),
            tokenizer=str(tokenizer_dir),
            shard_mb=0.02,
        )  # fmt: skip
    )
    assert local == on_ray and len(local) > 2
    other_seed = _shard_files(_tokenize(tmp_path / "a", "seed7", tokenizer=str(tokenizer_dir), shard_mb=0.02, seed=7))
    assert other_seed != local


def test_train_on_first_use_then_reuse(tmp_path):
    _documents(tmp_path)
    folder = _tokenize(tmp_path, "out", vocab_size=600)
    trained = tmp_path / "out" / "tokenizer"
    assert json.loads((folder / "manifest.json").read_text())["tokenizer"] == str(trained)
    assert bpe.load(trained).get_vocab_size() == 600
    stamp = (trained / "tokenizer.json").stat().st_mtime_ns
    _tokenize(tmp_path, "out", vocab_size=600)  # a rerun keeps the trained tokenizer
    assert (trained / "tokenizer.json").stat().st_mtime_ns == stamp


def test_the_training_sample_reads_a_file_cut_into_row_ranges_once(tmp_path):
    from stackcurate.core.planning import plan_parquet
    from stackcurate.stages.tokenize import TokenizeConfig, _sample

    texts = [f"def f{i}(x):\n    return x + {i}\n" for i in range(2_500)]
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"doc_id": list(range(2_500)), "text": texts}), tmp_path / "in" / "00000.parquet")
    shards = plan_parquet([str(tmp_path / "in" / "00000.parquet")], rows_per_shard=1_000)
    assert len(shards) == 3  # one file, three row ranges
    assert sorted(_sample(shards, TokenizeConfig())) == sorted(texts)  # each document once


def test_special_tokens_are_stripped_as_one_replace_after_another():
    """The training text loses each special token's string in turn: also a token formed by an earlier removal
    (if its turn is still to come), as `str.replace` in a loop does."""
    import random

    def one_by_one(text: str) -> str:
        for token in tk.SPECIAL_TOKENS:
            text = text.replace(token, "")
        return text

    assert all(t[0] == "<" and t[-1] == ">" and not {"<", ">"} & set(t[1:-1]) for t in tk.SPECIAL_TOKENS)
    assert bpe.strip_special("a<file_sep>b<|endoftext|>") == "ab"
    assert bpe.strip_special(f"<fim_{tk.EOD}prefix>x") == "x"  # removing <|endoftext|> forms <fim_prefix>
    assert bpe.strip_special("<|endof<fim_pad>text|>") == tk.EOD  # formed after its turn: it stays
    rng = random.Random(0)
    pieces = ["<", ">", "a", "é", "<fim_", "prefix>", "<pr", "_status>", "<repo_", "name>", *tk.SPECIAL_TOKENS]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(8)))
        outer = rng.choice(tk.SPECIAL_TOKENS)
        cut = rng.randrange(1, len(outer))
        text += outer[:cut] + rng.choice(tk.SPECIAL_TOKENS) + outer[cut:]
        assert bpe.strip_special(text) == one_by_one(text), text


def test_each_kind_goes_into_the_shards_its_weight_s_times(tmp_path, tokenizer_dir, ray_local):
    """StarCoder2 mixed its sources by epochs (issues, commits and code each their own): issue=2 puts every issue
    in twice, commit=0.5 a seeded half of the commits, and a kind not named goes once; the same for any number of
    workers."""
    texts = _documents(tmp_path, files=2)
    kinds = {doc: ("issue", "commit", "file")[doc % 3] for doc in texts}
    for path in sorted((tmp_path / "in").glob("*.parquet")):
        table = pq.read_table(path)
        pq.write_table(table.append_column("kind", pa.array([kinds[d] for d in table.column("doc_id").to_pylist()])),
                       path)  # fmt: skip
    weights = ["issue=2", "commit=0.5"]
    folder = _tokenize(tmp_path, "out", tokenizer=str(tokenizer_dir), shard_mb=0.02, weights=weights)
    placed = [r["doc_id"] for r in read_all(folder / "documents").to_pylist()]
    times = {doc: placed.count(doc) for doc in texts}
    assert {times[d] for d in texts if kinds[d] == "issue"} == {2}
    assert {times[d] for d in texts if kinds[d] == "file"} == {1}
    commits = [times[d] for d in texts if kinds[d] == "commit"]
    assert set(commits) == {0, 1} and 0.25 < sum(commits) / len(commits) < 0.75
    removed = read_all(tmp_path / "out" / "_removed" / "tokenize").to_pylist()
    assert sorted(r["doc_id"] for r in removed) == sorted(d for d in texts if times[d] == 0)
    assert {(r["reason"], r["detail"]) for r in removed} == {("kind_weight", "commit weight 0.5")}
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["tokens_by_kind"]) == {"issue", "commit", "file"}
    assert sum(manifest["tokens_by_kind"].values()) == manifest["tokens"]
    assert manifest["weights"] == {"issue": 2.0, "commit": 0.5}
    two = _tokenize(tmp_path, "two", RunOptions(runner="ray", workers=2, progress=False),
                    tokenizer=str(tokenizer_dir), shard_mb=0.02, weights=weights)  # fmt: skip
    assert _shard_files(two) == _shard_files(folder)


def test_a_weight_that_is_not_kind_equals_epochs_is_one_line(tmp_path, capsys):
    from stackcurate.cli import main

    assert main(["tokenize", "--out", str(tmp_path), "--weights", "issue:2"]) == 2
    assert "tokenize weights: 'issue:2' must be KIND=EPOCHS" in capsys.readouterr().err
