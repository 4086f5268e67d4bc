"""Code-aware pattern recognizers for presidio: emails, IP addresses, keys and tokens, passwords, and people's
names where code lists them (copyright lines, author fields, trailers, AUTHORS files).

Each recognizer is a presidio `EntityRecognizer`, so they sit in an `AnalyzerEngine` next to the encoder
model's recognizer. They are written here rather than as presidio `PatternRecognizer`s because that class
reports the whole regex match, and in code the secret is usually one group of it: the value in
`password = "..."`, the address before `:8080`, the password in `postgres://user:pw@host`.

Every result carries `recognition_metadata["detector"]` (`pattern:<rule>`), which the stage records with
each redacted span. What is then *not* redacted (example emails, private IPs, keys that read like words)
is decided after detection, by `rules.py`, for pattern and model results alike.
"""

import functools
import ipaddress
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from presidio_analyzer import EntityRecognizer, RecognizerRegistry, RecognizerResult
from presidio_analyzer.nlp_engine import NlpArtifacts

from stackcurate.stages.pii import rules
from stackcurate.stages.pii.entities import DETECTOR, EMAIL, ENTITIES, IP_ADDRESS, KEY, NAME, PASSWORD, USERNAME
from stackcurate.stages.pii.lines import lines_with, lowered
from stackcurate.stages.pii.model import AT_WORDS

if TYPE_CHECKING:
    from stackcurate.stages.pii.model import EncoderModel

__all__ = ["DETECTOR", "EMAIL", "ENTITIES", "IP_ADDRESS", "KEY", "NAME", "PASSWORD", "USERNAME"]
NAMED = "*"  # a Rule's group: the span is whichever named group matched, and the detector is named after it


@dataclass(frozen=True)
class Rule:
    r"""One regex and what its matches are.

    Attributes:
        name: The rule's name, recorded as `pattern:<name>` (for NAMED spans, the matching group's name).
        regex: Finds candidates.
        spans: (group, entity) for each span a match gives; the group is a number, a name, or NAMED.
        score: The presidio score of its results.
        check: Keeps a match only if `check(match, text)` holds.
        refine: Searched inside each candidate (the spans' groups then refer to it): a fast, simple `regex`
            finds the few places worth the slow one. A rule with `refine` has no `check` (whose match is
            one of `text`).
        anchor: What every match holds (a string, one of several, or a fast regex): a text without it skips
            the rule. Python's `re` scans a pattern that opens with a lookbehind or an alternation slowly; `in`
            and a plain regex run far faster, and most files hold no `@`, no `://`, no dotted quad.
        keywords: Lowercase words, one of which is on every line a match starts on: the regex runs on those
            lines only (for the patterns that open with a name like `[\w-]*password`, which `re` cannot scan
            fast). Such a rule's matches lie within one line.
        one_line: The regex never matches across lines, and every match holds `anchor`: it runs only on the
            lines that hold the anchor (a regex opening with a lookbehind or a character class is still slow
            on a file that holds an `@` somewhere).
        follow: With `keywords`, the regex also runs on this many lines after each keyword line, and its
            matches may cross them: a call's arguments or an element's value on the lines below its name.
    """

    name: str
    regex: re.Pattern[str]
    spans: tuple[tuple[int | str, str], ...]
    score: float = 0.9
    check: Callable[[re.Match[str], str], bool] | None = None
    refine: re.Pattern[str] | None = None
    anchor: str | tuple[str, ...] | re.Pattern[str] | None = None
    keywords: tuple[str, ...] = ()
    one_line: bool = False
    follow: int = 0

    def __post_init__(self) -> None:
        assert self.refine is None or self.check is None, f"rule {self.name}: refine and check do not mix"
        assert not self.one_line or self.anchor is not None, f"rule {self.name}: one_line needs an anchor"


class RegexRecognizer(EntityRecognizer):
    """A presidio recognizer running a list of :class:`Rule`s."""

    def __init__(self, name: str, rules: list[Rule]) -> None:
        self.rules = rules
        entities = sorted({entity for r in rules for _, entity in r.spans})
        super().__init__(supported_entities=entities, name=name, supported_language="en", version="1")

    def load(self) -> None:
        pass

    def analyze(self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None) -> list:
        results = []
        low: str | None = None
        for rule in self.rules:
            if entities and not any(entity in entities for _, entity in rule.spans):
                continue
            # (a one_line rule finds its anchor's lines below: none, no match)
            if rule.anchor is not None and not rule.one_line and not _has_anchor(rule.anchor, text):
                continue
            if rule.keywords:
                low = lowered(text) if low is None else low
                matches: Iterator[re.Match[str]] = _matches_on_lines(
                    rule.regex, text, lines_with(text, low, rule.keywords), rule.follow
                )
            elif rule.one_line:
                assert rule.anchor is not None
                matches = _matches_on_lines(rule.regex, text, _anchor_lines(rule.anchor, text))
            else:
                matches = rule.regex.finditer(text)
            for match in matches:
                offset = 0
                if rule.refine is not None:
                    offset = match.start()
                    match = rule.refine.search(match.group(0))
                    if match is None:
                        continue
                if rule.check is not None and not rule.check(match, text):
                    continue
                for group, entity in rule.spans:
                    if entities and entity not in entities:
                        continue
                    group = match.lastgroup if group == NAMED else group
                    start, end = match.span(group or 0)
                    if start < 0 or end <= start:
                        continue
                    metadata = {
                        RecognizerResult.RECOGNIZER_NAME_KEY: self.name,
                        RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id,
                        DETECTOR: f"pattern:{group if isinstance(group, str) else rule.name}",
                    }
                    result = RecognizerResult(entity, start + offset, end + offset, rule.score)
                    result.recognition_metadata = metadata
                    results.append(result)
        return results


def _has_anchor(anchor: str | tuple[str, ...] | re.Pattern[str], text: str) -> bool:
    if isinstance(anchor, str):
        return anchor in text
    if isinstance(anchor, tuple):
        return any(literal in text for literal in anchor)
    return anchor.search(text) is not None


def _matches_on_lines(
    regex: re.Pattern[str], text: str, starts: list[int], follow: int = 0
) -> Iterator[re.Match[str]]:
    """`regex`'s matches on the lines of `text` that start at `starts` (in order), in text order; with `follow`,
    on each of those lines and the `follow` lines after it, read as one range (ranges that meet are merged)."""
    ranges: list[list[int]] = []
    for start in starts:
        end = start
        for _ in range(follow + 1):
            end = text.find("\n", end + 1 if end > start else end)
            if end < 0:
                end = len(text)
                break
        if ranges and start <= ranges[-1][1]:
            ranges[-1][1] = max(ranges[-1][1], end)
        else:
            ranges.append([start, end])
    for start, end in ranges:
        yield from regex.finditer(text, start, end)


def _anchor_lines(anchor: str | tuple[str, ...] | re.Pattern[str], text: str) -> list[int]:
    """The starts of the lines of `text` that hold `anchor` (a regex's matches lie within a line), in order."""
    if isinstance(anchor, re.Pattern):
        return sorted({text.rfind("\n", 0, match.start()) + 1 for match in anchor.finditer(text)})
    return lines_with(text, text, (anchor,) if isinstance(anchor, str) else anchor)


def _preceded_by(pattern: re.Pattern[str], start: int, text: str, window: int) -> bool:
    """`pattern` (anchored with `$`) matches in the `window` characters of `text` before `start`."""
    return pattern.search(text, max(0, start - window), start) is not None


# --- emails -------------------------------------------------------------------------------------------------

_EMAIL = re.compile(  # letters of any script too: `jörg@müller.de` (internationalised addresses, RFC 6531)
    r"(?<![\w.+%-])[^\W_][\w.%+-]{0,63}@"
    r"(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+[^\W\d_]{2,24}(?![\w-])"
)
# Inside a URL's credentials (`scheme://user:password@host`, a Sentry DSN's `https://<key>@host`): what
# looks like an address there is a password's or a user's end and its host; the password may hold `/` and `@`
# as people write them unescaped (`amqp://u:Xk/9@2z@host`), but a port's digits then `/` end the host.
_IN_USERINFO = re.compile(r"://(?:[^:/\s@\"'<>]{0,64}:(?!\d+[/;?])[^\s\"'<>]*|[^\s/@\"'<>]*)$")
# The same without a scheme, `user:password@host` in a string (not a label: `mailto:`, `Contact:`).
_USER_COLON_BEFORE = re.compile(
    r"(?<![\w.+%-])(?!(?i:mailto|e-?mail|mail|contact|author|maintainer|from|to|cc|reply-to)\b)[\w.+%-]{1,32}:$"
)
# Oracle's `user/password@service` in a string or on a command line (`"scott/...@db.acme.de/orcl"`).
_ORACLE_USER_BEFORE = re.compile(r"(?:^|[\s\"'=])[\w$#]{1,30}/$")


def _is_email(match: re.Match[str], text: str) -> bool:
    """The domain ends in a real public suffix (`foo@2x.png` is a file name, not an email), and it is not the
    `password@host` end of a `scheme://user:password@host` URL or of Oracle's `user/password@host`."""
    if _preceded_by(_IN_USERINFO, match.start(), text, 200) or (
        text[match.start() - 1 : match.start()] == ":" and _preceded_by(_USER_COLON_BEFORE, match.start(), text, 80)
    ):
        return False
    if text[match.start() - 1 : match.start()] == "/" and _preceded_by(_ORACLE_USER_BEFORE, match.start(), text, 40):
        return False
    return bool(_tld_extract()(match.group(0).rsplit("@", 1)[1]).suffix)


