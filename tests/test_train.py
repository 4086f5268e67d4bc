"""The trainer on CPU: the loss falls, a resumed run repeats the uninterrupted one exactly, the data position
is exact, and checkpoints load with `from_pretrained`."""

import csv
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stackcurate.core.config import build_config
from stackcurate.pipeline import RunOptions, run_stage
from stackcurate.stages import get_stage
from stackcurate.train import data, generate, loop

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """Megatron shards of 80 stdlib modules, tokenized by the stage with a 600-id BPE trained on them."""
    root = tmp_path_factory.mktemp("shards")
    (root / "in").mkdir()
    texts = [p.read_text(encoding="utf-8")[:4000] for p in sorted(STDLIB.glob("*.py"))[:80]]
    table = pa.table({"doc_id": pa.array(range(len(texts)), pa.int64()), "text": pa.array(texts, pa.large_string())})
    pq.write_table(table, root / "in" / "00000.parquet")
    spec = get_stage("tokenize")
    cfg = build_config(spec.config_cls, {"vocab_size": 600})
    run_stage(spec, cfg, str(root / "out"), RunOptions(runner="local", progress=False), input_uri=str(root / "in"))
    return root / "out" / "tokenize" / "megatron"


def _cfg(shards: Path, out: Path, **kw) -> loop.TrainConfig:
    base = dict(data=str(shards), out=str(out), preset="tiny", seq_len=64, micro_batch=4, grad_accum=2, steps=12,
                lr=3e-3, min_lr=3e-4, warmup=3, eval_every=6, eval_batches=2, save_every=6, held_out=0.1)  # fmt: skip
    return loop.TrainConfig(**{**base, **kw})


def _losses(out: Path) -> list[tuple[int, str]]:
    with (out / "metrics.csv").open() as f:
        return [(int(r["step"]), r["loss"]) for r in csv.DictReader(f)]


def test_loss_falls(shards, tmp_path):
    cfg = _cfg(shards, tmp_path / "run", steps=300, micro_batch=8, grad_accum=1, warmup=10, eval_every=300,
               save_every=300)  # fmt: skip
    rows = loop.train(cfg, progress=False)
    first, last = rows[0]["loss"], np.mean([r["loss"] for r in rows[-10:]])
    assert first > 6.0  # about ln(600) at the start
    assert last < 0.8 * first
    assert rows[-1]["val_loss"] is not None and rows[-1]["val_loss"] < 0.8 * first  # on held-out documents


def test_resume_repeats_the_uninterrupted_run(shards, tmp_path):
    loop.train(_cfg(shards, tmp_path / "straight"), progress=False)
    loop.train(_cfg(shards, tmp_path / "resumed", stop_after=6), progress=False)  # "interrupted" at step 6
    assert [s for s, _ in _losses(tmp_path / "resumed")] == list(range(1, 7))
    loop.train(_cfg(shards, tmp_path / "resumed"), progress=False)  # the same command again resumes
    assert _losses(tmp_path / "resumed") == _losses(tmp_path / "straight")
    import torch

    state = torch.load(tmp_path / "resumed" / "checkpoint-12" / "trainer.pt", weights_only=False)
    assert state["step"] == 12 and state["position"] == 12 * 4 * 2  # samples consumed: steps x batch x accum


def test_samples_pack_every_training_token_once_per_epoch(shards):
    store = data.Shards(shards)
    train = data.Samples(store, seq_len=64, seed=3, split="train", held_out=0.1)
    valid = data.Samples(store, seq_len=64, seed=3, split="valid", held_out=0.1)
    assert not set(train.docs) & set(valid.docs) and len(train.docs) + len(valid.docs) == len(store.lengths)
    stream = np.concatenate([train[i][:-1] for i in range(train.per_epoch)])
    train._load_epoch(0)
    expected = np.concatenate([store.document(int(d)) for d in train._order])
    assert np.array_equal(stream, expected[: len(stream)])  # in order, nothing skipped or repeated
    assert len(expected) - len(stream) < 64 + 1  # only the last partial sample is left over
    assert all(np.array_equal(train[i][-1:], train[i + 1][:1]) for i in range(5))  # one-token overlap
    assert not np.array_equal(train[train.per_epoch][:64], train[0][:64])  # the next epoch is reshuffled
    batch = train.batch(10, 4, rank=1, world=2)
    assert [b.tolist() for b in batch] == [train[(10 + k) * 2 + 1].tolist() for k in range(4)]


