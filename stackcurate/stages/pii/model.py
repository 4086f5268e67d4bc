"""The PII encoder: a BERT token classifier (BIO tags over the six types) run on the lines that need it.

A 6-layer encoder over every 512-token window of a file is far too slow for a corpus on CPU
(`benchmarks/pii_throughput.py --detectors "both, all lines"` times the shipped model on every line). Two
levers make it affordable, and `pii_model.evaluate` measures what each costs:
- a small model: `pii_model.train` keeps the first layers of MiniLM (3 of 6 by default);
- only the lines that need it: a line goes to the model if it names a person's context (author, signed-off,
  thanks, contact, credits, `@handle`, `by Name`, user/login, `TODO(owner)`) or holds a key's word before a
  long value with a digit (`_KEY_LINE`). Lines longer than `LONG_LINE` characters are cut to the text around
  the trigger. `lines="all"` sends every line instead. Names in copyright lines, manifests and AUTHORS lists,
  emails and passwords are the patterns' job (`recognizers.py`): copyright, email, "created"/"developed" and
  password lines are in the model's training data (`lines="context"`) but not sent to it.

Each line (or cut) is one window: lines are where the training data puts PII, and short windows batch with
little padding. A window longer than `max_tokens` is split with overlap (the tokenizer's overflow).

Tokenization uses `tokenizers` directly (offsets into the original text, even after lower-casing and
accent stripping) and the model is a `transformers` BertForTokenClassification; both live in one folder made
by `stackcurate pii-model train` (see `pii_model/`).
"""

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcurate.core.errors import StackcurateError
from stackcurate.stages.pii.entities import ENTITIES, KEY, NAME, USERNAME
from stackcurate.stages.pii.lines import lines_with, lowered
from stackcurate.stages.pii.rules import MODEL_PREFIX, Span

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

LABELS = ("O", *(f"{tag}-{entity}" for entity in ENTITIES for tag in ("B", "I")))
# What patterns miss. Emails, IPs and passwords are the patterns' job: on the second real set the passwords the
# model added to the patterns' were 16 wrong of 19, its keys all right (`pii_model.real_eval`; `rules.spared_by`
# drops the fragments and constants' names it reads on a key's line).
MODEL_ENTITIES = (NAME, USERNAME, KEY)
LONG_LINE = 400
IGNORE = -100  # label of special tokens (ignored by the loss)
NAME_JOINERS = "-'’"

