"""Training and evaluation data for the PII encoder: real code with realistic PII planted where it occurs.

StarPII was trained on 20,961 annotated secrets and pseudo-labelled files that cannot be downloaded here, so
this project makes its own labels. An example is a window of a real source file (whole lines) with one to
three snippets planted at line boundaries, in the file's own comment syntax:
- where PII occurs in practice: author headers, `Signed-off-by`, "written by", "ported by" and contributor
  lines, `@author` tags, `__author__`, TODO owners, GitHub links and @-mentions, string literals and keyword
  arguments (`author="..."`, `password=...`), dict literals, config and `.env` lines, connection strings,
  HTTP headers;
- hard negatives, labelled as nothing: example and placeholder emails, private and documentation IPs,
  version strings, hashes, UUIDs, URLs, paths, `YOUR_API_KEY`-style placeholders, names and emails in
  copyright lines (the annotation scheme's NAME_LICENSE and EMAIL_LICENSE, which StarCoder did not redact),
  DNS servers, identifiers in strings next to "token", prose with "by", cloud resource ids and account ARNs,
  test logins.

Names come in four shapes (`First Last`, a middle initial, a hyphenated first name, two surnames).

Values come from Faker (names in 12 locales, so non-ASCII names too; usernames, emails, IPs) and from
seeded random strings in each token format. Labels are character spans; `train.py` turns them into BIO tags.

The host files are split by repository into disjoint train and eval halves (`split_of`), and the eval set
uses another seed, so the held-out evaluation sees neither the same code nor the same values.

    python -m pii_model.generate --out work/pii/train.parquet --split train --examples 20000 --seed 1
"""

import argparse
import functools
import hashlib
import random
import re
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from stackcurate.core.schema import extension_of
from stackcurate.stages.pii.entities import ENTITIES

LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "pt_BR", "pl_PL", "ru_RU", "ja_JP", "zh_CN", "tr_TR")
COMMENT = {  # extension -> line comment
    "py": "#", "sh": "#", "rb": "#", "pl": "#", "r": "#", "yaml": "#", "yml": "#", "toml": "#", "cfg": "#",
    "c": "//", "h": "//", "cc": "//", "cpp": "//", "hpp": "//", "java": "//", "js": "//", "ts": "//",
    "go": "//", "rs": "//", "cs": "//", "kt": "//", "swift": "//", "scala": "//", "php": "//",
    "sql": "--", "lua": "--", "hs": "--",
}  # fmt: skip
CODE_EXTENSIONS = frozenset(COMMENT)
SCHEMA = pa.schema(
    [
        ("text", pa.string()),
        ("path", pa.string()),
        (
            "spans",
            pa.list_(pa.struct([("entity", pa.string()), ("start", pa.int32()), ("end", pa.int32())])),
        ),
        ("negatives", pa.list_(pa.string())),  # kinds of hard negatives planted (for the evaluation's report)
    ]
)


