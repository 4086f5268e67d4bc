"""The commands of the models: `pii-model`, `tokenizer`, and `train`/`generate` (listed for --help; the light
trainer CLI runs them, stackcurate/train/cli.py)."""

import argparse
from pathlib import Path
from typing import Any

from stackcurate.core.config import add_flags

PII_EXPORT = """\
Write what training changed in MODEL (trained with frozen embeddings, the default) into the installed
stackcurate package, with its checksums: the model every install then uses (pii: model: auto).
"""


PII_TRAIN = """\
Train the PII model that the pii stage runs besides its patterns: a token classifier over the six types, cut
from all-MiniLM-L6-v2 (the first --layers layers), trained on generated examples of code and prose with planted
PII. The folder it writes holds the model, its tokenizer and train.json (the training config, data sizes,
losses and time); use it with `stackcurate pii --model DIR`, or make it the shipped one with
`stackcurate pii-model export DIR`.

example:
  stackcurate pii-model train --out work/pii/minilm-l3
"""


PII_EVAL = """\
Per-type precision and recall of the PII detectors on a generated, held-out set: the patterns alone, the model
alone (on the lines the stage sends it, and on every line), and both, as the pii stage runs. A span counts as
found only if its type and exact offsets match a planted one, after the rules that spare what StarCoder did
not redact.

examples:
  stackcurate pii-model eval                                  # the shipped model, 1500 generated examples
  stackcurate pii-model eval --model work/pii/minilm-l3 --json work/pii/eval.json
"""


TOKENIZER_TRAIN = """\
Train a byte-level BPE tokenizer with StarCoder's recipe (its special tokens, FIM included) on a seeded sample
of a folder of documents, and save it in the Hugging Face format (AutoTokenizer.from_pretrained reads it; the
tokenize stage takes it as --tokenizer DIR).

example:
  stackcurate tokenizer train --input work/demo/format --out work/tokenizer --vocab-size 49152
"""


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("pii-model", help="train or evaluate the PII encoder model (see pii_model/)")
    model_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    from pii_model import evaluate, train

    t = model_sub.add_parser("train", help="generate training data and train the model", description=PII_TRAIN)
    t.add_argument("--out", required=True, help="model folder to write (use it with `pii --model DIR`)")
    add_flags(t, train.TrainConfig, "training settings")
    t.set_defaults(handler=_cmd_pii_model_train)
    x = model_sub.add_parser(
        "export",
        help="make a trained model folder the one shipped with stackcurate (`pii: model: auto`)",
        description=PII_EXPORT,
    )
    x.add_argument("model", help="a model folder written by `stackcurate pii-model train`")
    x.set_defaults(handler=_cmd_pii_model_export)
    e = model_sub.add_parser("eval", help="per-type precision and recall on the held-out set", description=PII_EVAL)
    evaluate.add_arguments(e)
    e.set_defaults(handler=_cmd_pii_model_eval)

    for name, text in (
        ("train", "train a StarCoder2-style model on the Megatron shards (`stackcurate train --help`)"),
        ("generate", "complete code with a checkpoint, FIM included (`stackcurate generate --help`)"),
        ("export", "a checkpoint (sharded or not) as an HF folder (`stackcurate export --help`)"),
    ):  # handled by stackcurate/cli.py before this parser is built; listed here for --help
        sub.add_parser(name, help=text, add_help=False)

    p = sub.add_parser("tokenizer", help="train a tokenizer (StarCoder's BPE recipe) on a run's documents")
    tok_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    from stackcurate.stages import tokenize

    t = tok_sub.add_parser("train", help="train and save in the HF format", description=TOKENIZER_TRAIN)
    t.add_argument("--input", required=True, help="folder of Parquet with a text (or content) column")
    t.add_argument("--out", required=True, help="tokenizer folder to write (AutoTokenizer.from_pretrained reads it)")
    for name in ("vocab_size", "train_mb", "seed"):
        field = tokenize.TokenizeConfig.__dataclass_fields__[name]
        t.add_argument(f"--{name.replace('_', '-')}", type=type(field.default), default=field.default,
                       help=field.metadata["help"])  # fmt: skip
    t.set_defaults(handler=_cmd_tokenizer_train)


def _cmd_tokenizer_train(args: argparse.Namespace) -> None:
    from pathlib import Path

    from stackcurate.core.planning import plan_records
    from stackcurate.stages import tokenize

    cfg = tokenize.TokenizeConfig(vocab_size=args.vocab_size, train_mb=args.train_mb, seed=args.seed)
    folder = tokenize.train_tokenizer(cfg, plan_records(args.input), args.input, Path(args.out))
    print(folder)


def _cmd_pii_model_train(args: argparse.Namespace) -> None:
    from pii_model import train

    print(train.train(train.config_from(args), args.out))


def _cmd_pii_model_export(args: argparse.Namespace) -> None:
    from stackcurate.stages.pii import shipped

    print(shipped.export(Path(args.model)))


def _cmd_pii_model_eval(args: argparse.Namespace) -> None:
    from pii_model import evaluate

    evaluate.run(args)
