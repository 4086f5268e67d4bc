"""What is found but not redacted: StarCoder's post-processing rules, applied to pattern and model spans alike.

- spans of 3 characters or fewer (a password's escapes read as one: `p%2d`), and passwords of URL-parsing tests
  (`p%252d`, with an escaped `%` or two escapes);
- IP addresses that do not parse, private/reserved/loopback ones, popular public DNS servers, the IPv6 RFCs'
  examples and 6bone, IANA's 192.0.0.0/24, and made-up ones (`1.2.3.4`, `16.17.18.19`);
- example emails (reserved example domains and placeholder mailboxes, the annotation scheme's
  EMAIL_EXAMPLE), forges' no-reply addresses, mailing lists, fediverse handles (`@jroe@hachyderm.io`), SSH's
  protocol names (`ssh-rsa-cert-v01@openssh.com`), `git@host` of git remotes, and emails in a license or
  copyright line (EMAIL_LICENSE);
- keys that are not gibberish (gibberish-detector, as BigCode used it) or are 8 characters or fewer; hex held by a
  key-named variable, argument or header is a key without that test, as the English bigram model reads random
  hex as words half the time;
- keys that are base64 image data (a notebook's `"image/png": "iVBORw0KGgo..."`, which the model flags);
- keys that say they are examples (AWS documents `AKIAIOSFODNN7EXAMPLE`, `wJalrXUtnFEMI/K7MDENG/...EXAMPLEKEY`);
- keys in a hash context (detect-secrets' hash exception: sha, md5, hash, checksum, digest, integrity, etag,
  commit or revision on the value's line, the variable's name included), unless a vendor prefix makes them keys;
- names of one word (NAME must be a full name), all in lower case (`tous les jours`), made up (`John Doe`,
  BigCode's NAME_EXAMPLE), and of organisations and projects (`Google LLC`, `The Go Authors`: the word lists of
  `filters/pii/`);
- usernames inside a forge URL (GitHub, GitLab, Bitbucket, Codeberg, sourcehut: the owner and repository of
  `github.com/<owner>/<repo>`, `<owner>.github.io`, `raw.githubusercontent.com/<owner>/<repo>`,
  `git@github.com:<owner>/<repo>.git`) or that are a code identifier (`x.<name>`, `<name>(`, `<name>.attr`):
  what the model takes for handles in code;
- placeholder passwords, keys and usernames: `${VAR}`, `{password}`, `<password>`, `[Filtered]`, `****`,
  `your_password`, `changeme`, `admin`, `пароль`, and elided values (`Kh9NV...`).

`spared_by(span, text)` returns None (redact it) or the rule that spared the span, so the tests and the
evaluation can say why a span was not redacted.
"""

import functools
import ipaddress
import json
import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from stackcurate.core.errors import StackcurateError
from stackcurate.core.paths import filters_dir
from stackcurate.core.tables import read_name_list
from stackcurate.stages.pii.entities import EMAIL, IP_ADDRESS, KEY, NAME, PASSWORD, USERNAME

if TYPE_CHECKING:
    from gibberish_detector.detector import Detector