# Snippets as data. `{NAME}`, `{EMAIL}`... (an entity) is a labelled value; a lower-case field is an unlabelled
# one (`{c}`: the file's line comment, `{q}`: a quote, `{name}`: a name that is not PII here, ...).
CODE_TEMPLATES = (
    "{c} Author: {NAME} <{EMAIL}>\n",
    "{c} Signed-off-by: {NAME} <{EMAIL}>\n",
    "{c} Thanks to {NAME} (@{USERNAME}) for the report.\n",
    "{c} TODO({USERNAME}): handle the empty case\n",
    "{c} @author {NAME}\n",
    "author = {q}{NAME}{q}\nauthor_email = {q}{EMAIL}{q}\n",
    "password = {q}{PASSWORD}{q}\n",
    "client = connect(user={q}{USERNAME}{q}, password={q}{PASSWORD}{q})\n",
    "api_key = {q}{KEY}{q}\n",
    'headers = {"Authorization": "Bearer {KEY}"}\n',
    "SERVER = {q}{IP_ADDRESS}{q}\n",
    "{c} contact {EMAIL} for access\n",
    "{c} Maintained by {NAME} ({USERNAME} on GitHub)\n",
    'url = "mysql://{USERNAME}:{PASSWORD}@db.internal/prod"\n',
    "{c} Written by {NAME} ({EMAIL}).\n",
    "{c} Authors: {NAME}, {NAME}\n",
    "__author__ = {q}{NAME}{q}\n",
    "{c} contributed by {NAME} <{EMAIL}>, added {year}-03-18\n",
    "{c} Ported by {NAME} from https://github.com/{USERNAME}/{word}\n",
    "{c} https://github.com/{USERNAME}/{word}/issues/{number}\n",
    "{c} TODO(@{USERNAME}): {word} {word}\n",
    "{c} Initial idea from @{USERNAME} in {Word}.\n",
)
CONFIG_TEMPLATES = (
    "DB_PASSWORD={PASSWORD}\n",
    "{key_name}={KEY}\n",
    "SMTP_USER={EMAIL}\nSMTP_PASS={PASSWORD}\n",
    "host: {IP_ADDRESS}\nuser: {USERNAME}\n",
    "DATABASE_URL=postgres://{USERNAME}:{PASSWORD}@{IP_ADDRESS}:5432/app\n",
    "admin_email: {EMAIL}\n",
)
NEGATIVE_TEMPLATES = {  # kind -> a line that looks like PII and is labelled as nothing
    "example_email": 'DEFAULT_FROM = "{example_mailbox}@example.com"\n',
    "private_ip": 'bind = "{private_ip}"\n',
    "version": '__version__ = "{version}"\n',
    "hash": 'sha1 = "{sha1}"\n',
    "uuid": 'request_id = "{uuid}"\n',
    "url": "{c} see https://{domain}/docs/{word}\n",
    "path": 'CONFIG = "/etc/{word}/{word}.conf"\n',
    "placeholder": "{placeholder}\n",
    "license_name": "{c} Copyright (c) {year} {name}\n",
    "dns": 'resolver = "{dns}"\n',
    "license_email": "{c} Copyright {year} {name} <{email}>\n",
    "identifier": '{WORD}_TOKEN = intern("{word}")\n',
    "prose_by": "{c} handled by {Word} and not by {WORD}; sorted by {word}\n",
    "cloud_id": '"{Word}::{Word}::{Word}": "{hex16}",\n',
    "account_arn": '"Owner": "arn:aws:sts::{digits12}:assumed-role/{Word}/{Word}",\n',
    "test_login": "client.login(user_id={number}, token=self.{word}_{word})\n",
}
_FIELD = re.compile(r"\{(\w+)\}")


@dataclass
class Snippet:
    """Text to plant, in parts, so that every labelled value's offsets are known."""

    parts: list[tuple[str, str | None]]  # (text, entity or None)
    negative: str | None = None  # the kind of hard negative, if it is one


