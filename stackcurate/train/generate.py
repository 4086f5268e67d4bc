"""Completions from a checkpoint: plain left-to-right, or fill-in-the-middle with the FIM tokens.

FIM prompts are PSM, as the format stage writes them: `<fim_prefix>prefix<fim_suffix>suffix<fim_middle>`, and
the model writes the middle until `<|endoftext|>` (or `max_new_tokens`).
"""

from pathlib import Path
from typing import Any

from stackcurate.core.errors import StackcurateError
from stackcurate.core.tokens import EOD, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX


def load(checkpoint: str | Path) -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    from stackcurate.train import checkpoint as checkpoints

    path = Path(checkpoint)
    if not (path / "config.json").is_file():
        raise StackcurateError(f"{checkpoint} is not a checkpoint folder (no config.json); pass checkpoint-<step>")
    if not (path / "tokenizer.json").is_file():
        raise StackcurateError(f"{checkpoint} has no tokenizer.json; copy the run's tokenizer folder into it")
    net, tokenizer = checkpoints.model(path).eval(), AutoTokenizer.from_pretrained(path)  # HF or sharded
    # the model's ids are the manifest's, which are the tokenizer's (a published preset's 49,152 may be more)
    if net.config.vocab_size < len(tokenizer):
        raise StackcurateError(
            f"{checkpoint}: the model has {net.config.vocab_size} token ids but tokenizer.json {len(tokenizer)}; "
            "copy in the tokenizer the shards were made with"
        )
    return net, tokenizer


def complete(
    net: Any, tokenizer: Any, prompt: str, *, suffix: str | None = None, max_new_tokens: int = 64,
    temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop: tuple[str, ...] = (),
) -> str:  # fmt: skip
    """The text the model writes after `prompt` (or between `prompt` and `suffix`, with FIM): greedy with
    `temperature` 0, else sampled (among the `top_k` likeliest tokens, if above 0); see `complete_batch`."""
    return complete_batch(net, tokenizer, [prompt], suffixes=None if suffix is None else [suffix],
                          max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                          seed=seed, stop=stop)[0]  # fmt: skip


def complete_batch(
    net: Any, tokenizer: Any, prompts: list[str], *, suffixes: list[str] | None = None, max_new_tokens: int = 64,
    temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop: tuple[str, ...] = (),
) -> list[str]:  # fmt: skip
    """What the model writes after each prompt (or between each prompt and its suffix, with FIM), generated
    together: the prompts left-padded into one batch.

    A plain prompt is healed: its last token is taken back, and the first tokens written must spell its text
    again, split as the model likes, before going on. A prompt often stops where training text never splits:
    "def main():\\n    " ends in one token of a newline and four spaces, where code has a newline and three
    spaces, then " return"; without healing the model goes on from a token it has barely seen. A row ends early
    once its text holds one of `stop` (the text is returned whole: cutting it is the caller's)."""
    import torch

    if not prompts:
        return []
    eod = tokenizer.convert_tokens_to_ids(EOD)
    special = set(tokenizer.all_special_ids)
    heads, tails = [], []
    for i, prompt in enumerate(prompts):
        fim = suffixes is not None
        text = f"{FIM_PREFIX}{prompt}{FIM_SUFFIX}{suffixes[i]}{FIM_MIDDLE}" if fim else prompt
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] or [eod]  # nothing to complete: a new document
        heal = not fim and len(ids) > 1 and ids[-1] not in special
        heads.append(ids[:-1] if heal else ids)
        tails.append(tokenizer.convert_ids_to_tokens(ids[-1]) if heal else "")
    width = max(len(h) for h in heads)
    every = list(range(len(tokenizer)))
    # byte-level token texts ("ĊĠĠĠ" is a newline and three spaces): the healed tokens, concatenated, begin
    # with the tail's text
    texts = {i: token for token, i in tokenizer.get_vocab().items() if i not in special and token}

    def allowed(row: int, sofar: Any) -> list[int]:
        spelled = "".join(texts.get(i, "") for i in sofar[width:].tolist())
        rest = tails[row][len(spelled) :]
        if not rest:
            return every
        return [i for i, token in texts.items() if token.startswith(rest) or rest.startswith(token)]

    torch.manual_seed(seed)
    ids = torch.tensor([[eod] * (width - len(h)) + h for h in heads])
    mask = torch.tensor([[0] * (width - len(h)) + [1] * len(h) for h in heads])
    with torch.no_grad():
        out = net.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None,
            top_p=top_p if temperature > 0 and top_p < 1.0 else None,
            top_k=top_k if temperature > 0 and top_k > 0 else None,
            eos_token_id=eod,
            pad_token_id=eod,
            prefix_allowed_tokens_fn=allowed if any(tails) else None,
            **({"stop_strings": list(stop), "tokenizer": tokenizer} if stop else {}),
        )
    written = []
    for row, (prompt, head, tail) in enumerate(zip(prompts, heads, tails, strict=True)):
        new = out[row, width:].tolist()
        if eod in new:
            new = new[: new.index(eod)]
        if not tail:
            written.append(tokenizer.decode(new, clean_up_tokenization_spaces=False))
            continue
        text = tokenizer.decode(head + new, clean_up_tokenization_spaces=False)
        written.append(text[len(prompt) :] if text.startswith(prompt) else "")  # "": stopped before the tail
    return written