POPULAR_DNS = frozenset(
    {
        "8.8.8.8", "8.8.4.4", "1.1.1.1", "1.0.0.1", "76.76.19.19", "76.223.122.150", "9.9.9.9",
        "149.112.112.112", "208.67.222.222", "208.67.220.220", "8.26.56.26", "8.20.247.20", "94.140.14.14",
        "94.140.15.15",
    }
)  # fmt: skip
# RFC 2606 / RFC 6761 reserved names, and domains used as placeholders in documentation.
_EXAMPLE_DOMAIN = re.compile(
    r"(?i)(?:^|\.)(?:example\.(?:com|net|org|edu)|example|test|invalid|localhost|local|domain\.(?:com|org|net)|"
    r"email\.com|mail\.com|company\.com|yourdomain\.\w+|yourcompany\.\w+|acme\.(?:com|org)|foo\.(?:com|org|bar)|"
    r"bar\.(?:com|org)|host\.com|site\.com|somewhere\.com|dummy\.com|sample\.com|doe\.com|blah\.\w+|"
    r"my(?:app|site|company|domain|org|server|host|project)?\.\w+)$"
)
_EXAMPLE_MAILBOX = re.compile(
    r"(?i)^(?:user(?:name)?|name|email|e-?mail|your[._\-]?(?:email|name|mail|address)?|you|someone|somebody|"
    r"foo|bar|baz|test|tester|example|john\.?doe|jane\.?doe|first\.?last|firstname\.?lastname|"
    r"noreply|no-reply|do-?not-?reply|xxx+)$"
)
# A mailing list's address (`docutils-develop@lists.sourceforge.net`): a forum's, nobody's own.
_LIST_DOMAIN = re.compile(r"(?i)^lists?\.")
# SSH's algorithm and extension names look like addresses (`ssh-rsa-cert-v01@openssh.com`, `"zlib@openssh.com"`,
# paramiko's `keepalive@lag.net`).
_PROTOCOL_DOMAIN = re.compile(r"(?i)^(?:openssh\.com|libssh\.org|ssh\.com)$")
_PROTOCOL_WORD = re.compile(r"(?i)^(?:zlib|keepalive|etm)$")  # in quotes, at any domain (`"keepalive@lag.net"`)
_PROTOCOL_EXTENSION = re.compile(r"(?i)^(?:eow|limits|statvfs|fstatvfs|hardlink|fsync|lsetstat|ping|tun)$")
_PROTOCOL_NAME = re.compile(r"(?i)^(?:\w+(?:-\w+)+)$")
# Forges' no-reply domains (`12345+user@users.noreply.github.com`): commit metadata, not a way to reach anyone.
_NOREPLY_DOMAIN = re.compile(r"(?i)(?:^|\.)no-?reply\.")
_LICENSE_LINE = re.compile(r"(?i)copyright|\(c\)|©|licen[cs]e|all rights reserved|spdx")
_PLACEHOLDER = re.compile(
    r"(?i)^(?:\$\{?[\w.:\-]*\}?|\{\{?[^}]*\}?\}|<[^>]*>|\[[\w ]*\]|%\(?\w*\)?s|\*+|x+|\.+|-+|#+|"
    r"(?:your|my|the|some|enter|insert|put|add)[_\- ]?\w*|\w*(?:placeholder|example|sample|dummy|changeme|"
    r"change[_\-]?me|redacted|replace[_\-]?me|todo|fixme|xxxx)\w*|password|passwd|secret|pass|test|none|null|"
    r"true|false|undefined|empty|admin|root|guest|default|user(?:name)?|login|nobody|"
    r"passwort|contrase[ñn]a|senha|wachtwoord|hasło|parola|lösenord|пароль|密码|パスワード)$"
)


MODEL_PREFIX = "model:"  # a model span's detector: `model:<model name>`


@dataclass
class Span:
    """A detected span: character offsets into the original text (code points, not bytes)."""

    entity: str
    start: int
    end: int
    score: float
    detector: str


@functools.cache
def _gibberish() -> "Detector":
    """gibberish-detector's character-bigram model, trained on the English prose CPython ships (`pydoc_data`).

    BigCode trained the same detector on an English corpus; that corpus is not downloadable here, and the
    Python documentation topics (~460 KB of English) are on every machine that runs this.
    """
    from pydoc_data.topics import topics

    from gibberish_detector import detector, trainer

    text = "\n".join(topics[k] for k in sorted(topics))
    return detector.Detector(trainer.train_on_content(text, string.ascii_letters), threshold=4.0)


@functools.cache
def english_words() -> frozenset[str]:
    """The words of the English prose CPython ships (`pydoc_data`, ~460 KB), in lower case: a dictionary that is
    on every machine, to tell a handle (`nielsdos`) from a word in brackets (`(empty)`, `(again)`)."""
    from pydoc_data.topics import topics

    return frozenset(word.lower() for text in topics.values() for word in re.findall(r"[A-Za-z]{2,}", text))


@functools.cache
def prose_words() -> frozenset[str]:
    """The words CPython's prose (`english_words`' source) writes in lower case somewhere: English words, not the
    names it credits (`Raymond Hettinger` is capitalised wherever it stands)."""
    from pydoc_data.topics import topics

    return frozenset(word for text in topics.values() for word in re.findall(r"\b[a-z]{2,}\b", text))


