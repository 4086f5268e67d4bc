"""Training and evaluation data for the PII encoder: real code with realistic PII planted where it occurs.

StarPII was trained on 20,961 annotated secrets and pseudo-labelled files that cannot be downloaded here, so
this project makes its own labels. An example is a window of a real source file (whole lines) with one to
three snippets planted at line boundaries, in the file's own comment syntax:
- where PII occurs in practice: author headers, `Signed-off-by` and contributor lines, `@author` tags,
  TODO owners, string literals and keyword arguments (`author="..."`, `password=...`), dict literals, config
  and `.env` lines, connection strings, HTTP headers;
- hard negatives, labelled as nothing: example and placeholder emails, private and documentation IPs,
  version strings, hashes, UUIDs, URLs, paths, `YOUR_API_KEY`-style placeholders, names in copyright lines
  (the annotation scheme's NAME_LICENSE, which StarCoder did not redact).

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
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ENTITIES = ("EMAIL", "IP_ADDRESS", "KEY", "PASSWORD", "NAME", "USERNAME")
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


@dataclass
class Snippet:
    """Text to plant, built piece by piece so that every labelled value's offsets are known."""

    parts: list[tuple[str, str | None]] = field(default_factory=list)  # (text, entity or None)
    negative: str | None = None

    def add(self, text: str, entity: str | None = None) -> "Snippet":
        self.parts.append((text, entity))
        return self


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
        faker = self.faker()
        return f"{faker.first_name()} {faker.last_name()}"

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


def positive(v: Values, c: str, config: bool) -> Snippet:
    """One snippet with PII, in a context where it occurs in real code."""
    s = Snippet()
    if config:
        kind = v.rng.randrange(6)
        if kind == 0:
            return s.add("DB_PASSWORD=").add(v.password(), "PASSWORD").add("\n")
        if kind == 1:
            return (
                s.add(v.rng.choice(["API_KEY", "SECRET_KEY", "STRIPE_KEY", "AUTH_TOKEN"]) + "=")
                .add(v.key(), "KEY")
                .add("\n")
            )
        if kind == 2:
            return (
                s.add("SMTP_USER=").add(v.email(), "EMAIL").add("\nSMTP_PASS=").add(v.password(), "PASSWORD").add("\n")
            )
        if kind == 3:
            return (
                s.add("host: ")
                .add(v.public_ip(), "IP_ADDRESS")
                .add("\nuser: ")
                .add(v.username(), "USERNAME")
                .add("\n")
            )
        if kind == 4:
            return (
                s.add("DATABASE_URL=postgres://")
                .add(v.username(), "USERNAME")
                .add(":")
                .add(v.password(), "PASSWORD")
                .add("@")
                .add(v.public_ip(), "IP_ADDRESS")
                .add(":5432/app\n")
            )
        return s.add("admin_email: ").add(v.email(), "EMAIL").add("\n")
    kind = v.rng.randrange(14)
    q = v.rng.choice(['"', "'"])
    if kind == 0:
        return s.add(f"{c} Author: ").add(v.name(), "NAME").add(" <").add(v.email(), "EMAIL").add(">\n")
    if kind == 1:
        return s.add(f"{c} Signed-off-by: ").add(v.name(), "NAME").add(" <").add(v.email(), "EMAIL").add(">\n")
    if kind == 2:
        return (
            s.add(f"{c} Thanks to ")
            .add(v.name(), "NAME")
            .add(" (@")
            .add(v.username(), "USERNAME")
            .add(") for the report.\n")
        )
    if kind == 3:
        return s.add(f"{c} TODO(").add(v.username(), "USERNAME").add("): handle the empty case\n")
    if kind == 4:
        return s.add(f"{c} @author ").add(v.name(), "NAME").add("\n")
    if kind == 5:
        return (
            s.add(f"author = {q}")
            .add(v.name(), "NAME")
            .add(f"{q}\nauthor_email = {q}")
            .add(v.email(), "EMAIL")
            .add(f"{q}\n")
        )
    if kind == 6:
        return s.add(f"password = {q}").add(v.password(), "PASSWORD").add(f"{q}\n")
    if kind == 7:
        return (
            s.add(f"client = connect(user={q}")
            .add(v.username(), "USERNAME")
            .add(f"{q}, password={q}")
            .add(v.password(), "PASSWORD")
            .add(f"{q})\n")
        )
    if kind == 8:
        return s.add(f"api_key = {q}").add(v.key(), "KEY").add(f"{q}\n")
    if kind == 9:
        return s.add('headers = {"Authorization": "Bearer ').add(v.key(), "KEY").add('"}\n')
    if kind == 10:
        return s.add(f"SERVER = {q}").add(v.public_ip(), "IP_ADDRESS").add(f"{q}\n")
    if kind == 11:
        return s.add(f"{c} contact ").add(v.email(), "EMAIL").add(" for access\n")
    if kind == 12:
        return (
            s.add(f"{c} Maintained by ")
            .add(v.name(), "NAME")
            .add(" (")
            .add(v.username(), "USERNAME")
            .add(" on GitHub)\n")
        )
    return (
        s.add('url = "mysql://')
        .add(v.username(), "USERNAME")
        .add(":")
        .add(v.password(), "PASSWORD")
        .add('@db.internal/prod"\n')
    )


