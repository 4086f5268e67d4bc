"""Completions from a checkpoint: plain left-to-right, or fill-in-the-middle with the FIM tokens.

FIM prompts are PSM, as the format stage writes them: `<fim_prefix>prefix<fim_suffix>suffix<fim_middle>`, and
the model writes the middle until `<|endoftext|>` (or `max_new_tokens`).
"""

from pathlib import Path
from typing import Any

from stackcurate.core.errors import StackcurateError
from stackcurate.core.tokens import EOD, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX


def load(checkpoint: str | Path) -> tuple[Any, Any]:
    from transformers import AutoTokenizer, Starcoder2ForCausalLM

    path = Path(checkpoint)
    if not (path / "config.json").is_file():
        raise StackcurateError(f"{checkpoint} is not a checkpoint folder (no config.json); pass checkpoint-<step>")
    if not (path / "tokenizer.json").is_file():
        raise StackcurateError(f"{checkpoint} has no tokenizer.json; copy the run's tokenizer folder into it")
    return Starcoder2ForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def complete(
    net: Any, tokenizer: Any, prompt: str, *, suffix: str | None = None, max_new_tokens: int = 64,
    temperature: float = 0.0, seed: int = 0,
) -> str:  # fmt: skip
    """The text the model writes after `prompt` (or between `prompt` and `suffix`, with FIM)."""
    import torch

    text = f"{FIM_PREFIX}{prompt}{FIM_SUFFIX}{suffix}{FIM_MIDDLE}" if suffix is not None else prompt
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    torch.manual_seed(seed)
    eod = tokenizer.convert_tokens_to_ids(EOD)
    with torch.no_grad():
        out = net.generate(
            ids,
            max_new_tokens=max_new_tokens,
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None,
            top_p=None,
            top_k=None,
            eos_token_id=eod,
            pad_token_id=eod,
        )
    new = out[0, ids.shape[1] :].tolist()
    if eod in new:
        new = new[: new.index(eod)]
    return tokenizer.decode(new)