@functools.cache
def _tld_extract() -> Callable:
    """tldextract with the suffix list its package ships (no network: presidio's own email check downloads)."""
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


# --- IP addresses -------------------------------------------------------------------------------------------

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# Not inside a longer dotted number (OIDs, versions with 5 parts), and never including a `:port`.
_IPV4 = re.compile(rf"(?<![\w.])({_OCTET}(?:\.{_OCTET}){{3}})(?![\w]|\.\d|/(?!32\b)\d)")  # a `/16` network is no host
_IPV6 = re.compile(r"(?<![\w:.])((?:[0-9A-Fa-f]{1,4}|:)?(?::[0-9A-Fa-f]{0,4}){2,7}(?:%\w+)?)(?![\w:]|/(?!128\b)\d)")
_DOTTED_QUAD = re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d")  # anchors: what every match of the two above holds
_TWO_COLONS = re.compile(r":[0-9A-Fa-f]{0,4}:")
# `id-1.6.14.2` (DocBook's section anchors) is an identifier's tail.
# `Build 8.0.11.22`, `upgrade to 4.12.0.1`, `libfoo >= 1.4.22.3`, `h2-2.1.214.0.jar`.
_VERSION_BEFORE = re.compile(
    r"(?i)(?:(?:(?<![a-z])(?:version|ver|release|rev|section|chapter|§|build|upgrade|update|bump)|"
    r"(?<=[a-z])(?-i:Version))\w*(?:[ \t]+to)?"
    r"[\s\"'>]*[=:]{0,2}[\s\"'(]*|(?:==|>=|<=|~=|!=)[ \t]*|@"
    r"|[a-z]\d?-)$"
)
# A Debian revision or a local version after it (`1.0.24.2-5`, `1.2.3.4+dfsg`, `1.2.3.4~rc1`), a package's
# extension (`-1.2.3.4.jar`), a commit's; not a range's dash (`10.0.0.1-10.0.0.9`).
_VERSION_AFTER = re.compile(
    r"-\d+(?![\d.])|[+~][a-z]|\.(?:jar|war|tar|tgz|zip|whl|gem|deb|rpm|pom|egg)\b"
    r"|\.g[0-9a-f]{7,}\b"  # `git describe`: `1.0.2.66.g20a2d97`
    r"|[^)\s]*\)[ \t]+[\w\-/]+;[ \t]*urgency="  # a Debian changelog's heading: `pkg (1.0.2.66-1) unstable; urgency=`
)
_VERSION_SHAPED = re.compile(r"\d\.\d{1,2}\.\d+\.0")  # `9.0.43.0` away from network words: a version
_NETWORK_WORDS = re.compile(r"(?i)dns|server|host|\bip\b|addr|proxy|gateway|endpoint|connect|bind|listen")


def _is_ipv4(match: re.Match[str], text: str) -> bool:
    """Not a version number: BigCode's rule (a short x.y.z.w away from network words is a version, and so is a
    `9.0.43.0`),
    and nothing like `version = "1.2.3.4"`, `AssemblyFileVersion("...")` or `==1.0.0.1` right before it."""
    value, start = match.group(1), match.start(1)
    after_credentials = text[start - 1 : start] == "@" and _preceded_by(_IN_USERINFO, start - 1, text, 200)
    if _preceded_by(_VERSION_BEFORE, start, text, 16) and not after_credentials:  # `user:pw@<host>`
        return False
    if _VERSION_AFTER.match(text, match.end(1)):
        return False
    if len(value) > 7 and not _VERSION_SHAPED.fullmatch(value):
        return True
    return _NETWORK_WORDS.search(text, max(0, start - 100), match.end(1) + 100) is not None


def _is_ipv6(match: re.Match[str], _text: str) -> bool:
    """A valid address with three groups or more, digits in two: not `Face::Add` (C++), `dead:beef`, or a
    Python slice like `x[1::2]`."""
    value = match.group(1)
    try:
        ipaddress.IPv6Address(value.split("%", 1)[0])
    except ValueError:
        return False
    groups = [part for part in value.split("%", 1)[0].split(":") if part]
    return len(groups) >= 3 and sum(any(c.isdigit() for c in part) for part in groups) >= 2


# --- keys and tokens ----------------------------------------------------------------------------------------

# Well-known token formats (the vendors document their prefixes; detect-secrets and gitleaks use the same).
_KEY_FORMATS: list[tuple[str, str]] = [
    ("aws_access_key_id", r"\b((?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16})\b"),
    ("google_api_key", r"\b(AIza[0-9A-Za-z_\-]{35})(?![\w-])"),
    ("github_token", r"\b(gh[pousr]_[A-Za-z0-9]{36,255})\b"),
    ("github_fine_grained_token", r"\b(github_pat_[A-Za-z0-9_]{60,255})\b"),
    ("gitlab_token", r"\b(glpat-[A-Za-z0-9_\-]{20,})(?![\w-])"),
    ("slack_token", r"\b(xox[abposr]-[A-Za-z0-9-]{10,})(?![\w-])"),
    ("stripe_key", r"\b((?:sk|rk)_(?:live|test)_[0-9A-Za-z]{24,})\b"),
    ("openai_key", r"\b(sk-(?:proj-)?[A-Za-z0-9_\-]{32,})(?![\w-])"),
    ("huggingface_token", r"\b(hf_[A-Za-z]{34})\b"),
    ("sendgrid_key", r"\b(SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43})(?![\w-])"),
    ("twilio_key", r"\b(SK[0-9a-f]{32})\b"),
    ("npm_token", r"\b(npm_[A-Za-z0-9]{36})\b"),
    ("pypi_token", r"\b(pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,})(?![\w-])"),
    ("jwt", r"\b(eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})(?![\w-])"),
]
# Tokens are runs of 20+ word characters, dashes and dots: found with one fast regex, then each run is
# searched with the one for every format (the named group says which matched). Every match starts a run, so
# the lookbehind changes no match; it spares `re` retrying each shorter word from each of its characters.
_TOKEN_RUN = re.compile(r"(?<![A-Za-z0-9_\-.])[A-Za-z0-9_\-.]{20,}")
_TOKENS = re.compile("|".join(f"(?P<{name}>{regex.replace('(', '(?:', 1)})" for name, regex in _KEY_FORMATS))
_SLACK_WEBHOOK = re.compile(r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+")
_PRIVATE_KEY = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY((?: BLOCK)?)-----\s*\n(.+?)\n\s*-----END \1PRIVATE KEY\2-----", re.DOTALL
)
# `name = "`, `"name": "`, `name: '`, `name := "`, `$name => '`, `[name] = "` on one line.
_ASSIGN = r"""["'`]?[\]}]?[ \t]*(?::=|=>|[=!]==?|=|:|\|\||\?\?)[ \t]*[rbuf]?["'`]"""  # `$ENV{X} =`, `X || "..."`
_KEY_WORDS = (
    r"(?:api[_\-.]?key|apikey|secret(?:[_\-.]?key)?|access[_\-.]?key|auth[_\-.]?(?:key|token)|"
    r"access[_\-.]?token|refresh[_\-.]?token|bearer|client[_\-.]?secret|private[_\-.]?key|token|"
    r"consumer[_\-.]?(?:key|secret)|app[_\-.]?secret|signing[_\-.]?key|encryption[_\-.]?key|"
    r"(?:storage|account|master|shared)[_\-.]?key)"
)
# `API_KEY = "..."`, `"client_secret": "..."`, `token: '...'`: a quoted value of 16 key characters or more
# (found fast: it starts with a quote), then a key-like name assigned right before it.
_QUOTED_LONG = re.compile(r"""(?<=["'`])[A-Za-z0-9+/=_\-.~]{16,}(?=["'`])""")
# Also a name ending in a bare `key` (`STRIPE_KEY`, `"key": ...`), except the names of keys that are ids rather
# than secrets (a cache or database key, a public key); and `("API_TOKEN", "...")`, a name then its value as
# the next argument (`os.environ.setdefault`, `config.set`, header tuples); and a C macro, `#define NAME "..."`.
_NOT_SECRET_KEY = r"(?<!cache[_\-.])(?<!primary[_\-.])(?<!foreign[_\-.])(?<!sort[_\-.])(?<!public[_\-.])(?<!pub[_\-.])"
_KEY_NAME = rf"(?<![a-z0-9])(?:{_KEY_WORDS}[\w\-]*|{_NOT_SECRET_KEY}key|authorization)"
_KEY_NAME_BEFORE = re.compile(
    rf"""(?i)(?:{_KEY_NAME}(?:{_ASSIGN}|["'`][ \t]*,[ \t]*["'`])|#[ \t]*define[ \t]+\w*?{_KEY_NAME}[ \t]+")$"""
)
# `Authorization: Bearer <token>` (or `Token`/`Basic`, as HTTP APIs and their clients write the header value).
# Each regex starts with a literal, which `re` finds with a fast substring search: a case-insensitive
# alternation instead costs an eighth of the whole pattern stage's time.
_BEARER_VALUE = r"[ \t]+([A-Za-z0-9+/=_\-.~]{16,})(?![\w+/=\-.~])"
_BEARER = re.compile(r"earer" + _BEARER_VALUE)
_AUTHORIZATION = re.compile(r"uthorization\W{1,4}(?:[Tt]oken|[Bb]asic)" + _BEARER_VALUE)
_HEX = re.compile(r"[0-9a-fA-F]+")