class Values:
    """Realistic PII values, all drawn from one seeded generator."""

    def __init__(self, seed: int) -> None:
        from faker import Faker

        self.rng = random.Random(seed)
        self.fakers = [Faker(locale) for locale in LOCALES]
        for i, faker in enumerate(self.fakers):
            faker.seed_instance(seed * 1000 + i)
        self.en = self.fakers[0]

    def faker(self):  # noqa: ANN201 - Faker's proxy type
        # Half the names are English, the rest from the other locales.
        return self.en if self.rng.random() < 0.5 else self.rng.choice(self.fakers[1:])

    def name(self) -> str:
        """A full name: mostly `First Last`, some with a middle initial, a hyphenated first name or two surnames."""
        faker = self.faker()
        first, last, style = faker.first_name(), faker.last_name(), self.rng.random()
        if style < 0.1:
            return f"{first} {faker.first_name()[0]}. {last}"
        if style < 0.2:
            return f"{first}-{faker.first_name()} {last}"
        if style < 0.3:
            return f"{first} {faker.last_name()} {last}"
        return f"{first} {last}"

    def username(self) -> str:
        style = self.rng.random()
        if style < 0.6:
            return self.en.user_name()
        first, last = self.en.first_name().lower(), self.en.last_name().lower()
        return self.rng.choice([f"{first[0]}{last}", f"{first}.{last}", f"{first}_{last}{self.rng.randint(1, 99)}"])

    def email(self) -> str:
        r = self.rng.random()
        if r < 0.4:
            return self.en.free_email()
        if r < 0.8:
            return self.en.company_email()
        user = self.username().replace("_", ".")
        return f"{user}@{self.rng.choice(['gmail.com', 'outlook.com', 'proton.me', 'yandex.ru', 'web.de', 'qq.com'])}"

    def public_ip(self) -> str:
        return self.en.ipv6() if self.rng.random() < 0.15 else self.en.ipv4_public()

    def password(self) -> str:
        if self.rng.random() < 0.5:
            return self.en.password(length=self.rng.randint(8, 20), special_chars=self.rng.random() < 0.7)
        word = self.en.word().capitalize()
        return f"{word}{self.rng.randint(1, 9999)}{self.rng.choice('!@#$%&*?')}"

    def makers(self, comment: str) -> dict[str, Callable[[], str]]:
        """What each template field draws: the entities, then unlabelled look-alikes and context."""
        quote = self.rng.choice(['"', "'"])  # one quote style per snippet
        return {
            "NAME": self.name, "EMAIL": self.email, "USERNAME": self.username, "PASSWORD": self.password,
            "KEY": self.key, "IP_ADDRESS": self.public_ip,
            "c": lambda: comment, "q": lambda: quote, "name": self.name, "word": self.en.word,
            "Word": lambda: self.en.word().capitalize(), "WORD": lambda: self.en.word().upper(),
            "email": self.email, "number": lambda: str(self.rng.randint(1, 9999)),
            "hex16": lambda: self.chars("0123456789abcdef", 16), "digits12": lambda: self.chars(string.digits, 12),
            "domain": self.en.domain_name, "uuid": lambda: str(self.en.uuid4()),
            "year": lambda: str(self.rng.randint(1995, 2025)),
            "key_name": lambda: self.rng.choice(["API_KEY", "SECRET_KEY", "STRIPE_KEY", "AUTH_TOKEN"]),
            "example_mailbox": lambda: self.rng.choice(["user", "name", "you", "noreply"]),
            "private_ip": lambda: f"{self.rng.choice(['10.0', '192.168', '172.16'])}.{self.rng.randint(1, 254)}"
            f".{self.rng.randint(1, 254)}",
            "version": lambda: ".".join(str(self.rng.randint(0, n)) for n in (9, 20, 9, 99)),
            "sha1": lambda: self.chars("0123456789abcdef", 40),
            "dns": lambda: self.rng.choice(["8.8.8.8", "1.1.1.1", "9.9.9.9"]),
            "placeholder": lambda: self.rng.choice(
                ['api_key = "YOUR_API_KEY"', 'password = "<password>"', 'token = "${GITHUB_TOKEN}"',
                 'secret = "changeme"']
            ),
        }  # fmt: skip

    def chars(self, alphabet: str, n: int) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def key(self) -> str:
        b62 = string.ascii_letters + string.digits
        kinds: list[Callable[[], str]] = [
            lambda: "AKIA" + self.chars(string.ascii_uppercase + string.digits, 16),
            lambda: self.chars(b62 + "/+", 40),  # AWS secret access key
            lambda: "ghp_" + self.chars(b62, 36),
            lambda: "glpat-" + self.chars(b62 + "-_", 20),
            lambda: "xoxb-" + self.chars(string.digits, 12) + "-" + self.chars(string.digits, 13) + "-"
            + self.chars(b62, 24),
            lambda: "sk_live_" + self.chars(b62, 24),
            lambda: "AIza" + self.chars(b62 + "-_", 35),
            lambda: self.chars(string.hexdigits.lower()[:16], 32),  # generic hex API key
            lambda: self.chars(b62, self.rng.randint(20, 48)),  # generic token
            lambda: "sk-" + self.chars(b62, 48),
        ]  # fmt: skip
        return self.rng.choice(kinds)()


# --- snippets ----------------------------------------------------------------------------------------------