def negative(v: Values, c: str) -> Snippet:
    """One hard negative: looks like PII, labelled as nothing."""
    kind = v.rng.randrange(10)
    s = Snippet(negative=["example_email", "private_ip", "version", "hash", "uuid", "url", "path", "placeholder",
                          "license_name", "dns"][kind])  # fmt: skip
    if kind == 0:
        return s.add(f'DEFAULT_FROM = "{v.rng.choice(["user", "name", "you", "noreply"])}@example.com"\n')
    if kind == 1:
        prefix = v.rng.choice(["10.0", "192.168", "172.16"])
        return s.add(f'bind = "{prefix}.{v.rng.randint(1, 254)}.{v.rng.randint(1, 254)}"\n')
    if kind == 2:
        parts = [v.rng.randint(0, 9), v.rng.randint(0, 20), v.rng.randint(0, 9), v.rng.randint(0, 99)]
        return s.add(f'__version__ = "{".".join(map(str, parts))}"\n')
    if kind == 3:
        return s.add(f'sha1 = "{v.chars("0123456789abcdef", 40)}"\n')
    if kind == 4:
        return s.add(f'request_id = "{v.en.uuid4()}"\n')
    if kind == 5:
        return s.add(f"{c} see https://{v.en.domain_name()}/docs/{v.en.word()}\n")
    if kind == 6:
        return s.add(f'CONFIG = "/etc/{v.en.word()}/{v.en.word()}.conf"\n')
    if kind == 7:
        return s.add(v.rng.choice(['api_key = "YOUR_API_KEY"\n', 'password = "<password>"\n',
                                   'token = "${GITHUB_TOKEN}"\n', 'secret = "changeme"\n']))  # fmt: skip
    if kind == 8:
        return s.add(f"{c} Copyright (c) {v.rng.randint(1995, 2025)} {v.name()}\n")
    return s.add(f'resolver = "{v.rng.choice(["8.8.8.8", "1.1.1.1", "9.9.9.9"])}"\n')


# --- examples ----------------------------------------------------------------------------------------------


def split_of(repo: str) -> str:
    """`train` or `eval`, by a hash of the repository: the halves share no code."""
    return "eval" if hashlib.sha1(repo.encode()).digest()[0] % 4 == 0 else "train"


@functools.cache
def host_files(split: str) -> tuple[tuple[str, str], ...]:
    """(path, text) of the real code on this machine (the embedded sample's sources) in `split`."""
    from stackcurate.sample import _candidates

    out = []
    for repo, path, full in _candidates():
        ext = path.rsplit(".", 1)[-1].lower() if "." in path else ""
        if ext not in CODE_EXTENSIONS or split_of(repo) != split:
            continue
        try:
            text = full.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.count("\n") >= 10:
            out.append((f"{repo}/{path}", text))
    return tuple(out)


def example(v: Values, path: str, text: str, max_lines: int = 40) -> dict:
    """A window of `text` with 1-3 snippets planted at line boundaries (a third of them hard negatives)."""
    ext = path.rsplit(".", 1)[-1].lower()
    config = ext in ("yaml", "yml", "toml", "cfg") and v.rng.random() < 0.5
    lines = text.splitlines(keepends=True)
    start = v.rng.randrange(max(1, len(lines) - max_lines))
    window = lines[start : start + v.rng.randint(8, max_lines)]
    snippets = [
        negative(v, COMMENT[ext]) if v.rng.random() < 1 / 3 else positive(v, COMMENT[ext], config)
        for _ in range(v.rng.randint(1, 3))
    ]
    at = sorted(v.rng.randrange(len(window) + 1) for _ in snippets)
    pieces: list[tuple[str, str | None]] = []
    cursor = 0
    for line_index, snippet in zip(at, snippets, strict=True):
        pieces.append(("".join(window[cursor:line_index]), None))
        indent = (
            window[line_index - 1][: len(window[line_index - 1]) - len(window[line_index - 1].lstrip())]
            if (line_index > 0)
            else ""
        )
        pieces.append((indent, None))
        # every line of the snippet at the indentation of the line before it
        for piece, entity in snippet.parts:
            inner = piece[:-1].replace("\n", "\n" + indent) + piece[-1:] if entity is None else piece
            pieces.append((inner, entity))
        cursor = line_index
    pieces.append(("".join(window[cursor:]), None))
    out, spans, pos = [], [], 0
    for piece, entity in pieces:
        if entity is not None:
            spans.append({"entity": entity, "start": pos, "end": pos + len(piece)})
        out.append(piece)
        pos += len(piece)
    return {
        "text": "".join(out),
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--split", choices=["train", "eval"], default="train")
    parser.add_argument("--examples", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(write(args.out, args.split, args.examples, args.seed))


if __name__ == "__main__":
    main()