def test_checkpoint_loads_with_from_pretrained(shards, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loop.train(_cfg(shards, tmp_path / "run", steps=6), progress=False)
    checkpoint = tmp_path / "run" / "checkpoint-6"
    net = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    assert type(net).__name__ == "Starcoder2ForCausalLM"
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    ids = tokenizer("def f(x):\n    return x", return_tensors="pt")["input_ids"]
    again, _ = generate.load(checkpoint)
    with torch.no_grad():
        assert torch.equal(net(ids).logits, again(ids).logits)
    middle = generate.complete(again, tokenizer, "def f(x):\n    ", suffix="\n    return y\n", max_new_tokens=5)
    assert isinstance(middle, str) and "<fim_" not in middle
    assert len(tokenizer(middle, add_special_tokens=False)["input_ids"]) <= 5


def test_train_command_imports_no_pipeline_libraries(shards, tmp_path):
    code = (
        "import sys; from stackcurate.entry import main; "
        f"rc = main(['train', '--data', {str(shards)!r}, '--out', {str(tmp_path / 'run')!r}, '--steps', '2', "
        "'--seq-len', '32', '--micro-batch', '2', '--no-progress']); "
        "print(rc, sorted(m for m in ('ray', 'presidio_analyzer', 'duckdb', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 []"
    assert (tmp_path / "run" / "checkpoint-2" / "model.safetensors").exists()


def test_a_run_folder_of_other_data_is_refused(shards, tmp_path):
    loop.train(_cfg(shards, tmp_path / "run", steps=2, save_every=2), progress=False)
    manifest = json.loads((shards / "manifest.json").read_text())
    assert manifest["documents"] == 80
    with pytest.raises(Exception, match="other data or another preset"):
        loop.train(_cfg(shards, tmp_path / "run", steps=4, preset="small"), progress=False)


@pytest.mark.ray
def test_ray_train_with_two_workers_matches_one_process(shards, tmp_path, ray_local):
    one = loop.train(_cfg(shards, tmp_path / "one", steps=4, micro_batch=8, grad_accum=1), progress=False)
    two = loop.train_on_ray(
        _cfg(shards, tmp_path / "two", steps=4, micro_batch=4, grad_accum=1), workers=2, progress=False
    )  # DDP over Gloo: each rank reads half of the same 8 samples a step, gradients averaged
    assert two and two[-1]["step"] == 4
    straight = [float(loss) for _, loss in _losses(tmp_path / "one")]
    ddp = [float(loss) for _, loss in _losses(tmp_path / "two")]
    assert np.allclose(straight, ddp, rtol=1e-4), (straight, ddp)
    assert one[-1]["step"] == 4 and (tmp_path / "two" / "checkpoint-4" / "trainer.pt").exists()


def _torchrun(shards: Path, out: Path, *extra: str) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun) if torchrun.exists() else "torchrun", "--standalone", "--nproc-per-node", "2",
           "-m", "stackcurate.train.cli", "train", "--data", str(shards), "--out", str(out),
           "--preset", "tiny", "--seq-len", "64", "--micro-batch", "4", "--grad-accum", "1", "--steps", "4",
           "--lr", "3e-3", "--min-lr", "3e-4", "--warmup", "3", "--eval-every", "6", "--save-every", "6",
           "--held-out", "0.1", "--no-progress", *extra]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert got.returncode == 0, got.stderr[-3000:]


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_torchrun_with_two_processes_matches_one_process(shards, tmp_path, mode):
    from transformers import AutoConfig

    loop.train(_cfg(shards, tmp_path / "one", steps=4, micro_batch=8, grad_accum=1), progress=False)
    extra = ["--fsdp"] if mode == "fsdp" else []
    _torchrun(shards, tmp_path / "two", "--stop-after", "2", *extra)  # interrupted after step 2 ...
    _torchrun(shards, tmp_path / "two", *extra)  # ... and resumed: each rank reads its own samples
    straight = [float(loss) for _, loss in _losses(tmp_path / "one")]
    parallel = [float(loss) for _, loss in _losses(tmp_path / "two")]
    assert np.allclose(straight, parallel, rtol=1e-4), (straight, parallel)
    assert AutoConfig.from_pretrained(tmp_path / "two" / "checkpoint-4").architectures == ["Starcoder2ForCausalLM"]


def test_train_on_ray_starts_a_private_ray_unless_given_an_address(monkeypatch, shards, tmp_path):
    """Never a bare `ray.init()`, which joins whatever cluster runs on the machine (issue 16)."""
    import ray

    from stackcurate.core.errors import StackcurateError

    addresses = []

    def fake_init(**kwargs):
        addresses.append(kwargs.get("address"))
        raise RuntimeError("stop here")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = _cfg(shards, tmp_path / "run", steps=2, save_every=2)
    for address in (None, "auto"):
        with pytest.raises(StackcurateError, match="could not start or reach"):
            loop.train_on_ray(cfg, 2, address=address, progress=False)
    assert addresses == ["local", "auto"]