# At-words of languages and doc comments, not handles: make/batch, CSS/SCSS, JSDoc/Javadoc, test decorators.
AT_WORDS = (
    r"(?:echo|rm|media|include|import|mixin|extend|font-face|keyframes|supports|param|returns?|raises?|throws?|"
    r"type|see|since|example|deprecated|override|name|host|pre|given|settings|property|staticmethod|"
    r"classmethod|dataclass|jupyter|types|babel)\b"
)
# Not `github`/`gitlab`: a forge URL's owner and repository are never redacted (rules.py), and on real code those
# words put every changelog line with a link through the model. Not the `@` of an email either: emails are the
# patterns' job, and the lines with a name beside one have a word here. The gate scans whole texts, so no
# part of it crosses a line (`[^\S\n]`, not `\s`).
_PEOPLE = (
    r"(?i:author|thank|signed-off|contact|credit|(?:todo|fixme)\((?!\))|twitter|reviewed|reported|assignee)"
    r"|(?i:user(?:_?name)?|login)[\"'\]]?[^\S\n]*[:=]"  # `user=...`, `"username": ...`
    r"|(?<![\w.+\-])@(?!" + AT_WORDS + r")\w[\w\-]*\b(?!\.\w|/|\()"  # `@handle`: not an email,
    r"|\b[Bb]y:?[^\S\n]+[^\W\d_a-z]"  # a decorator, `@scope/package` or `@media`; `by Name` (a capital or non-Latin)
)
# A secret's word next to a value-like run.
_SECRET = (
    r"(?i:passw|pwd|\bpass\b|secret|token|api.?key|\bkey\b|auth|credential|bearer|private)"
    r"[^\n]{0,40}?(?:[=:(,]|[^\S\n])(?:[^\S\n]|[\"'`])*[^\s\"'`=:,()\[\]{}<>]{6,}"
)
# Contexts the model is trained on (its training windows are these lines) but not run on, but for the key lines
# of `_KEY_LINE`. On real code the patterns find what they hold (names on copyright lines, emails, passwords
# assigned to secret names) and the model added little there: with them it read much more text for a few more
# spans on held-out sdists (`benchmarks/pii_throughput.py`), and its passwords were mostly wrong.
_TRAINING_ONLY = (
    rf"(?i:copyright|\(c\)|©|created|e-?mail|develop|todo|fixme|contribut|written|owner|maintain|\bcc\b)|{_SECRET}"
)
# A key's line: a secret's word, then a long run with a digit (a literal or an unquoted value), as keys are. The
# looser `_SECRET` sent the model 2.3x the tokens on held-out code for no more keys on the real sets.
_KEY_LINE_WORDS = ("secret", "token", "key", "auth", "credential", "bearer", "private", "access")
_KEY_LINE = (
    r"(?i:secret|token|api.?key|\bkey\b|auth|credential|bearer|private|access)"
    r"[^\n]{0,40}?(?:[=:(,]|[^\S\n])[^\S\n]*[\"'`]?(?=[A-Za-z0-9+/_\-.]{0,80}\d)[A-Za-z0-9+/=_\-.]{16,}"
)
_GATES = {
    "gated": re.compile(f"{_PEOPLE}|{_KEY_LINE}"),
    "context": re.compile(f"{_PEOPLE}|{_TRAINING_ONLY}"),  # what training reads
}
# A word every match of a gate holds, in lower case. Python's `re` tries each branch of an alternation at
# every character (no prefix trie), which is slow; `str.find` of these words is orders of magnitude faster,
# so the gate runs only on the lines that hold one (`lines.py`).
_GATE_WORDS = (
    "author", "thank", "signed-off", "contact", "credit", "todo(", "fixme(", "twitter", "reviewed", "reported",
    "assignee", "user", "login", "@", "by",
)  # fmt: skip
_SECRET_WORDS = ("pass", "pwd", "secret", "token", "key", "auth", "credential", "bearer", "private")
_WORDS = {
    "gated": (*_GATE_WORDS, *_KEY_LINE_WORDS),
    "context": (*_GATE_WORDS, *_SECRET_WORDS, "copyright", "(c)", "©", "created", "mail", "develop", "todo", "fixme",
                "contribut", "written", "owner", "maintain", "cc"),
}  # fmt: skip
_SECRET_LINE = re.compile(_SECRET)
# A heading over a list of people (POD's `=head1 AUTHORS`, Markdown's `## Contributors`, a man page's `.SH AUTHOR`,
# `Thanks:`): the model reads the section's lines, where names stand alone, up to the next heading.
_PEOPLE_HEADING = re.compile(
    r"(?im)^[ \t#*=]*(?:=head\d[ \t]+|\.SH[ \t]+)?"
    r"(?:authors?|maintainers?|contributors?|credits|thanks|acknowledge?ments)(?:\(s\))?[ \t:]*\r?$"
)
# In changelogs and people files the model reads the lines that could hold a name (two capitalised words: a
# capital or a non-Latin letter) or a handle (`@jroe`, `(jroe)`, `[jroe]`); most changelog lines hold neither.
_NAME_OR_HANDLE = re.compile(
    r"[^\W\d_a-z][^\W\d_]*\.?[ \t]+(?:[^\W\d_a-z]\.[ \t]+)?[^\W\d_a-z][^\W\d_]"
    r"|@\w|[(\[][a-z][\w.\-]*[)\]]"
)
_HEADING_WORDS = ("author", "maintainer", "contributor", "credits", "thanks", "acknowledg")  # what a heading holds
_NEXT_HEADING = re.compile(r"(?m)^(?:=\w|#|\.SH\b)")
SECTION_LINES = 20  # non-blank lines of a people section read at most
_DECORATOR = re.compile(r"\s*@[\w.]+(?:\(.*)?\s*$")  # `@property`, `@pytest.mark.parametrize(`: no handle