def _looks_random(value: str, short_hex: bool = False) -> bool:
    """Letters and digits, at least 3 bits of entropy per character; hex shorter than 32 digits is an id or
    a short hash, not a key, unless `short_hex` (a server's session ids are short hex)."""
    return (
        (short_hex or not (len(value) < 32 and _HEX.fullmatch(value)))
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and rules.shannon_entropy(value) >= 3.0
    )


_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_SECRET_NAME_BEFORE = re.compile(rf"(?i)(?<![a-z0-9]){_KEY_WORDS}[\w\-]*{_ASSIGN}$")


def _key_value(match: re.Match[str], text: str) -> bool:
    """Random-looking and assigned to a key-like name; a UUID only under a secret's name (`api_key`, not the
    `"key"` of an S3 object or a dict entry: detect-secrets' `is_potential_uuid` filter, narrowed)."""
    value, start = match.group(0), match.start()
    if not _looks_random(value) or not _preceded_by(_KEY_NAME_BEFORE, start, text, 64):
        return False
    return not _UUID.fullmatch(value) or _preceded_by(_SECRET_NAME_BEFORE, start, text, 64)


def _bearer_value(match: re.Match[str], text: str) -> bool:
    """The literal's first letter (`Bearer`, `authorization`) is a word's first, and the value looks random."""
    start = match.start()
    return (
        text[start - 1 : start] in ("B", "b", "A", "a")
        and not text[start - 2 : start - 1].isalnum()
        and _looks_random(match.group(1))
    )


# --- passwords ----------------------------------------------------------------------------------------------

# Java's keystores too: Ant's `storepass="..."`, `keypass`.
_PASSWORD_WORDS = (
    r"(?:password|passwd|passwrd|passphrase|pwd|db[_\-.]?pass|pass|bind_?pw|(?:key|store|keystore|truststore)pass)"
)
# `password = "..."`: a quoted value, then a password-like name assigned right before it.


def quoted_values(shortest: int) -> re.Pattern[str]:
    """Quoted values of `shortest` to 128 characters, each up to its own closing quote: a backtick inside double
    or single quotes is the value's."""
    value = rf"{{{shortest},128}}"
    return re.compile(rf"""(?<=")[^"'\s]{value}(?=")|(?<=')[^"'\s]{value}(?=')|(?<=`)[^"'`\s]{value}(?=`)""")


_QUOTED = quoted_values(3)
# The name starts with a password's word, or a camelCase name ends with it (`dbPassword`, `userPass`, `smtpPwd`).
_PASSWORD_NAME_BEFORE = re.compile(
    rf"(?:(?i:(?<![a-z0-9]){_PASSWORD_WORDS})|(?<=[a-z0-9])(?:Pass(?:word|wd|wrd|phrase)?|Pwd|PASS(?:WORD|WD)?|PWD)"
    r"|(?<=[A-Z])(?<!BY)(?<!COM)(?<!SUR)(?<!TRES)(?:PASSWORD|PASSWD|PASS|PWD)(?![a-z]))"  # `PGPASSWORD`, `DBPASS`
    rf"(?i:[\w\-]*{_ASSIGN})$"
)
_CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*")  # `USER_PASSWORD_AUTH = "USER_PASSWORD_AUTH"`: an enum, not a secret


# `secret`, `enable_secret`, SNMP's `authKey`/`privKey`: a passphrase when shorter than a key
_SHORT_SECRET_NAME_BEFORE = re.compile(rf"(?i)(?<![a-z0-9])(?:[\w\-]*_)?(?:secret|auth_?key|priv_?key){_ASSIGN}$")


def is_path(value: str) -> bool:
    """A file's path, not a secret (`/etc/passwd`, `~/.pgpass`, `./secrets/db`)."""
    return value.startswith(("/", "~/", "./"))


# A name's letters: lowercase, capitals, words run together (`camelCase`, `PascalCase`, `HTTPServer`): a capital
# or an acronym opens each word of two lowercase letters or more.
_NAMED_LETTERS = re.compile(r"[a-z]*(?:[A-Z]{1,5}[a-z]{2,})*[A-Z]{0,5}")


def random_letters(value: str) -> bool:
    """Letters alone, of mixed case no name is written in (`cZBXBmXzJyarb`, `NZItoXwTtQYku`): a generated password
    that happens to hold no digit (one in eight of 12 random letters and digits), not a word or an identifier."""
    letters = value.replace("_", "").replace("-", "")
    return (
        len(letters) >= 8
        and letters.isascii()
        and letters.isalpha()
        and sum(c.isupper() for c in letters) >= 2
        and sum(c.islower() for c in letters) >= 2
        and not _NAMED_LETTERS.fullmatch(letters)
    )


def _password_value(match: re.Match[str], text: str) -> bool:
    """Assigned to a password's name; or to a `secret` and shorter than a key (a device's enable secret)."""
    value, start = match.group(0), match.start()
    if _CONSTANT.fullmatch(value) or is_path(value):  # `passwd_path = "/etc/passwd"`
        return False
    if _preceded_by(_PASSWORD_NAME_BEFORE, start, text, 64):
        return True
    return (
        len(value) < 16
        and any(not c.isalpha() for c in value)
        and _preceded_by(_SHORT_SECRET_NAME_BEFORE, start, text, 64)
    )


# A URL's user that is a key: Sentry's DSN (`https://<32 hex>@o1.ingest.sentry.io/1`), tokens in git remotes.
_URL_KEY = re.compile(r"://([A-Za-z0-9_\-]{20,})(?::([A-Za-z0-9_\-]{20,}))?@[\w.\-]+")


def _url_key(match: re.Match[str], _text: str) -> bool:
    return all(
        value is None or (len(value) >= 32 and _HEX.fullmatch(value) is not None) or _looks_random(value)
        for value in match.groups()
    )


# `scheme://user:password@host` (databases, brokers, basic auth in URLs); the host may be a template's
# placeholder (`https://u:...@${host}/`). The password runs to the first `@` that a host and the host's end
# follow: people write `/`, `#` and `@` in it unescaped (`mongodb://u:Xk/9#q@2z@db1:27017`), which URL parsers
# would split elsewhere; never a port's digits then `/` (`http://host:8080/x@y.org` is an address in a path).
# The user may be an address written unescaped (`smtp://bot@acme.de:...@smtp.acme.de`: mail and FTP hosts name
# accounts so), Perl's `\\@` may stand before the host, and the host may be a format's slot (`...@%s:5672/`,
# `...@{host}/`) or a concatenation (`...@" + host`).
_CONNECTION = re.compile(
    r"\b[A-Za-z][A-Za-z0-9+.\-]*://(?:([^:/\s@'\"<>{}]{0,64})|([\w.+\-]{1,64}@[\w\-]+(?:\.[\w\-]+)+))"
    r":((?!\d+[/;?])[^\s'\"<>]{3,128}?)"
    r"\\?@(?:(?:[\w.\-\[\]]|\$\{|%s|\{\w*\})+(?=[:/?#'\"`\s()>\]},;|&]|$)|(?=[\"'`][ \t]*[+.]))"
)
_AWS_KEY_ID = re.compile(dict(_KEY_FORMATS)["aws_access_key_id"])


def _connection(match: re.Match[str], _text: str) -> bool:
    """Not a template's slot (`u:{password}@`, `u:${PASS}@`), nor an AWS key pair (`mongodb://AKIA...:<secret>@`:
    the key rules find both as keys)."""
    return not is_reference(match.group(3)) and not _AWS_KEY_ID.fullmatch(match.group(1) or "")


# A proxy's credentials without a scheme: `http_proxy=jroe:...@proxy.acme.de:3128`, `proxy: u:...@host`.
_PROXY_USERINFO = re.compile(
    r"(?i)proxy\w*[ \t]*[=:][ \t]*[\"']?([^:/\s@'\"<>{}=]{1,64}):((?!\d+/|//)[^\s'\"<>{}]{3,128}?)"
    r"@[\w.\-]+(?=[:/\s'\"]|$)"
)


def _config_line(words: str, value: str) -> re.Pattern[str]:
    """A whole `NAME=value` / `name: value` line of a config file (.env, INI, YAML, properties) whose NAME
    contains one of `words`, perhaps with a comment after a blank (`# ...`, `; ...`); group 1 is the unquoted
    value."""
    return re.compile(
        rf"(?im)^[ \t]*(?:export[ \t]+)?[\w.\-]*{words}[\w.\-]*[ \t]*[=:][ \t]*({value})(?:[ \t]+[#;][^\n]*)?[ \t]*$"
    )


