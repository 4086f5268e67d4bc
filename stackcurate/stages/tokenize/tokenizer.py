"""StarCoder's tokenizer recipe with HF `tokenizers`: byte-level BPE, digits split one by one, GPT-2's regex.

As BigCode's `train_bpe_tokenizer.py`: `Digits(individual_digits=True)` then `ByteLevel(add_prefix_space=False,
use_regex=True)`, the 256 byte symbols as the initial alphabet, vocabulary 49,152 including the special
tokens, which take the lowest ids in `core/tokens.py` order (`<|endoftext|>` = 0 is bos, eos and unk).
Training text has the special-token strings stripped (BigCode trained on a sample "special-tokens-stripped").

Saved with transformers' `PreTrainedTokenizerFast.save_pretrained`, so `AutoTokenizer.from_pretrained(folder)`
loads it; `train.json` beside it records the settings and the corpus it saw.
"""

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from stackcurate.core import tokens as tk
from stackcurate.core.errors import StackcurateError
from stackcurate.stages.tokenize.encoder import count_words

VOCAB_SIZE = 49_152


# Every special token is `<name>` with no `<` or `>` inside: two occurrences never overlap, and removing one
# can form a new token only across the join it leaves.
_SPECIAL = re.compile("|".join(re.escape(token) for token in tk.SPECIAL_TOKENS))
_LONGEST = max(map(len, tk.SPECIAL_TOKENS))


def strip_special(text: str) -> str:
    """`text` with the special tokens' strings removed one token after the other, in `core/tokens.py` order
    (so a removal that joins the two halves of a later token removes that one too).

    The same as `str.replace` for each token in turn, in one regex pass and a look around each join, instead
    of one scan of the text per token, because the tokenizer's trainer waits for its input while this runs
    (measured: `benchmarks/results/HISTORY.md`, "Second pass on 2026-11-26")."""
    present = set(_SPECIAL.findall(text))
    for token in tk.SPECIAL_TOKENS:
        if token not in present:
            continue
        pieces = text.split(token)
        text = "".join(pieces)
        joined = 0
        for piece in pieces[:-1]:
            joined += len(piece)
            present.update(_SPECIAL.findall(text, max(0, joined - _LONGEST), joined + _LONGEST))
    return text


def _occurrences(counts: dict[str, int], words: int = 8192) -> Iterator[str]:
    """Every word `count` times, space-separated, `words` to a string: the trainer's unit of parallel work,
    whose words it holds at once (one string of all of a frequent word's occurrences would grow with the
    corpus). Empties `counts` as it goes, so the trainer's own table of words grows as this one shrinks."""
    chunk: list[str] = []
    while counts:
        word, count = counts.popitem()
        while count > 0:
            take = min(count, words - len(chunk))
            chunk += [word] * take
            count -= take
            if len(chunk) == words:
                yield " ".join(chunk)
                chunk = []
    if chunk:
        yield " ".join(chunk)


def recipe(vocab_size: int = VOCAB_SIZE) -> tuple[Any, Any]:
    """StarCoder's recipe in HF `tokenizers`: an untrained BPE `Tokenizer` with its pre-tokenizer and decoder,
    and the `BpeTrainer` (vocabulary size, special tokens, the 256 byte symbols)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(tk.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    return tokenizer, trainer


def train(texts: Iterable[str], folder: str | Path, *, vocab_size: int = VOCAB_SIZE, info: dict[str, Any]) -> Any:
    """Train on `texts` and save to `folder` in the HF format; returns the `tokenizers.Tokenizer`."""
    from tokenizers import pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < len(tk.SPECIAL_TOKENS) + 256:
        raise StackcurateError(f"vocab_size must be at least {len(tk.SPECIAL_TOKENS) + 256} (specials + bytes)")
    tokenizer, trainer = recipe(vocab_size)
    words = tokenizer.pre_tokenizer
    # The trainer's merges depend only on each word's count. HF counts them with its regex and an offset table
    # per word, slowly (`kernel.py`), and its Python API takes no counts; so the compiled splitter counts them
    # (`encoder.count_words`), and the trainer reads each byte-level word as often as it occurs, split at
    # spaces, which byte-level characters never are: the same counts, so the same vocabulary and merges.
    counts = count_words((strip_special(t) for t in texts), words)
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator(_occurrences(counts), trainer)
    tokenizer.pre_tokenizer = words
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=tk.EOD,
        eos_token=tk.EOD,
        unk_token=tk.EOD,
        additional_special_tokens=list(tk.SPECIAL_TOKENS[1:]),
    ).save_pretrained(str(folder))
    info = {**info, "vocab_size_requested": vocab_size, "vocab_size": tokenizer.get_vocab_size()}
    (folder / "train.json").write_text(json.dumps(info, indent=1) + "\n")
    return tokenizer


def load(folder: str | Path) -> Any:
    """The `tokenizers.Tokenizer` of an HF tokenizer folder; one-line errors for what is missing."""
    from tokenizers import Tokenizer

    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise StackcurateError(f"{folder} is not a tokenizer folder (no tokenizer.json); train one or fix the path")
    tokenizer = Tokenizer.from_file(str(path))
    if tokenizer.token_to_id(tk.EOD) is None:
        raise StackcurateError(f"the tokenizer in {folder} has no {tk.EOD} token to end documents with")
    return tokenizer


def special_ids(tokenizer: Any) -> dict[str, int]:
    """The ids of the special tokens this tokenizer has."""
    ids = {token: tokenizer.token_to_id(token) for token in tk.SPECIAL_TOKENS}
    return {token: i for token, i in ids.items() if i is not None}