def line_ranges(text: str, lines: str = "gated") -> list[tuple[int, int]]:
    """The (start, end) character ranges the model reads in `text`: gated lines (cut around the trigger if
    long; `lines="context"` also the lines only training reads), with `lines="listing"` (changelogs, people
    files) every line that could hold a name or a handle, or with `lines="all"` every non-blank line."""
    if lines == "all":
        return [match.span() for match in re.finditer(r"[^\n]*\S[^\n]*", text)]
    if lines == "listing":
        return [
            match.span() for match in re.finditer(r"[^\n]*\S[^\n]*", text)
            if len(match.group()) <= LONG_LINE and _NAME_OR_HANDLE.search(match.group())
        ]  # fmt: skip
    gate, ranges, low = _GATES[lines], [], lowered(text)
    for start in lines_with(text, low, _WORDS[lines]):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        trigger = gate.search(text, start, end)
        if trigger is None:
            continue
        line = text[start:end]
        trigger_at = trigger.start()
        if _DECORATOR.match(line):  # no handle; in training, a secret's value is still a reason
            if lines != "context" or (secret := _SECRET_LINE.search(line)) is None:
                continue
            trigger_at = start + secret.start()
        if end - start > LONG_LINE:
            start, end = max(start, trigger_at - LONG_LINE // 4), min(end, trigger_at + 3 * LONG_LINE // 4)
        ranges.append((start, end))
    return sorted(set(ranges) | set(_section_lines(text, low)))


def _section_lines(text: str, low: str) -> Iterator[tuple[int, int]]:
    """The non-blank lines under each people heading of `text` (`low`: its `lowered` copy), up to the next
    heading."""
    for line in lines_with(text, low, _HEADING_WORDS):
        heading = _PEOPLE_HEADING.match(text, line)
        if heading is None:
            continue
        at, taken = heading.end() + 1, 0
        while at < len(text) and taken < SECTION_LINES and not _NEXT_HEADING.match(text, at):
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            if text[at:end].strip() and end - at <= LONG_LINE:
                taken += 1
                yield at, end
            at = end + 1


@dataclass
class Window:
    """One model input: tokens of `text[offset:...]` (offsets relative to `offset`)."""

    row: int
    offset: int
    ids: list[int]
    offsets: list[tuple[int, int]]
    special: list[int]


def load_tokenizer(folder: str | Path, max_tokens: int) -> "Tokenizer":
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_tokens, stride=min(16, max_tokens // 4))
    return tokenizer


def windows(tokenizer: "Tokenizer", texts: list[str], ranges: list[list[tuple[int, int]]]) -> list[Window]:
    """Tokenize each text's ranges (one batch call); a range longer than the limit gives several windows."""
    where = [(row, start) for row, spans in enumerate(ranges) for start, _ in spans]
    pieces = [texts[row][start:end] for row, spans in enumerate(ranges) for start, end in spans]
    out = []
    for (row, start), encoding in zip(where, tokenizer.encode_batch(pieces), strict=True):
        parts: list[Encoding] = [encoding, *encoding.overflowing]
        for part in parts:
            out.append(Window(row, start, part.ids, part.offsets, part.special_tokens_mask))
    return out


def token_labels(window: Window, spans: list[tuple[str, int, int]]) -> list[int]:
    """BIO label ids of a window's tokens from character spans (entity, start, end) of its text."""
    labels = []
    previous = None
    for (a, b), special in zip(window.offsets, window.special, strict=True):
        if special:
            labels.append(IGNORE)
            previous = None
            continue
        a, b = a + window.offset, b + window.offset
        inside = next((s for s in spans if a < s[2] and b > s[1]), None)
        if inside is None:
            labels.append(0)
        else:
            tag = "I" if previous == inside else "B"
            labels.append(LABELS.index(f"{tag}-{inside[0]}"))
        previous = inside
    return labels


def decode(window: Window, label_ids: list[int], scores: list[float]) -> list[tuple[str, int, int, float]]:
    """Character spans (entity, start, end, mean token score) from a window's predicted labels."""
    spans: list[tuple[str, int, int, float]] = []
    current: list[Any] | None = None  # [entity, start, end, score sum, tokens]
    for (a, b), special, label, score in zip(window.offsets, window.special, label_ids, scores, strict=True):
        tag, _, entity = LABELS[label].partition("-") if not special else ("O", "", "")
        if tag == "B" and entity == NAME and current is not None and current[0] == NAME:
            tag = "I" if window.offset + a - current[2] <= 1 else tag  # `B B` one space apart: one full name
        if current is not None and (tag != "I" or entity != current[0]):
            spans.append((current[0], current[1], current[2], current[3] / current[4]))
            current = None
        if tag == "O":
            continue
        if current is None:  # B, or an I with no B before it
            current = [entity, window.offset + a, window.offset + b, 0.0, 0]
        current[2] = window.offset + b
        current[3] += score
        current[4] += 1
    if current is not None:
        spans.append((current[0], current[1], current[2], current[3] / current[4]))
    return spans


# The longest window of a batch is at most this times its shortest, plus 2 tokens. The model's time is its
# matrix products over padded tokens: bounded by the budget alone, a batch of lines from 5 to 128 tokens read
# 1.9x the real tokens on held-out code (`benchmarks/pii_throughput.py`); with this, 1.09x, in 10.1 s from 18.0.
SPREAD = 1.1


def batches(items: list[Window], batch_tokens: int) -> list[list[int]]:
    """Indices of `items` grouped by similar length (within `SPREAD`), each group at most `batch_tokens` padded
    tokens."""
    order = sorted(range(len(items)), key=lambda i: len(items[i].ids))
    groups: list[list[int]] = []
    for i in order:
        n = len(items[i].ids)
        if groups and (len(groups[-1]) + 1) * n <= batch_tokens and n <= SPREAD * len(items[groups[-1][0]].ids) + 2:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def padded(rows: list[list[int]], fill: int = 0) -> tuple[Any, Any]:
    """(rows as one right-padded long tensor, its attention mask)."""
    import torch

    ids = torch.full((len(rows), max(len(r) for r in rows)), fill, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask


def trained_window(folder: Path, default: int = 128) -> int:
    """The window (tokens) a model folder was trained on, from its `train.json`."""
    try:
        return int(json.loads((folder / "train.json").read_text())["config"]["max_tokens"])
    except (OSError, ValueError, KeyError):
        return default


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class EncoderModel:
    """A trained PII model folder, loaded once, predicting spans for batches of texts."""

    def __init__(
        self,
        folder: str | Path,
        *,
        entities: tuple[str, ...] = MODEL_ENTITIES,
        lines: str = "gated",
        device: str = "auto",
        max_tokens: int | None = None,
        batch_tokens: int = 8192,
    ) -> None:
        folder = Path(folder)
        if not (folder / "config.json").is_file() or not (folder / "tokenizer.json").is_file():
            raise StackcurateError(
                f"pii: {folder} is not a PII model folder; make one with `stackcurate pii-model train --out {folder}`"
            )
        import torch
        import transformers
        from transformers import AutoModelForTokenClassification

        transformers.utils.logging.disable_progress_bar()  # a bar per model load, in every worker: noise
        self.name = folder.name
        self.entities = entities
        self.lines = lines
        self.device = default_device() if device == "auto" else device
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise StackcurateError(f"pii: device {device!r}, but torch sees no GPU here; use --device cpu or auto")
        self.batch_tokens = batch_tokens
        self.tokenizer = load_tokenizer(folder, max_tokens or trained_window(folder))
        self.model = AutoModelForTokenClassification.from_pretrained(folder).to(self.device).eval()
        if tuple(self.model.config.id2label[i] for i in range(len(LABELS))) != LABELS:
            raise StackcurateError(f"pii: {folder} was trained with other labels; retrain it")

    def spans(self, texts: list[str], whole: list[bool] | None = None) -> list[list[Span]]:
        """The model's spans of `self.entities` in each text (before post-processing); it reads every line of
        the texts `whole` marks (people files and changelogs, where names stand without a word before them)."""
        # Each distinct line runs once: a license header or an `Author:` line repeats across a project's files.
        where: dict[str, list[tuple[int, int]]] = {}
        for row, text in enumerate(texts):
            for start, end in line_ranges(text, "listing" if whole and whole[row] else self.lines):
                where.setdefault(text[start:end], []).append((row, start))
        pieces = list(where)
        items = windows(self.tokenizer, pieces, [[(0, len(piece))] for piece in pieces])
        found: list[set[tuple[str, int, int, float]]] = [set() for _ in texts]
        import torch

        for group in batches(items, self.batch_tokens):
            ids, mask = padded([items[i].ids for i in group])
            with torch.inference_mode():
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                probs, labels = logits.float().softmax(-1).max(-1)
            for row, i in enumerate(group):
                n = len(items[i].ids)
                for entity, start, end, score in decode(items[i], labels[row, :n].tolist(), probs[row, :n].tolist()):
                    if entity in self.entities:
                        for text_row, at in where[pieces[items[i].row]]:
                            found[text_row].add((entity, at + start, at + end, score))
        detector = f"{MODEL_PREFIX}{self.name}"
        out = []
        for text, spans in zip(texts, found, strict=True):
            widened = {(entity, *_widen(text, entity, start, end), score) for entity, start, end, score in spans}
            typed = {
                (_retyped(entity, text[start:end], self.entities), start, end, s)
                for entity, start, end, s in widened
                if not (entity == USERNAME and text[start - 1 : start] == "@" and text[end : end + 1] == "/")
            }  # `@acme/docs-team`, `@babel/core`: a team or a package scope, no person's handle
            out.append([Span(e, start, end, score, detector) for e, start, end, score in sorted(typed, key=_order)])
        return out


_LONE_HANDLE = re.compile(r"[a-z][a-z0-9_\-]{2,38}")


def _retyped(entity: str, value: str, entities: tuple[str, ...]) -> str:
    """A NAME that is one lowercase word (`nehaljwani` of `  [nehaljwani]`) is a handle: names are capitalised
    words, handles are not (the model learned both from the same changelog lines)."""
    if entity == NAME and USERNAME in entities and _LONE_HANDLE.fullmatch(value):
        return USERNAME
    return entity


def whole_words(text: str, start: int, end: int, joiners: str = "") -> tuple[int, int]:
    """(start, end) widened to whole words (letters, digits, `_`): a span that stops inside a word (at a
    word-piece boundary, as `jonschlink|ert`) takes the whole word; `joiners` also join words (names:
    `Marc-Andre`, `O'Brien`)."""
    n = len(text)
    word = _word_char
    while start > 0:
        if word(text[start - 1]) and (word(text[start]) or text[start] in joiners):
            start -= 1
        elif text[start - 1] in joiners and start >= 2 and word(text[start - 2]) and word(text[start]):
            start -= 1
        else:
            break
    while end < n:
        if word(text[end]) and (word(text[end - 1]) or text[end - 1] in joiners):
            end += 1
        elif text[end] in joiners and end + 1 < n and word(text[end + 1]) and word(text[end - 1]):
            end += 1
        else:
            break
    return start, end


def _widen(text: str, entity: str, start: int, end: int) -> tuple[int, int]:
    """A model span as whole words; names and usernames without the punctuation at their ends (`. Smith`)."""
    start, end = whole_words(text, start, end, NAME_JOINERS if entity == NAME else "")
    if entity in (NAME, USERNAME):
        while start < end and not _word_char(text[start]):
            start += 1
        while end > start and not _word_char(text[end - 1]) and text[end - 1] != ".":  # `Jr.`, `J.`
            end -= 1
    if entity == NAME:
        if end - 2 > start and _POD_CODE.match(text, end - 2):  # `Jane Roe E<lt>`: POD's code, no initial
            end -= 2
        if text[end - 2 : end] in ("'s", "’s"):  # `Edward Tufte's layout`
            end -= 2
        if text[end - 1 : end] == "." and not _ABBREVIATED.search(text, start, end):  # `Thanks, Jane Roe.`
            end -= 1
        tail = _PARTICLE_THEN_NAME.match(text, end)
        if _ENDS_WITH_PARTICLE.search(text, start, end) and tail:  # `Michael van| Tellingen`
            end = tail.end()
    return start, end


_POD_CODE = re.compile(r"[ \t][BCEFILSXZ]<")
_ABBREVIATED = re.compile(r"(?:\b\w|\b(?:Jr|Sr|Dr|St))\.\Z")  # `J.`, `Jr.`: the period is the name's
_ENDS_WITH_PARTICLE = re.compile(r"\s(?:van|von|der|den|de|da|del|della|di|du|la|le|ten|ter)\Z")
_PARTICLE_THEN_NAME = re.compile(r"[ \t]+[^\W\d_a-z][^\W\d_]+")


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _order(span: tuple[str, int, int, float]) -> tuple[int, int, str]:
    return span[1], span[2], span[0]


def cache_dir() -> Path:
    """Where `stackcurate pii-model train` puts models by default: $STACKCURATE_CACHE or ~/.cache/stackcurate."""
    root = os.environ.get("STACKCURATE_CACHE") or Path.home() / ".cache" / "stackcurate"
    return Path(root) / "pii-model"