@functools.cache
def common_words() -> frozenset[str]:
    """`english_words` and the whole words of the shipped encoder's vocabulary (BERT's, from English Wikipedia and
    books: ~21,000 common words and names, in lower case), where the base encoder is installed."""
    try:
        from stackcurate.stages.pii import shipped

        vocab = json.loads((shipped.base_folder() / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    except (StackcurateError, OSError, KeyError, ValueError):
        return english_words()
    return english_words() | {word for word in vocab if word.isascii() and word.isalpha()}


def is_gibberish(value: str) -> bool:
    letters = "".join(c for c in value if c in string.ascii_letters)
    if len(letters) < 4:  # digits and symbols only: random for our purpose
        return True
    return _gibberish().is_gibberish(value)


# The examples of the IPv6 RFCs, copied into tests and docs ever since (RFC 2732, 4291), and 6bone's returned
# test range (RFC 3701): not hosts anyone runs.
_DOCUMENTED_IPS = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "fedc:ba98:7654:3210:fedc:ba98:7654:3210", "1080::8:800:200c:417a", "3ffe:2a00:100:7031::1",
        "2010:836b:4179::836b:4179", "129.144.52.38",
    )
)  # fmt: skip
_6BONE = ipaddress.ip_network("3ffe::/16")
_IPV6_ZEROS = ipaddress.ip_network("::/8")
_IETF_PROTOCOL = ipaddress.ip_network("192.0.0.0/24")  # IANA's special-purpose block (PCP and NAT64 anycast)
# Made-up names of docs and templates (BigCode's NAME_EXAMPLE).
_PLACEHOLDER_NAMES = frozenset(
    ("john doe", "jane doe", "john smith", "jane smith", "foo bar", "joe bloggs", "max mustermann", "erika mustermann",
     "your name", "first last", "firstname lastname", "first name", "last name", "john q public", "joe user",
     "a. name", "a. n. other")
)  # fmt: skip


def _ip_rule(value: str) -> str | None:
    try:
        ip = ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return "ip_unparseable"
    if value in POPULAR_DNS:
        return "ip_dns_server"
    # Reserved: IPv4's 240/4, and IPv6's ::/8 that tests write (`1:2::2:2`); not the rest of IPv6's unassigned space
    if not ip.is_global or ip.is_multicast or (ip.is_reserved and (ip.version == 4 or ip in _IPV6_ZEROS)):
        return "ip_private"
    if ip in _DOCUMENTED_IPS or (ip.version == 6 and ip in _6BONE) or (ip.version == 4 and ip in _IETF_PROTOCOL):
        return "ip_documentation"
    octets = [int(part) for part in value.split(".")] if ip.version == 4 else []
    if octets and len({b - a for a, b in zip(octets, octets[1:], strict=False)}) == 1:  # `1.2.3.4`, `16.17.18.19`
        return "ip_made_up"
    return None


def _line_of(text: str, start: int, end: int) -> str:
    lo = text.rfind("\n", 0, start) + 1
    hi = text.find("\n", end)
    return text[lo : hi if hi >= 0 else len(text)]


# An `@` escaped as strings and markup write it: Perl's `"jroe\@cpan.org"`, `\x40`, `\u0040`, HTML's `&#64;` and
# `&#x40;`, a URL's `%40` (`?email=jroe%40posteo.de`).
ESCAPED_AT = re.compile(r"\\@|\\x40|\\u0040|&#0*64;|&#[xX]0*40;|%40")


def _email_rule(value: str, text: str, start: int, end: int) -> str | None:
    mailbox, _, domain = ESCAPED_AT.sub("@", value).rpartition("@")
    placeholder = value.lower() == "ll@li.org"  # gettext's template header: `Language-Team: LANGUAGE <LL@li.org>`
    if (
        placeholder
        or _EXAMPLE_DOMAIN.search(domain)
        or _EXAMPLE_MAILBOX.match(mailbox)
        or _NOREPLY_DOMAIN.search(domain)
    ):
        return "email_example"
    if _LIST_DOMAIN.match(domain):
        return "email_list"
    if text[start - 1 : start] == "@":  # `@coveragepy@hachyderm.io`: a fediverse handle, not a mailbox
        return "email_fediverse_handle"
    quoted = text[start - 1 : start] in ("'", '"')
    protocol_domain = _PROTOCOL_DOMAIN.match(domain) is not None
    if (_PROTOCOL_WORD.match(mailbox) and (quoted or protocol_domain)) or (
        protocol_domain and (_PROTOCOL_NAME.match(mailbox) or _PROTOCOL_EXTENSION.match(mailbox))
    ):
        return "email_protocol_name"
    if mailbox == "git" and text[end : end + 1] in (":", "/"):  # `git@github.com:owner/repo.git`: a remote's SSH user
        return "email_git_remote"
    if _LICENSE_LINE.search(_line_of(text, start, end)):
        return "email_license"
    return None