# A strong password holds symbols (`Xk#9$mP!q2`, `$9ZNsEC(VC`): the value is the whole unquoted token, unless it
# is a reference (`is_reference`) or opens a comment.
_CONFIG_PASSWORD = _config_line(
    rf"(?:{_PASSWORD_WORDS}|secret|(?<=[_.\-])pw(?=[ \t]*[=:]))", r"[^\s\"'#;,{}\[\]<>][^\s\"']{2,127}"
)  # and `mysqli.default_pw = ...`
# A directive written `name value` (Apache, LDAP clients, keepalived, msmtp, mosquitto, cntlm: `bindpw ...`,
# `rootpw ...`, `auth_pass ...`, `AuthLDAPBindPassword ...`, `remote_password ...`): a line of the name, ending in
# a password's word, and one value. Not nginx's upstreams (`proxy_pass backend;`), not `bypass` or `compass`.
_CONFIG_DIRECTIVE_PASSWORD = re.compile(
    r"(?im)^[ \t]*[\w.\-]*"
    r"(?<!by)(?<!com)(?<!tres)(?<!proxy_)(?<!fastcgi_)(?<!uwsgi_)(?<!scgi_)(?<!grpc_)(?<!memcached_)"
    rf"(?:{_PASSWORD_WORDS}|rootpw)[ \t]+[\"']?([^\s\"'#;=:{{}}<>][^\s\"']{{2,127}}?)[\"']?[ \t]*(?:[ \t][#;][^\n]*)?$"
)


def not_a_word(value: str) -> bool:
    """A digit or a symbol in it, or letters no name is written in (`random_letters`)."""
    return any(not c.isalpha() for c in value) or random_letters(value)


def plain_secret(value: str) -> bool:
    """A letter, and a digit, a symbol or letters no name is written in (`random_letters`); not a path, a URL or a
    reference (`PASS_MIN_LEN 5`, `password /etc/pw`, `pass $PW` are no passwords)."""
    return (
        any(c.isalpha() for c in value)
        and not_a_word(value)
        and not is_path(value)
        and "://" not in value
        and not is_reference(value)
    )


def _directive_password(match: re.Match[str], _text: str) -> bool:
    return plain_secret(match.group(1))


# What stands for a value rather than being one: a variable (`$PASS`, `${db.password}`, `$(cat f)`, `$opt{w}`), a
# format or template slot (`%(password)s`, `%PASS%`, `{{ x }}`, `{password}`, `<password>`), a bind parameter
# (`:pass`, `@pass`, `?`), a call (`get_password()`), a Makefile's `$$PASS`. A strong password may still open with
# `$`, `%` or `@` (`$9ZNsEC(VC`, `@37BaToox2`).
_REFERENCE = re.compile(r"^(?:\$\$?[A-Za-z_{(]|%\(|%\w+%$|[{<]|[:@][A-Za-z_]\w*$|\?\d*$)|\$[{(]|\{\{|^[\w.]+\(.*\)$")


def is_reference(value: str) -> bool:
    return _REFERENCE.search(value) is not None


_FILE_KEY = re.compile(r"(?:file|path|dir)[ \t]*[=:]")  # `password_file: secrets/db`: where the password is


def _config_password(match: re.Match[str], _text: str) -> bool:
    """A `secret` of 16 characters or more is a key (`SECRET_KEY=...`, the key rule's), shorter a password."""
    name = match.group(0)[: match.start(1) - match.start(0)].lower()
    if is_reference(match.group(1)) or _FILE_KEY.search(name):
        return False
    return "secret" not in name or re.search(_PASSWORD_WORDS, name) is not None or len(match.group(1)) < 16


# Outside config files: `SA_PASSWORD=...` in a shell line, `password=...` in a docs' config snippet, `?pass=...`
# in a URL, `Password=...;` in a connection string, the value unquoted right after `=` (symbols and all). Only
# values with a digit or a symbol and no code shape: not `password=password`, `password=self.password`,
# `password=get(...)`, `password=${PASS}`. A `&` ends the value where a URL's next parameter follows.
_ENV_PASSWORD = re.compile(
    rf"(?im)(?<![\w-])[\w\-]*?{_PASSWORD_WORDS}[\w\-]*="
    rf"([^\s\"'`#;,&{{}}\[\]<>\\](?:[^\s\"'`;,&{{}}\[\]<>\\]|&(?![\w.\-]+=|(?:amp|quot|lt|gt|#\d+);)){{5,127}})"
    r"(?=[\s\"'`&;,\\]|$)"
)
_ENV_KEY = re.compile(rf"(?im)(?<![\w-])[\w.\-]*?{_KEY_WORDS}[\w.\-]*=([A-Za-z0-9+/=_\-.~]{{16,}})(?=[\s\"'`&;,\\]|$)")
# A literal handed to a password-hashing or login API is a password (`ctx.hash("...")`, `bcrypt.hashpw(b"...")`,
# `user.set_password("...")`, `check_password_hash(h, "...")`), and one handed to a JWT or HMAC library as its
# signing key is a key (`jwt.encode(payload, "...")`, `jwt.sign({...}, '...')`).
_PASSWORD_CALL_BEFORE = re.compile(
    r"(?:\.(?:hash|verify|encrypt|genhash|hashpw|checkpw|set_password|check_password)|"
    r"\b(?:make_password|check_password|generate_password_hash|check_password_hash|hashpw|checkpw|\w*Community\w*))"
    r"\([^()\n]{0,80}?(?:,[ \t]*)?[bu]?$"
)
_PAIR_WORDS = ("auth", "credential", "creds", "login", "authenticate")
_SIGNING_LIBRARY = (
    "jwt.",
    "jws.",
    "jwe.",
    "jose.",
    "hmac.",
    "Cookie",
    "SessionFactory(",
    "Signer(",
    "Serializer(",
    "Fernet(",
    "HMAC(",
)
# The second of a (user, secret) pair: `auth=("admin", "...")`, `basic_auth=(...)`, `credentials=(...)`,
# `login("jroe", "...")`, `Auth.Login("jroe", "...")`, `HTTPBasicAuth("jroe", "...")`, PHP's `"auth" => ["jroe",
# "..."]`.
_PAIR_BEFORE = re.compile(
    r"(?i)(?:\b(?:\w*_)?(?:auth(?:entication)?|credentials?|creds)(?:\[\])?[\"']?[ \t]*(?:=>|[=:])[ \t]*"
    r"(?:array[ \t]*)?[(\[{]|"
    r"\b(?:login|authenticate|basicauth|httpbasicauth|httpdigestauth)[ \t]*\()"
    r"""\s*[bu]?["'][^"'\n]{1,80}["']\s*,\s*[bu]?$"""
)  # the pair perhaps over lines of its own, or in an array: `String[] creds = {"jroe", "..."}`
_SIGNING_CALL_BEFORE = re.compile(
    r"(?:\b(?:jwt|jws|jwe|jose|hmac)\.(?:encode|decode|sign|verify|new)\([^;]{0,300}|"
    r"\b\w*(?:Cookie\w*|SessionFactory|Signer|Serializer|Fernet|HMAC)\([ \t]*(?:secret[ \t]*=[ \t]*)?[bu]?[\"'])$"
)  # and a random literal handed to a signed-cookie or signer helper: `SignedCookieSessionFactory("...")`
# `--password <value>` on a command line (`napalm --user u --password ...`, `mysql --password=...`).
_CLI_PASSWORD = re.compile(r"(?<![\w-])--pass(?:word|wd)?(?:=|[ \t]+)(?!-)([^\s\"'`<>{}]{6,128})(?=[\s\"'`;]|$)", re.M)
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_CONFIG_KEY = _config_line(_KEY_WORDS, r"[A-Za-z0-9+/=_\-.~]{16,}")


def _config_key(match: re.Match[str], _text: str) -> bool:
    return _looks_random(match.group(1))


def _password_literal(value: str) -> bool:
    """Six characters or more, one of them not a letter: a password, not a word (`"password"`, `"admin"`)."""
    return len(value) >= 6 and not_a_word(value)


def _token_literal(value: str) -> bool:
    """Twenty random characters or more: an API token rather than a password (`maple-river-cloud-stone-417`, words
    joined, is a passphrase)."""
    return len(value) >= 20 and _looks_random(value) and rules.is_gibberish(value)


def _called_with_password(match: re.Match[str], text: str) -> bool:
    return _password_literal(match.group(0)) and _preceded_by(_PASSWORD_CALL_BEFORE, match.start() - 1, text, 100)


def _paired_secret(match: re.Match[str], text: str) -> bool:
    """The second of a (user, secret) pair, unless a token (the key rule takes those)."""
    value = match.group(0)
    return (
        _password_literal(value)
        and not _DOTTED_NAME.fullmatch(value)  # `"rest_framework.authentication.TokenAuthentication"`
        and _preceded_by(_PAIR_BEFORE, match.start() - 1, text, 120)
        and not _token_literal(value)  # last: the bigram model reads only the values in a pair's place
    )


def _paired_key(match: re.Match[str], text: str) -> bool:
    """A (user, token) pair's token (`basic_auth=("email", "<api token>")`)."""
    return _token_literal(match.group(0)) and _preceded_by(_PAIR_BEFORE, match.start() - 1, text, 120)


def _signing_key(match: re.Match[str], text: str) -> bool:
    value = match.group(0)
    return (bool(_HEX.fullmatch(value)) or _looks_random(value)) and _preceded_by(
        _SIGNING_CALL_BEFORE, match.start(), text, 300
    )


