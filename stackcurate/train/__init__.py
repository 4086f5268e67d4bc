"""The bundled trainer: a StarCoder2-style model trained from the tokenize stage's Megatron shards.

It imports only torch, numpy and transformers (and PyYAML and tqdm, which transformers needs too), never
Ray, presidio, DuckDB or pyarrow, so it runs on a GPU machine that has only those installed: `stackcurate train`
and `stackcurate generate` are dispatched before the rest of the CLI is imported (`stackcurate/cli.py`).

    stackcurate train --data work/demo/megatron --out work/train --preset tiny --steps 200
    torchrun --nproc-per-node 8 -m stackcurate.train.cli train --data ... --out ... --preset 125m
    stackcurate generate work/train/checkpoint-200 --prompt "def fib(n):"
    stackcurate generate work/train/checkpoint-200 --prompt "def f(x):\\n    " --suffix "\\n    return y\\n"
"""