# An escaped `%` or two escapes in a made-up word: a URL-parsing test's value (`pass%25word`, `p%40ss%23word`).
# Not `Sparrow%1980` (a password with a `%`), nor a real password escaped for its URL (`Xk%21q9%40zLw2`).
_PERCENT_ESCAPE = re.compile(r"%25|%[0-9A-Fa-f]{2}.*%[0-9A-Fa-f]{2}")
_MADE_UP = re.compile(r"pass|word|secret|pwd|test|foo|bar|user|example|dummy|fake|sample")
_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[0-7]{1,3}|.)")


def _unescaped(value: str) -> str:
    """`value` with its percent-escapes and backslash escapes read as one character each (`b"\\x02"`, `p%2d`)."""
    return _ESCAPE.sub("?", unquote(value))


_TOKEN_CHAR = re.compile(r"[\w\-]")
_KEY_CHARACTERS = re.compile(r"[A-Za-z0-9+/=_\-.~:]+")  # base64, URL-safe base64, hex, JWT, vendors' prefixes
_CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[a-z][a-z0-9]*(?:[_.][a-z0-9]+)+")


def shannon_entropy(value: str) -> float:
    """Bits per character of `value`'s own character distribution."""
    n = len(value)
    return -sum(count / n * math.log2(count / n) for count in Counter(value).values()) if n else 0.0


def spared_by(span: Span, text: str) -> str | None:
    """The rule that spares `span` from redaction, or None."""
    value = text[span.start : span.end]
    if len(value.strip()) <= 3 or (span.entity == PASSWORD and len(_unescaped(value).strip()) <= 3):  # `p%2d`
        return "too_short"
    decoded = unquote(unquote(value)) if "%25" in value else unquote(value)  # `%25cf%2580`: `π`, escaped twice
    if (
        span.entity == PASSWORD
        and _PERCENT_ESCAPE.search(value)
        and (decoded.isalpha() or _MADE_UP.search(re.sub(r"[^a-z]", "", decoded.lower())))
    ):  # `%D0%BF%D0%B0%D1%80%D0%BE%D0%BB%D1%8C` is `пароль`: a word
        return "password_escaped"
    if span.entity == PASSWORD and value.isalpha() and value.islower() and value in common_words():
        return "password_word"  # `television`, `paranoid`: a test's made-up password
    if span.entity == IP_ADDRESS:
        return _ip_rule(value)
    if span.entity == EMAIL:
        return _email_rule(value, text, span.start, span.end)
    if span.entity in (KEY, PASSWORD, USERNAME) and _PLACEHOLDER.match(value.strip()):
        return "placeholder"
    if span.entity in (KEY, PASSWORD) and "..." in value:  # elided: `Kh9NV...`
        return "placeholder"
    if span.entity == KEY and "EXAMPLE" in value.upper():  # AWS's documented `wJalrXUtnFEMI/K7MDENG/...EXAMPLEKEY`
        return "key_example"
    # The model takes a notebook's base64 images for keys: PNG, JPEG and GIF data start with their magic bytes.
    if span.entity == KEY and value.startswith(("iVBORw0KGgo", "/9j/", "R0lGOD")):
        return "key_image_data"
    if span.entity == KEY and span.detector.startswith(MODEL_PREFIX):
        # The model reads a secret's line, not its shape: part of a longer token (`GHSA-fhv5-|28vv-h8m8|`) or a
        # constant's name (`GOOGLE_OAUTH2_CLIENT_SECRET`) is no key.
        if _TOKEN_CHAR.match(text, span.end) or span.start and _TOKEN_CHAR.match(text, span.start - 1):
            return "key_fragment"
        if _CONSTANT_NAME.fullmatch(value):
            return "key_identifier"
        if not _KEY_CHARACTERS.fullmatch(value):  # `p# Oqgffgf%q999...`: a line of image data
            return "key_fragment"
        if shannon_entropy(value) < 3.0:  # `q999q9999099990w999000wwww00w0`: a key's characters vary more
            return "key_not_random"
    if span.entity == KEY and span.detector != "pattern:private_key_block":
        if len(value) <= 8:
            return "key_too_short"
        if span.detector not in _VENDOR_FORMAT and _hash_context(text, span.start, span.end):
            return "key_hash"
        # Hex is a-f and digits: the English bigram model reads half of all random hex as words, so a hex value
        # that a key-named variable, argument or header holds is a key on that context alone; and a vendor's
        # prefix (`SK` + 32 hex digits is a Twilio key) makes a key whatever the rest reads like.
        vouched = span.detector in _VENDOR_FORMAT or (span.detector in _KEY_CONTEXT and _HEX.fullmatch(value))
        if not vouched and not is_gibberish(value):
            return "key_not_gibberish"
    if span.entity == NAME and len(value.split()) < 2 and span.detector not in _NAME_PARTS:
        return "name_one_word"
    # `tous les jours`: people write their names capitalised (in scripts that have capitals: not `王伟`)
    if span.entity == NAME and not any(c.isupper() for c in value) and any(c.islower() for c in value):
        return "name_lowercase"
    # `Du bon vin tous les jours`: a phrase; a name's lowercase words are particles (`Pieter van der Berg`)
    if span.entity == NAME and sum(w[:1].islower() and w.lower() not in _PARTICLES for w in value.split()) >= 2:
        return "name_lowercase_words"
    if span.entity == NAME and " ".join(value.lower().split()) in _PLACEHOLDER_NAMES:
        return "name_placeholder"
    # `Only One`, `Document Title`, `Sample Enum`: capitalised words of English prose, a title's, not a person's
    # (none of the 1,733 names labelled in the two real sets is made of such words only)
    words = value.lower().split()
    if span.entity == NAME and len(words) >= 2 and all(word.strip(".,") in prose_words() for word in words):
        return "name_common_words"
    if span.entity == NAME and _LANGUAGE_TEAM.search(text, max(0, span.start - 80), span.start):
        return "language_team"  # gettext's `Language-Team: German <de@li.org>`, as tests compare it
    if span.entity == NAME and is_organisation(value, text[span.end : span.end + 40]):
        return "organisation"
    if span.entity == USERNAME:
        return _username_rule(text, span.start, span.end)
    return None