_CODE_VALUE = re.compile(r"[A-Za-z_][\w.]*\(|\(|/")  # `dict(type=...`, `os.environ.get(`, `(new_password)`, a path


def _env_password(match: re.Match[str], _text: str) -> bool:
    """A digit or a symbol, and no code's shape (`key_password=key_password`, `password=self.password`)."""
    value = match.group(1)
    return (
        (any(not c.isalpha() and c != "_" for c in value) or random_letters(value))
        and not _DOTTED_NAME.fullmatch(value)
        and not is_reference(value)
        and not _CODE_VALUE.match(value)
        and value.count(")") <= value.count("(")  # `password=password)`: the call's own parenthesis
    )


# --- person names -------------------------------------------------------------------------------------------


# A name is two to five capitalised words (`María José García`, `O'Brien`, `Jean-Luc`, `McDonald`, initials
# `J.`, `J` or `TJ` before the last), with particles between them (`Guido van Rossum`). The last word holds a
# lowercase letter, or is a family name in capitals after a first name (`Adrien CLERC`, as French lists write
# it), so the all-capitals runs of license texts (`COPYRIGHT HOLDERS AND CONTRIBUTORS`) are no names. Latin,
# Greek and Cyrillic letters: the cased scripts; names in scripts without case are left to the model.
def _letters(cased: Callable[[str], bool]) -> str:
    """Latin-1 to Cyrillic, and Latin Extended Additional (Vietnamese's `Nguyễn`, Welsh's `Ŵ`)."""
    points = [*range(0xC0, 0x530), *range(0x1E00, 0x1F00)]
    return "".join(c for c in map(chr, points) if c.isalpha() and cased(c))


# Lowercase letters and combining marks (`Neuhäuser` written as `a` + U+0308).
_UP, _LOW = "A-Z" + _letters(str.isupper), "a-z" + _letters(str.islower) + "\u0300-\u036f"
_WORD = rf"[{_UP}](?:['’]?[{_UP}])?[{_LOW}]+(?:[{_UP}][{_LOW}]+)?(?:-[{_UP}]?[{_LOW}]+)?(?!\w|[-'’]\w)"
_PARTICLE = r"(?:van|von|der|den|de|da|del|della|di|du|la|le|bin|ibn|al|el|dos|das|do|ten|ter|zu)"
_INITIALS = rf"[{_UP}]\.?|[{_UP}]{{2,3}}(?![\w'’-])"
_CAPITALS = rf"[{_UP}]{{2,}}(?:-[{_UP}]{{2,}})?(?![\w'’-])"
_PERSON = (
    rf"(?<![\w.-])(?<!\w['’])(?:(?:(?:{_WORD}|{_INITIALS})[ \t]+(?:{_PARTICLE}[ \t]+)*){{0,3}}{_WORD}[ \t]+{_CAPITALS}"
    rf"|(?:(?:{_WORD}|{_INITIALS})[ \t]+(?:{_PARTICLE}[ \t]+)*){{1,4}}{_WORD})"
)
_PERSON_AT = re.compile(_PERSON)
_YEARS = r"(?:(?:19|20)\d\d(?:[ \t]*[-–—][ \t]*(?:(?:19|20)?\d\d|present|now))?[ \t,]*)*"
# One item of a list of holders or authors: years, `by`, then a name (or anything else up to the next
# separator: `Google LLC`, `Facebook, Inc.`), an email or URL in brackets, the closing quote. A name ends at a
# separator, a bracket, a digit, an address or a comment's close (`/* Copyright (C) 2019 Jane Roe */`, `-->`).
_ITEM = re.compile(
    rf"""[ \t]*{_YEARS}(?:by[ \t]+)?\[?"""
    rf"""(?:(?P<name>{_PERSON})(?=[ \t]*(?:[,;&/<(."'\]\r*|#}}]|-->|and\b|\d|[\w.+-]+@|$))|"""
    r"""[^,;&\r\n<>()"'\]]+?(?=[ \t]*(?:[,;&/<("'\]\r]|and\b|$)))"""
    r"""[ \t]*(?:<[^<>\n]*>|\([^()\n]*\))?[ \t]*["']?""",
    re.MULTILINE,
)
_SEPARATOR = re.compile(r"""[ \t]*(?:,|;|&|/|\band\b)[ \t]*(?:and[ \t]+)?["']?""")