def fill(template: str, values: dict[str, Callable[[], str]]) -> list[tuple[str, str | None]]:
    """The template's parts, each field replaced by a fresh value (labelled if the field is an entity)."""
    parts: list[tuple[str, str | None]] = []
    pos = 0
    for field in _FIELD.finditer(template):
        name = field.group(1)
        parts.append((template[pos : field.start()], None))
        parts.append((values[name](), name if name in ENTITIES else None))
        pos = field.end()
    parts.append((template[pos:], None))
    return [part for part in parts if part[0]]


def snippet(v: Values, comment: str, config: bool) -> Snippet:
    """One snippet: a third are hard negatives; the others put PII where it occurs in real code."""
    values = v.makers(comment)
    if v.rng.random() < 1 / 3:
        kind = v.rng.choice(list(NEGATIVE_TEMPLATES))
        return Snippet(fill(NEGATIVE_TEMPLATES[kind], values), negative=kind)
    return Snippet(fill(v.rng.choice(CONFIG_TEMPLATES if config else CODE_TEMPLATES), values))


# --- examples ----------------------------------------------------------------------------------------------


def split_of(repo: str) -> str:
    """`train` or `eval`, by a hash of the repository: the halves share no code."""
    return "eval" if hashlib.sha1(repo.encode()).digest()[0] % 4 == 0 else "train"


@functools.cache
def host_files(split: str) -> tuple[tuple[str, str], ...]:
    """(path, text) of the real code on this machine (the embedded sample's sources) in `split`."""
    from stackcurate.sample import source_files

    out = []
    for repo, path, full in source_files():
        ext = extension_of(path).lower()
        if ext not in CODE_EXTENSIONS or split_of(repo) != split:
            continue
        try:
            text = full.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.count("\n") >= 10:
            out.append((f"{repo}/{path}", text))
    return tuple(out)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def example(v: Values, path: str, text: str, max_lines: int = 40) -> dict:
    """A window of `text` with 1-3 snippets planted at line boundaries, each line of a snippet at the
    indentation of the line before it."""
    ext = extension_of(path).lower()
    config = ext in ("yaml", "yml", "toml", "cfg") and v.rng.random() < 0.5
    lines = text.splitlines(keepends=True)
    start = v.rng.randrange(max(1, len(lines) - max_lines))
    window = lines[start : start + v.rng.randint(8, max_lines)]
    snippets = [snippet(v, COMMENT[ext], config) for _ in range(v.rng.randint(1, 3))]
    at = sorted(v.rng.randrange(len(window) + 1) for _ in snippets)
    pieces: list[tuple[str, str | None]] = []
    cursor = 0
    for line_index, planted in zip(at, snippets, strict=True):
        indent = _indent(window[line_index - 1]) if line_index > 0 else ""
        pieces.append(("".join(window[cursor:line_index]) + indent, None))
        for piece, entity in planted.parts:
            inner = piece[:-1].replace("\n", "\n" + indent) + piece[-1:] if entity is None else piece
            pieces.append((inner, entity))
        cursor = line_index
    pieces.append(("".join(window[cursor:]), None))
    spans, pos = [], 0
    for piece, entity in pieces:
        if entity is not None:
            spans.append({"entity": entity, "start": pos, "end": pos + len(piece)})
        pos += len(piece)
    return {
        "text": "".join(piece for piece, _ in pieces),
        "path": path,
        "spans": spans,
        "negatives": [s.negative for s in snippets if s.negative],
    }


def generate(split: str, examples: int, seed: int) -> Iterator[dict]:
    files = host_files(split)
    if not files:
        raise SystemExit(f"no host code files for the {split} split")
    v = Values(seed)
    for _ in range(examples):
        path, text = v.rng.choice(files)
        yield example(v, path, text)


def write(out: str | Path, split: str, examples: int, seed: int) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = list(generate(split, examples, seed))
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--split", choices=["train", "eval"], default="train")
    parser.add_argument("--examples", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(write(args.out, args.split, args.examples, args.seed))


if __name__ == "__main__":
    main()