_PARTICLES = frozenset(
    "van von der den de da del della di du la le bin ibn al el dos das do ten ter zu y e of af av ben bat".split()
)
_LANGUAGE_TEAM = re.compile(r"(?i)language[_\- ]?team\W[^\n]*$")


# Detectors that find a name's parts, each its own string: R's `person("Jane", "Roe")`.
_NAME_PARTS = frozenset({"pattern:r_person"})


# detect-secrets' hash exception, as BigCode applied it (a value with sha/md5/hash on its line), widened to the
# other words that name a digest in code and manifests: `sha256 = "..."`, `commit_hash`, `"integrity": "sha512-..."`,
# `ETag`, `revision`. `sha` and `md5` stand alone or with their digits (not `shared`, `shadow`).
_HASH_WORDS = re.compile(
    r"(?i)(?<![a-z])(?:sha(?:\d*|[_\-]\d+|sum)|md5(?:sum)?)(?![a-z])|hash|checksum|digest|integrity|etag|commit|revision"
)
_HEX = re.compile(r"[0-9a-fA-F]+")
# Key spans found by their context (a key-named assignment or argument, a config line, an Authorization header, a
# session cookie: PHP's and Rails' session ids are hex).
_KEY_CONTEXT = frozenset(
    {
        "pattern:key_assignment",
        "pattern:config_key",
        "pattern:env_key",
        "pattern:signing_key",
        "pattern:url_key",
        "pattern:bearer",
        "pattern:session_cookie",
    }
)
# Vendor formats, whose prefix alone makes them keys (`ghp_...` next to `commit` is still a token).
_VENDOR_FORMAT = frozenset(
    {
        "pattern:aws_access_key_id", "pattern:google_api_key", "pattern:github_token",
        "pattern:github_fine_grained_token", "pattern:gitlab_token", "pattern:slack_token", "pattern:stripe_key",
        "pattern:openai_key", "pattern:huggingface_token", "pattern:sendgrid_key", "pattern:twilio_key",
        "pattern:npm_token", "pattern:pypi_token", "pattern:jwt", "pattern:slack_webhook",
    }
)  # fmt: skip