def _listed_names(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The names of a list on one line (`Jane Roe, Tom Li and Google LLC <x@y.z>`) from `start`, up to the
    first thing that is not a list item (`. All rights reserved.`)."""
    while start < end:
        item = _ITEM.match(text, start, end)
        if item is None or item.end() == start:
            return
        if item.group("name"):
            yield item.span("name")
        separator = _SEPARATOR.match(text, item.end(), end)
        if separator is None:
            return
        start = separator.end()


def _name_before(text: str, end: int) -> Iterator[tuple[int, int]]:
    """The name that ends at `end` (`Jane Roe` of `Jane Roe for the patch`), if one does."""
    name = _PERSON_BEFORE.search(text, max(0, end - 100), end)
    if name is not None:
        yield name.start(), name.start() + len(name.group(0).rstrip())


def not_prose(
    names: Callable[[str, int, int], Iterator[tuple[int, int]]],
) -> Callable[[str, int, int], Iterator[tuple[int, int]]]:
    """`names`, less the capitalised runs whose every word is an English word (`Sample Enum for testing`,
    `Document Title` under an `Author` line): for the places where only position says a name is there."""

    def read(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
        words = rules.english_words()
        for a, b in names(text, start, end):
            if not all(word.lower().strip(".") in words for word in text[a:b].split()):
                yield a, b

    return read


_AND = re.compile(r"[ \t]*(?:,[ \t]*(?:and[ \t]+)?|and[ \t]+|&[ \t]*)")


def _credited_names(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The names right after a credit (`Jane Roe for the patch`, `Jane Roe, Tom Li and Ann Lee.`), whatever
    follows them."""
    while (name := _PERSON_AT.match(text, start, end)) is not None:
        yield name.span()
        more = _AND.match(text, name.end(), end)
        if more is None:
            return
        start = more.end()


# A quoted value that is a whole name (with an email or URL): `"Jane Roe <jane@x.org>"`, `name = "Jane Roe"`.
_QUOTED_NAME = re.compile(rf"""["']({_PERSON})[ \t]*(?:<[^<>\n"']*>)?[ \t]*(?:\([^()\n"']*\))?["']""")


def _quoted_names(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Every quoted name between `start` and `end` (a manifest's list or table of authors)."""
    for match in _QUOTED_NAME.finditer(text, start, end):
        yield match.span(1)


# A line of an AUTHORS or CONTRIBUTORS list: a bullet, a name, then up to two of an email, a URL, a
# `(@handle)`, the date they joined (`, 2013/04/09`) and a handle's profile link (`[@jroe](https://...)`,
# reStructuredText's `` `@jroe <https://...>`_ ``).
_NAME_TAIL = (
    r"(?:<[^<>\n]*>|\([^()\n]*\)|https?://\S+|,?[ \t]*\d{4}[-/]\d\d[-/]\d\d|,?[ \t]*\[@[\w-]+\]\([^()\s]*\),?"
    r"|`@[\w-]+[ \t]*<[^<>\s]*>`_?|[A-Z]<[^<>\n]*>)"  # and POD's `L<...>`, `C<...>`
)
_NAME_LINE = re.compile(
    rf"[ \t]*(?:[-*+•][ \t]+|=item[ \t]+(?:\*[ \t]+)?)?({_PERSON})[ \t]*(?:{_NAME_TAIL}[ \t]*){{0,2}}\r?(?:\n|$)"
)
# Lines a list goes on past: blank, `#` comments, rules (`=====`), and short lines of no code or markup
# (`Google Inc.`, `- jroe`, the rest of the heading's paragraph; not `<title>`).
_LIST_LINE = re.compile(
    r"[ \t]*(?:#[^\n]*|[=\-~*^]+|=(?:over|back|item)\b[^\n]*|[^\n={};<>]{1,100})?[ \t]*\r?(?:\n|$)"
)  # POD's `=over 4`, `=item *`, `=back` between the names
_UNDERLINE = re.compile(r"[ \t]*[=\-~^*]{3,}[ \t]*\r?(?:\n|$)")


def _name_lines(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The names of the one-a-line list that starts at `start` (the line after an `AUTHORS` heading), up to
    the first line of something else (code, prose, a heading underlined with `===`)."""
    while start < end:
        line = _NAME_LINE.match(text, start, end)
        if line is not None and _UNDERLINE.match(text, line.end(), end) is None:
            yield line.span(1)
            start = line.end()
            continue
        rest = _LIST_LINE.match(text, start, end)
        if rest is None or rest.end() == start or _UNDERLINE.match(text, rest.end(), end) is not None:
            return
        start = rest.end()


@dataclass(frozen=True)
class NamePlace:
    """A place where code lists people: `regex` finds it, and `names` reads their names from the match's
    `list` group onwards (text, start, end of the group) as (start, end) spans.

    Attributes:
        name: Recorded as `pattern:<name>`.
        regex: Finds the place, starting on a line that holds one of `keywords`; its group `list` (or
            `table`) is where the names are, or with neither, the lines after the match.
        keywords: Lowercase words, one of which is on the line where a match starts (none: the first line).
        names: Reads the names in the group.
        check: Keeps a match only if `check(match, text)` holds.
        reach: How far past its first line a match may run (multi-line tables and lists).
        anchor: Lowercase strings one of which every text with such a place holds (`("developer",)`): a text
            without any skips the place.
    """

    name: str
    regex: re.Pattern[str]
    keywords: tuple[str, ...]
    names: Callable[[str, int, int], Iterator[tuple[int, int]]] = _listed_names
    check: Callable[[re.Match[str], str], bool] | None = None
    reach: int = 1
    anchor: tuple[str, ...] | None = None


_REST = r"(?P<list>[^\n]{1,300})"  # the names run to the end of the line
_AUTHOR_WORDS = ("author", "maintainer", "contributor", "developer", "creator", "credits", "owner")
_AUTHOR_KEY = r"(?:authors?|maintainers?|contributors?|developers?|creators?|credits|owners?)"
# One person's block of a build manifest: Maven's `<developer>`/`<contributor>`, PEAR's `<lead>`/`<helper>`, ...
_PERSON_BLOCKS = "developer|contributor|lead|helper|maintainer|author|person"
_OPEN_DEVELOPER = re.compile(rf"(?s)<(?:{_PERSON_BLOCKS})>(?:(?!</(?:{_PERSON_BLOCKS})>).)*$")


def _in_developer(match: re.Match[str], text: str) -> bool:
    """A `<name>` (or `<id>`) inside one person's block of a pom.xml or a PEAR package.xml (not the project's
    own `<name>`)."""
    return _preceded_by(_OPEN_DEVELOPER, match.start(), text, 1000)


NAME_PLACES = [
    # `Copyright (c) 2019-2021 Jane Roe`, `(C) 2021 Jan Kowalski <jan@x.pl>`, `© 2020 María José García`,
    # `SPDX-FileCopyrightText: 2022 Jane Roe`, Debian's `Copyright: 2010 Jane Roe`.
    NamePlace(
        "copyright",
        re.compile(
            r"(?i:(?<![\w-])copyright(?![\w-])|\(c\)|©|SPDX-File(?:CopyrightText|Contributor):)"
            rf"""(?:[ \t:,="']*(?i:copyright(?![\w-])|\(c\)|©))*[ \t:,="']*"""
            rf"""(?:f?["']?\{{[^{{}}\n]{{0,60}}\}}[ \t,]*)?{_REST}"""  # Sphinx's `copyright = f"{year} Jane Roe"`
        ),
        ("copyright", "(c)", "©", "spdx-file"),
    ),
    # A copyright's next line when it holds more holders, each with its years: POD's
    # `Copyright 2006-2011 Jane Roe,\n2009-2010 Tom Li, III, 2017 Ann Lee.`
    NamePlace(
        "copyright",
        re.compile(
            r"(?i:(?<![\w-])copyright(?![\w-])|\(c\)|©)[^\n]*\n[ \t#*;/]*"
            r"(?P<list>(?:19|20)\d\d(?:[ \t]*[-–][ \t]*(?:19|20)?\d\d)?,?[ \t]+[^\W\d_][^\n]{1,300})"
        ),
        ("copyright", "(c)", "©"),
        reach=400,
    ),
    # `__author__ = "Jane Roe"`, `Author: Jane Roe`, `@author Jane Roe`, `"author": "Jane Roe <jane@x.org>"`,
    # `spec.authors = ["Jane Roe", "Tom Li"]`, `authors = ["Jane Roe <jane@x.org>"]` (Cargo), PKG-INFO's
    # `Author-email: Jane Roe <jane@x.org>`, `maintainer="Jane Roe"` (setup.py).
    NamePlace(
        "author_field",
        re.compile(
            rf"""(?i:@author[ \t]+|(?<![\w-])(?:__)?{_AUTHOR_KEY}(?:__)?(?:[_-]e-?mail)?["']?[ \t]*(?:=>|:=|[:=])"""
            rf"""[ \t]*\[?[ \t]*(?:f?["'])?){_REST}"""
        ),
        _AUTHOR_WORDS,
    ),
    # Manifests' tables and lists of people across lines: package.json `"author": {"name": "Jane Roe"}` and
    # `"contributors": [...]`, pyproject `authors = [{name = "Jane Roe", email = "..."}]`, Cargo and gemspec.
    NamePlace(
        "author_table",
        re.compile(
            rf"""(?i:{_AUTHOR_KEY}["']?[ \t]*(?:=|:)[ \t]*)"""
            r"(?:\[(?P<list>[^\]]{1,3000})\]?|\{(?P<table>[^}]{1,1000})\})"
        ),
        _AUTHOR_WORDS,
        names=_quoted_names,
        reach=3000,
    ),
    # pom.xml: `<developer><id>jroe</id><name>Jane Roe</name>...</developer>`.
    NamePlace(
        "pom_developer", re.compile(r"<name>[ \t]*(?P<list>[^<\n]{1,200})</name>"), ("<name>",), check=_in_developer
    ),
    # Git trailers: `Signed-off-by: Jane Roe <jane@x.org>`, `Co-authored-by: ...`.
    NamePlace(
        "trailer",
        re.compile(
            r"(?i:(?:signed-off|co-authored|reviewed|acked|tested|reported|suggested|helped|reviewed-and-tested|"
            r"assisted|co-developed|originally-authored|requested|bisected|analyzed|analysed|found|inspired)"
            rf"-by[ \t]*:[ \t]*){_REST}"
        ),
        ("-by",),
    ),
    # Docstrings and comments: `Written by Jane Roe`, `Originally written by Jane Roe and Tom Li`.
    NamePlace(
        "written_by",
        re.compile(
            r"(?i:(?<![\w-])(?:written|created|maintained|contributed|developed|authored|implemented|ported|"
            rf"rewritten|designed|coded|programmed|originally)[ \t]+by[ \t]+){_REST}"
        ),
        ("written", "created", "maintained", "contributed", "developed", "authored", "implemented", "ported")
        + ("designed", "coded", "programmed", "originally"),
    ),
    # Changelogs and docs: `Thanks to Jane Roe`, `Thanks, Jane Roe.`, `Pull request courtesy Jane Roe`,
    # `Reported by Jane Roe`, `Patch provided by Jane Roe`.
    NamePlace(
        "credit",
        re.compile(
            r"(?i:(?<![\w-])(?:(?:many|special|big|huge)[ \t]+)?thanks(?:[ \t]+(?:go(?:es)?[ \t]+)?to|,)[ \t]+|"
            r"(?<![\w-])(?:courtesy(?:[ \t]+of)?|props[ \t]+to|kudos[ \t]+to|credit[ \t]+to|fix(?:ed)?[ \t]+via|"
            r"(?:patch(?:es)?|fix(?:es)?|contributions?|reports?|ideas?|help)[ \t]+from)"
            r"[ \t]+|(?<![\w-])(?:(?:original[ \t]+)?patch(?:es)?|review(?:ed)?)[ \t]+by[ \t]+|"
            r"(?<![\w-])(?:reported|suggested|provided|fixed|patched|requested|submitted|proposed|sponsored|funded|"
            rf"translated|debugged|diagnosed|investigated|spotted|noticed|found|identified|raised|analy[sz]ed|"
            rf"pointed[ \t]+out)[ \t]+by[ \t]+){_REST}"
        ),
        ("thanks", "courtesy", " by ", "props", "kudos", "credit", "via", " from "),
        names=_credited_names,
    ),
    # Changelogs: `Jane Roe for the report`, `to Tom Li for the patch`.
    NamePlace(
        "credit_for",
        re.compile(
            r"(?P<list>)[ \t]+for[ \t]+(?:(?:the|an?|his|her|their|initial|original|early)[ \t]+)*"
            r"(?:bug[ \t]+)?(?:reports?|patch(?:es)?|fix(?:es)?|help|reviews?|contributions?|suggestions?|ideas?|"
            r"implementation|pull[ \t]+requests?|PRs?|submitting|reporting|testing)\b"
        ),
        (" for ",),
        names=not_prose(lambda text, start, _end: _name_before(text, start)),
    ),
    # A name right before its forge handle: `- Jane Roe `@jroe <https://github.com/jroe>`_`, `Jane Roe, [@jroe](...)`.
    NamePlace(
        "name_handle",
        re.compile(
            rf"(?P<list>{_PERSON}),?[ \t]+(?:`@[\w-]+[ \t]*<|\[@[\w-]+\]\()https?://(?:www\.)?(?:github|gitlab)\.com/"
        ),
        ("github.com/", "gitlab.com/"),
        names=lambda _text, start, end: iter([(start, end)]),
    ),
    # A name as the text of a link to its forge profile: `[Jane Roe](https://github.com/jroe)`, reStructuredText's
    # `` `Jane Roe <https://github.com/jroe>`_ ``.
    NamePlace(
        "profile_link",
        re.compile(
            rf"(?:\[(?P<list>{_PERSON})\]\(|`(?P<table>{_PERSON})[ \t]+<)https?://(?:www\.)?(?:github|gitlab)\.com/[\w-]+/?[)>]"
        ),
        ("github.com/", "gitlab.com/"),
        names=lambda _text, start, end: iter([(start, end)]),
    ),
    # `.mailmap`, AUTHORS files, Debian copyright and changelogs: a name right before an email, anywhere
    # (`Jane Roe <jane@x.org>`, `Jane Roe (jane@x.org)`).
    NamePlace(
        "name_email",
        re.compile(rf"(?P<list>{_PERSON})[ \t]*(?:<|\()[\w.+%-]+@[\w-]+(?:\.[\w-]+)+(?:>|\))"),
        ("@",),
        names=lambda _text, start, end: iter([(start, end)]),
        check=lambda match, text: not _preceded_by(_LANGUAGE_TEAM, match.start(), text, 40),
    ),
    # AUTHORS and CONTRIBUTORS files, credits sections: the names one a line after the heading.
    NamePlace(
        "name_list",
        re.compile(
            r"(?im)^[ \t#*=\-]*(?:[^\n]{0,100}[ \t])?(?:authors|contributors|contributions|maintainers|credits|"
            r"committers|acknowledg\w*|thanks(?: to)?)\b[^\n]{0,80}\n"
        ),  # no `list` group: the names are on the lines after it (each heading, as `Maintainers` after
        # `Ex-maintainers`, starts its own list)
        ("author", "contributor", "contribution", "maintainer", "credits", "committer", "acknowledg", "thanks"),
        names=_name_lines,
    ),
    # An AUTHORS file with no heading: a text that starts with three name lines.
    NamePlace(
        "name_file",
        re.compile(
            rf"\A(?=(?P<list>(?:[ \t]*(?:[-*+•][ \t]+)?{_PERSON}[ \t]*(?:{_NAME_TAIL}[ \t]*){{0,2}}\r?\n){{3}}"
            rf"[\s\S]{{0,20000}}))"
        ),
        (),
        names=_name_lines,
        reach=20001,
    ),
]


# --- handles -------------------------------------------------------------------------------------------------

# Where code credits a person by handle (the model finds the rest: `@jroe` in prose, `TODO(jroe)`). A handle is
# GitHub's shape: letters, digits and dashes, at most 39.
_HANDLE = r"[A-Za-z0-9](?:[\w-]{0,38})"
_FORGE = r"https?://(?:www\.)?(?:github|gitlab)\.com/"
# JSDoc, Javadoc and Doxygen tags that prose puts after `(` or `,` (`{@link Foo}`, `(@code x)`): not handles.
_DOC_TAGS = (
    r"(?:link|linkplain|code|inheritdoc|author|version|value|internal|private|public|protected|static|const|"
    r"callback|typedef|class|module|file|license|namespace|memberof|abstract|async|event|summary|description|"
    r"ignore|interface|implements|extends|exports|readonly|requires|yields|enum|function|brief|ref|c|p|a|b)\b"
)
# Words that sit where a credit's handle does (`(see #12)`, `(fixes #3)`), not handles.
_NOT_HANDLES = frozenset(
    "see fix fixes fixed close closes closed resolve resolves resolved issue issues pr prs pull bug bugs ref refs "
    "ticket tickets gh also and via in from per cf part re was related reverts revert backport port follow up "
    "thanks by debian ubuntu github gitlab redhat fedora upstream launchpad lp rt cpan sourceforge savannah bugzilla "
    "gnome kde freedesktop".split()
)  # fmt: skip


def _credit_handle(match: re.Match[str], _text: str) -> bool:
    return match.group(1).lower() not in _NOT_HANDLES


_LINE_OPENING = re.compile(r"[ \t#*/\-+•]*(?:(?:19|20)\d\d(?:[-–]\d{2,4})?,?[ \t]+)?")  # before a listed name
_ACRONYM = re.compile(r"[A-Z]{2,}[a-z]{1,3}")  # `(ARNs)`, `(CMKs)`, `(MACsec)`: plural or mixed acronyms, no handles


def _listed_handle(match: re.Match[str], _text: str) -> bool:
    """A one-word entry of an AUTHORS list before an email is a handle (`414nch4n`, `WoLpH`, `kracekumar`), not
    a capitalised word (`Maintainer <...>`) nor a first name alone."""
    word = match.group(1)
    if _ACRONYM.fullmatch(word):
        return False
    return any(c.isdigit() for c in word) or word.islower() or any(c.isupper() for c in word[1:])


_LANGUAGE_TEAM = re.compile(r"Language-Team:[ \t]*$")  # gettext headers name a team there, not a person
_PERSON_BEFORE = re.compile(rf"{_PERSON}[ \t]*$")  # `Jane Roe ` before `(jroe)`
# What comes before a credited `@jroe`: `Thanks `, `by `, `and `, `(`, `, `, `#5906 `.
_CREDIT_BEFORE = re.compile(
    r"(?:(?<![\w-])(?i:thanks(?:[ \t]+to)?|thank[ \t]+you|by|from|cc|and|props[ \t]+to|kudos[ \t]+to)[ \t]+|"
    r"[(,][ \t]*|#\d+[ \t]+)$"
)


def _person_handle(match: re.Match[str], text: str) -> bool:
    """`(jroe)` right after a person's name (`John Vrbanac (jmvrbanac)`), shaped like a handle, not a nickname."""
    if not _listed_handle(match, text):
        return False
    before = _PERSON_BEFORE.search(text, max(0, match.start() - 120), match.start())
    if before is None or rules.is_organisation(before.group(0).strip()):
        return False
    word = match.group(1)
    if word.islower() and word in rules.english_words():  # `the Wavelength Zone (available)`
        return False
    # In capitals (CPAN's `Jane Roe (JROE)`) only after a name that opens its line: `Internet Control Message
    # Protocol (ICMP)`, `JSON Web Key Set (JWKS)` in prose are acronyms.
    opening = text[text.rfind("\n", 0, before.start()) + 1 : before.start()]
    initials = "".join(w[0] for w in re.split(r"[ \t\-]+", before.group(0).strip())[-len(word) :]).upper()
    return not word.isupper() or (_LINE_OPENING.fullmatch(opening) is not None and initials != word)


HANDLE_RULES = [
    # `[@jroe](https://github.com/jroe)`, `` `@jroe <https://github.com/jroe>`_ ``: the link says it is a handle.
    Rule("handle_link", re.compile(rf"\[@({_HANDLE})\]\({_FORGE}\1/?\)"), ((1, USERNAME),), 0.9, anchor="@"),
    Rule("handle_link", re.compile(rf"`@({_HANDLE})[ \t]*<{_FORGE}\1/?>`"), ((1, USERNAME),), 0.9, anchor="@"),
    # Sphinx's `:user:` role (sphinx-issues), in changelogs.
    Rule("user_role", re.compile(rf":(?:gh-|github:)?user:`@?({_HANDLE})`"), ((1, USERNAME),), 0.9, anchor=":user:"),
    # A changelog entry's credit: `(jroe #1437)`, `(@jroe, #12)`.
    Rule(
        "credit_handle",
        re.compile(rf"\(@?({_HANDLE})(?:,?[ \t]+(?:#\d+|PR[ \t]*#?\d+|GH-\d+))+\)"),
        ((1, USERNAME),),
        0.8,
        _credit_handle,
        keywords=("#",),
    ),  # fmt: skip
    Rule(
        "credit_handle",
        re.compile(r"(?<![\w-])courtesy(?:[ \t]+of)?[ \t]+@?([a-z0-9][\w-]{1,38})\b(?![ \t]+[A-Z])"),
        ((1, USERNAME),),
        0.8,
        _credit_handle,
        anchor="courtesy",
    ),  # fmt: skip
    # Credits and AUTHORS lists: `- Jane Roe (jroe)`, `John Vrbanac (jmvrbanac), ...`, `414nch4n <chan@x.com>`
    # (also after `Copyright 2019`).
    Rule(
        "listed_handle", re.compile(rf" \(@?({_HANDLE})\)"), ((1, USERNAME),), 0.8, _person_handle, anchor=" ("
    ),  # fmt: skip
    Rule(
        "listed_handle",
        re.compile(
            rf"(?m)^[ \t#*/]*(?:[-*+•][ \t]+)?(?:Copyright[ \t]+(?:\([cC]\)[ \t]+)?[\d, -]+[ \t]+)?({_HANDLE})[ \t]*"
            r"<[^<>@\s]+@[^<>\s]+>[ \t]*\r?$"
        ),
        ((1, USERNAME),),
        0.8,
        _listed_handle,
        keywords=("@",),
    ),  # fmt: skip
    # `Thanks @jroe!`, `by @jroe`, `#5906 @jroe`, `(@jroe)`, `@jroe and @tli`: a handle where a changelog credits.
    Rule(
        "credit_handle",
        re.compile(rf"@(?!{AT_WORDS}|{_DOC_TAGS})({_HANDLE})(?![\w-]|\.\w|/|\()"),
        ((1, USERNAME),),
        0.8,
        lambda match, text: _preceded_by(_CREDIT_BEFORE, match.start(), text, 24),
        anchor="@",
    ),  # fmt: skip
    # A handle next to its own profile: `//! author : forabi https://github.com/forabi`.
    Rule(
        "handle_link",
        re.compile(rf"(?<![\w@/.-])({_HANDLE})[ \t:]*<?{_FORGE}\1/?(?![\w-])"),
        ((1, USERNAME),),
        0.9,
        keywords=("github.com/", "gitlab.com/"),
    ),  # fmt: skip
    # `user = "jroe"`, `'USER': 'jroe'`, `praw_username=jroe`; and CVS/RCS's `$Id: ... 2000/09/07 22:29:26 jroe Exp $`.
    Rule(
        "user_value",
        re.compile(
            r"""(?im)(?<![\w-])(?:[\w-]*_)?(?:user(?:_?name)?|login)["'\]]?[ \t]*(?:=>|:=|[:=])[ \t]*"""
            r"""(?:["'`]([^"'`\s{}%$<>=,]{2,64})["'`]|([A-Za-z0-9][\w.\-]{1,63})(?=[ \t]|\r?$))"""
        ),
        ((1, USERNAME), (2, USERNAME)),
        0.7,
        keywords=("user", "login"),
    ),  # fmt: skip
    Rule(
        "rcs_id",
        re.compile(
            rf"\$(?:Id|OpenBSD|NetBSD|FreeBSD|Header): [^$\n]*?\d{{4}}[/-]\d\d[/-]\d\d \d\d:\d\d:\d\dZ? ({_HANDLE}) "
            r"(?:Exp|Stab|Rel)\b"
        ),
        ((1, USERNAME),),
        0.9,
        anchor="$",
    ),  # fmt: skip
]


class NameRecognizer(EntityRecognizer):
    """A presidio recognizer for people's names where code lists them (`NAME_PLACES`); which of them name an
    organisation or a project is decided with the other post-processing, by `rules.is_organisation`."""

    def __init__(self, places: list[NamePlace], name: str = "NamePattern") -> None:
        self.places = places
        super().__init__(supported_entities=[NAME], name=name, supported_language="en", version="1")

    def load(self) -> None:
        pass

    def analyze(self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None) -> list:
        if entities and NAME not in entities:
            return []
        results = []
        low = lowered(text)
        for place in self.places:
            if place.anchor is not None and not any(anchor in low for anchor in place.anchor):
                continue
            for match in _matches(place, text, low):
                if place.check is not None and not place.check(match, text):
                    continue
                for start, end in place.names(text, *_names_span(match, len(text))):
                    result = RecognizerResult(NAME, start, end, 0.85)
                    result.recognition_metadata = {
                        RecognizerResult.RECOGNIZER_NAME_KEY: self.name,
                        RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id,
                        DETECTOR: f"pattern:{place.name}",
                    }
                    results.append(result)
        return results


def _matches(place: NamePlace, text: str, low: str) -> Iterator[re.Match[str]]:
    """`place.regex`'s matches that start on a line holding one of its keywords (`lines.py`: scanning every
    text with the regexes was slow; `benchmarks/pii_throughput.py` times the stage)."""
    starts = lines_with(text, low, place.keywords) if place.keywords else [0]
    for start in starts:
        line_end = text.find("\n", start)
        line_end = len(text) if line_end < 0 else line_end
        for match in place.regex.finditer(text, start, min(len(text), line_end + place.reach)):
            if match.start() > line_end:
                break
            yield match


def _names_span(match: re.Match[str], size: int) -> tuple[int, int]:
    """Where a match's names are: its `list` or `table` group, or the 20,000 characters after it."""
    for group in ("list", "table"):
        if group in match.re.groupindex and match.group(group) is not None:
            return match.span(group)
    return match.end(), min(size, match.end() + 20000)


def code_recognizers() -> list[EntityRecognizer]:
    """The recognizers for every file, with those of other ecosystems' idioms (`idioms.py`)."""
    from stackcurate.stages.pii import idioms

    return [
        RegexRecognizer(
            "EmailPattern", [Rule("email", _EMAIL, ((0, EMAIL),), 0.9, _is_email, anchor="@", one_line=True)]
        ),
        RegexRecognizer(
            "IpPattern",
            [
                Rule("ipv4", _IPV4, ((1, IP_ADDRESS),), 0.85, _is_ipv4, anchor=_DOTTED_QUAD, one_line=True),
                Rule("ipv6", _IPV6, ((1, IP_ADDRESS),), 0.85, _is_ipv6, anchor=_TWO_COLONS, one_line=True),
            ],
        ),
        RegexRecognizer(
            "KeyPattern",
            [
                Rule("token", _TOKEN_RUN, ((NAMED, KEY),), 0.95, refine=_TOKENS),
                Rule("slack_webhook", _SLACK_WEBHOOK, ((0, KEY),), 0.95, anchor="hooks.slack.com"),
                Rule("private_key_block", _PRIVATE_KEY, ((3, KEY),), 0.99, anchor="PRIVATE KEY"),
                Rule(
                    "key_assignment",
                    _QUOTED_LONG,
                    ((0, KEY),),
                    0.8,
                    _key_value,
                    keywords=("key", "secret", "token", "bearer", "authorization"),  # the name is on the value's line
                ),  # fmt: skip
                Rule("bearer", _BEARER, ((1, KEY),), 0.85, _bearer_value),
                Rule("bearer", _AUTHORIZATION, ((1, KEY),), 0.85, _bearer_value),
                Rule(
                    "env_key", _ENV_KEY, ((1, KEY),), 0.7, _config_key, keywords=("key", "secret", "token", "bearer")
                ),
                Rule("signing_key", _QUOTED_LONG, ((0, KEY),), 0.8, _signing_key, anchor=_SIGNING_LIBRARY),
                Rule("paired_key", _QUOTED_LONG, ((0, KEY),), 0.8, _paired_key, keywords=_PAIR_WORDS),
            ],
        ),
        NameRecognizer(NAME_PLACES + idioms.NAME_PLACES),
        RegexRecognizer("HandlePattern", HANDLE_RULES + idioms.HANDLE_RULES),
        *idioms.recognizers(),
        RegexRecognizer(
            "PasswordPattern",
            [
                Rule(
                    "password_assignment",
                    _QUOTED,
                    ((0, PASSWORD),),
                    0.85,
                    _password_value,
                    keywords=(
                        "pass",
                        "pwd",
                        "secret",
                        "authkey",
                        "auth_key",
                        "privkey",
                        "priv_key",
                        "bindpw",
                        "bind_pw",
                    ),
                ),
                Rule("cli_password", _CLI_PASSWORD, ((1, PASSWORD),), 0.75, _env_password, keywords=("--pass",)),
                Rule("env_password", _ENV_PASSWORD, ((1, PASSWORD),), 0.75, _env_password, keywords=("pass", "pwd")),
                Rule(
                    "password_argument",
                    _QUOTED,
                    ((0, PASSWORD),),
                    0.8,
                    _called_with_password,
                    keywords=("hash", "verify", "encrypt", "_password", "checkpw", "community"),
                ),  # fmt: skip
                Rule(
                    "paired_password", _QUOTED, ((0, PASSWORD),), 0.8, _paired_secret, keywords=_PAIR_WORDS, follow=3
                ),
                Rule("url_key", _URL_KEY, ((1, KEY), (2, KEY)), 0.95, _url_key, anchor="://"),
                Rule(
                    "connection_string",
                    _CONNECTION,
                    ((1, USERNAME), (2, EMAIL), (3, PASSWORD)),
                    0.9,
                    _connection,
                    anchor="://",
                    one_line=True,
                ),
                Rule("proxy_credentials", _PROXY_USERINFO, ((1, USERNAME), (2, PASSWORD)), 0.9, keywords=("proxy",)),
            ],
        ),
    ]


def config_recognizers() -> list[EntityRecognizer]:
    """Extra recognizers for config files, where values go unquoted."""
    return [
        RegexRecognizer(
            "ConfigPattern",
            [
                Rule("config_password", _CONFIG_PASSWORD, ((1, PASSWORD),), 0.8, _config_password),
                Rule("config_password", _CONFIG_DIRECTIVE_PASSWORD, ((1, PASSWORD),), 0.8, _directive_password),
                Rule("config_key", _CONFIG_KEY, ((1, KEY),), 0.75, _config_key),
            ],
        )
    ]


class OrderedRegistry(RecognizerRegistry):
    """Presidio keeps the first of two results with the same span, type and score, and hands out its
    recognizers in a set's order (another in every process): in name order, the same rule names a span found by
    two on every run."""

    def get_recognizers(self, *args: Any, **kwargs: Any) -> list[EntityRecognizer]:
        return sorted(super().get_recognizers(*args, **kwargs), key=lambda recognizer: recognizer.name)


class EncoderRecognizer(EntityRecognizer):
    """The model as a presidio recognizer, for presidio's one-text API (`analyzer(model).analyze(text)`).
    The stage calls :meth:`EncoderModel.spans` on whole batches instead, so windows share forward passes."""

    def __init__(self, model: "EncoderModel") -> None:
        self.model = model
        super().__init__(
            supported_entities=list(model.entities), name="EncoderRecognizer", supported_language="en", version="1"
        )

    def load(self) -> None:
        pass

    def analyze(self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None) -> list:
        results = []
        for span in self.model.spans([text])[0]:
            if entities and span.entity not in entities:
                continue
            result = RecognizerResult(span.entity, span.start, span.end, span.score)
            result.recognition_metadata = {
                RecognizerResult.RECOGNIZER_NAME_KEY: self.name,
                RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id,
                DETECTOR: span.detector,
            }
            results.append(result)
        return results
