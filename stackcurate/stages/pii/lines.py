"""Finding the lines of a text that hold a word, fast: the gate of the model and the patterns' keywords.

Python's `re` tries each branch of an alternation at every character, so a regex over a whole file is slow;
`str.find` of a lowercase word is orders of magnitude faster. The patterns and the model's gate look for a few
words first, and run their regexes on the lines that hold one (`benchmarks/pii_throughput.py` times the stage).
"""


def lowered(text: str) -> str:
    """`text` in lower case, letter for letter (the few letters whose lower case is longer, as `İ`, stay), so
    offsets into it are offsets into `text`."""
    low = text.lower()
    return low if len(low) == len(text) else "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def lines_with(text: str, low: str, words: tuple[str, ...]) -> list[int]:
    """The starts of the lines of `text` on which `low` (its `lowered` copy) holds one of `words`, in order."""
    starts = set()
    for word in words:
        at = low.find(word)
        while at >= 0:
            starts.add(text.rfind("\n", 0, at) + 1)
            end = low.find("\n", at)
            at = -1 if end < 0 else low.find(word, end + 1)
    return sorted(starts)