def _hash_context(text: str, start: int, end: int) -> bool:
    """A hash word on the value's line, outside the value itself (`sha512-` is the value's own prefix)."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    return bool(_HASH_WORDS.search(text, line_start, start) or _HASH_WORDS.search(text, end, line_end))


# A forge URL, from its host (with any subdomain: `<owner>.github.io`, `raw.githubusercontent.com`,
# `git.sr.ht`) to the end of its path, `https://` or `git@host:` alike. Its owner and repository segments are
# public project metadata, not a person's secret: on real code most "usernames" were the owner segment of
# links like `https://github.com/<owner>/fmt/pull/3024`, and rewriting them teaches the model broken links.
_FORGE_URL = re.compile(
    r"(?i)(?<![\w-])(?:[\w-]+\.)*(?:github\.com|githubusercontent\.com|github\.io|gitlab\.com|gitlab\.io|"
    r"bitbucket\.org|bitbucket\.io|codeberg\.org|codeberg\.page|sr\.ht)\b(?:[:/][^\s\"'<>()\[\]{}`|\\,;]*)?"
)
_FORGE_HINTS = ("git", "bitbucket", "codeberg", "sr.ht")  # cheap test before the regex (lowercased line)


def _in_forge_url(text: str, start: int, end: int) -> bool:
    """Whether `text[start:end]` overlaps a forge URL on its line."""
    lo = text.rfind("\n", 0, start) + 1
    hi = text.find("\n", end)
    line = text[lo : hi if hi >= 0 else len(text)]
    if not any(hint in line.lower() for hint in _FORGE_HINTS):
        return False
    return any(m.start() < end - lo and start - lo < m.end() for m in _FORGE_URL.finditer(line))


def _username_rule(text: str, start: int, end: int) -> str | None:
    """Usernames the model takes from code and links: any part of a forge URL (its owner and repository
    segments above all), or an identifier (`obj.attr`, `f(`)."""
    if _in_forge_url(text, start, end):
        return "username_forge_url"
    before, after = text[start - 1 : start], text[end : end + 2]
    table = text[start - 8 : start] == "[people." and after[:1] == "]"  # a TOML table named for the person
    if not table and (before == "." or after[:1] == "(" or (after[:1] == "." and after[1:2].isalpha())):
        return "username_identifier"
    return None


_FILTERS = filters_dir() / "pii"
_NOT_WORD = re.compile(r"[.,;:()\[\]\"'`]")


@functools.cache
def _organisation_tables() -> tuple[frozenset[str], frozenset[str]]:
    """(organisation words, legal forms): the tables of `filters/pii/`, read and checked once."""

    def one_word(word: str) -> bool:
        return word.islower() and word.isalpha()

    words, forms = (
        frozenset(read_name_list(_FILTERS / name, is_valid=one_word, what="organisation word"))
        for name in ("organisation_words_v1.txt", "organisation_legal_forms_v1.txt")
    )
    return words, forms


def is_organisation(name: str, after: str = "") -> bool:
    """Whether a capitalised run found as a person's name names an organisation or project instead: one of
    its words is an organisation word or a legal form (`The Go Authors`, `Python Software Foundation`,
    `Google LLC`), or a legal form follows it (`Red Hat, Inc.`, with `after` the text right after it)."""
    words, forms = _organisation_tables()
    own = {_NOT_WORD.sub("", word).lower() for word in name.split()}
    if own & (words | forms):
        return True
    # `, Inc.`: the next word on the line, past commas and dots (not `Incorporated` opening the next paragraph)
    following = _NOT_WORD.sub(" ", after.split("\n", 1)[0]).split()[:1]
    return bool(following) and following[0].lower() in forms


def resolve_overlaps(spans: list[Span]) -> list[Span]:
    """Non-overlapping spans, in text order: a pattern's span wins over the model's of another type (the model
    reading `Jane Roe <jroe@x.org>` as one name must not hide the address), then the longer span, then the higher
    score, then the detector's name."""
    chosen: list[Span] = []
    patterns = [s for s in spans if not s.detector.startswith(MODEL_PREFIX)]
    spans = [
        s for s in spans
        if not s.detector.startswith(MODEL_PREFIX)
        or not any(p.entity != s.entity and p.start < s.end and s.start < p.end for p in patterns)
    ]  # fmt: skip
    # The detector last: two rules finding the same span give the same record on every run (presidio runs its
    # recognizers in no fixed order).
    for span in sorted(spans, key=lambda s: (-(s.end - s.start), -s.score, s.start, s.entity, s.detector)):
        if all(span.end <= c.start or span.start >= c.end for c in chosen):
            chosen.append(span)
    return sorted(chosen, key=lambda s: s.start)
