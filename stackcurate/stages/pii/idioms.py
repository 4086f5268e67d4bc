"""Recognizers for the idioms other ecosystems write people and credentials in (issue 35).

The rules of `recognizers.py` grew from Python and JavaScript packages. Java, R, Perl, PHP, Ruby, Go and
shell write the same things their own way, and each way is a fixed syntax a regex reads exactly:

- people: R's `person("Given", "Family")` and DESCRIPTION's `Author:` field, POD's `=head1 AUTHOR` and its
  `E<lt>...E<gt>` / `C<...>` wrappers, Maven's and PEAR's `<developer>`/`<lead>` blocks with their `<id>`/`<user>`,
  Gradle's `developer { id/name }`, Debian changelogs' `[ Jane Roe ]`, `<a href="mailto:...">Jane Roe</a>`,
  GitHub's `Merge pull request #1 from jroe/branch`, `/home/jroe/` paths, obfuscated addresses
  (`jroe at example dot org`, `jroe[at]cpan.org`);
- credentials: the password handed to a basic-auth or login API (`setBasicAuth("u", "...")`,
  `new UsernamePasswordCredentials(...)`) or a database connect call (`DriverManager.getConnection(url, "u",
  "...")`, `DBI->connect($dsn, "u", "...")`), command-line flags (`curl -u u:...`, `mysql -p...`, `sshpass -p`,
  `redis-cli -a`, `htpasswd -b`, `docker login -p`, `keytool -storepass`...), XML configs (`<password>...</password>`,
  `<property name="password" value="..."/>`, `<name>...Password</name><value>`), netrc and fetchmailrc lines, SQL's
  `IDENTIFIED BY '...'`, Redis' `requirepass`, Go's and Oracle's DSNs, Azure's `AccountKey=` and
  `NewSharedKeyCredential`, AWS's `aws_secret_access_key`, session cookies; a handle where a name goes
  (`@author jroe`, `Copyright (c) 2021 jroe`, R's `Packaged: ...; jroe`).

Each list joins `code_recognizers()`; what is then spared (placeholders, example addresses, words) is decided by
`rules.py` as for every other span.
"""

import re
from collections.abc import Iterator

from presidio_analyzer import EntityRecognizer, RecognizerResult
from presidio_analyzer.nlp_engine import NlpArtifacts

from stackcurate.stages.pii.entities import DETECTOR, EMAIL, KEY, NAME, PASSWORD, USERNAME
from stackcurate.stages.pii.recognizers import (
    _DOTTED_NAME,
    _HANDLE,
    _IN_USERINFO,
    _LOW,
    _PERSON,
    _UP,
    NamePlace,
    NameRecognizer,
    RegexRecognizer,
    Rule,
    _credit_handle,
    _in_developer,
    _listed_handle,
    _looks_random,
    _name_lines,
    _preceded_by,
    _tld_extract,
    _token_literal,
    is_path,
    is_reference,
    not_a_word,
    not_prose,
    plain_secret,
    quoted_values,
)
from stackcurate.stages.pii.rules import _EXAMPLE_DOMAIN, ESCAPED_AT, common_words, english_words

# --- people ---------------------------------------------------------------------------------------------------

# One name word of R's `person()`: `"Matt"`, `"Sales de Andrade"`, `"Jens Peder"`; not `""`, `"@handle"`, roles.
_R_WORDS = rf"[{_UP}][{_LOW}{_UP}'’.\-]*(?:[ \t]+[{_UP}{_LOW}][{_LOW}{_UP}'’.\-]*){{0,3}}"
# `person(...)` with its arguments, `c(...)` vectors included
_R_PERSON = re.compile(r"(?P<list>\bperson\([^()]*(?:\([^()]*\)[^()]*)*\))")
_R_ARGUMENT = re.compile(
    rf"""(?:^|,)[ \t\r\n]*(?:(?P<key>given|family|first|last|middle)[ \t]*=[ \t]*)?(?:c\([ \t]*)?"""
    rf"""(?P<value>["'](?P<name>{_R_WORDS})["'](?:[ \t]*,[ \t]*["'](?P<more>{_R_WORDS})["'])?)"""
)

_TEMPLATE_PERSON = re.compile(r"""["'](?:First|Last|Given|Family|Your|Jane|John)["'][ \t\r\n]*[,)]""")


def _r_person_names(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The given and family names of `person("Given", "Family", role = ...)`, each quoted string its own span:
    positional arguments until the first named one, or `given =`/`family =` (a `c("A", "B")` vector of given
    names gives both)."""
    inside = text.find("(", start) + 1
    arguments = text[inside : end - 1]
    if _TEMPLATE_PERSON.search(arguments):  # usethis's and testthat's `person("First", "Last")` templates
        return
    at, positional = 0, 0
    while (argument := _R_ARGUMENT.match(arguments, at)) is not None:
        at = argument.end("value")
        if argument.group("key") is None:
            positional += 1
            if positional > 2:
                return
        for group in ("name", "more"):
            if argument.group(group):
                yield inside + argument.start(group), inside + argument.end(group)
    # named arguments after a positional one (`person("Jane", family = "Roe")`) or after `role = ...`
    for argument in re.finditer(r"\b(?:given|family)[ \t]*=[ \t]*(?:c\()?[ \t]*", arguments[at:]):
        value = re.match(rf"""["']({_R_WORDS})["']""", arguments[at + argument.end() :])
        if value is not None:
            yield inside + at + argument.end() + value.start(1), inside + at + argument.end() + value.end(1)


# DESCRIPTION's `Author:` field: items over continuation lines, each `Name [roles] (<ORCID>)`, split by commas.
_DCF_ITEM = re.compile(rf"(?:,|\band\b)?[ \t\r\n]*({_PERSON})[ \t]*(?:\[[^\]]*\]|\([^()]*\)|<[^<>]*>|[ \t\r\n])*")


def _dcf_names(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The names of a DCF field (`Author: Jane Roe [aut, cre],\\n  Tom Li [ctb]`) from `start` to `end`."""
    for line in re.finditer(r"[^\n]+", text[start:end]):
        for item in _DCF_ITEM.finditer(line.group(0)):
            yield start + line.start() + item.start(1), start + line.start() + item.end(1)


# A name right before an address in any wrapper: POD's `C<...>`, `F<...>`, `E<lt>...E<gt>`, `L<mailto:...>`,
# a comma first (`Jane Roe, C<jroe@cpan.org>`), or an obfuscated address (`E<lt>jroe[at]cpan.orgE<gt>`).
_MAILBOX = (
    r"[\w.+%-]+(?:@|[ \t]*[\[({<](?i:at)[\])}>][ \t]*|[ \t]+(?i:at)[ \t]+)[\w-]+"
    r"(?:(?:\.|[ \t]+(?i:dot)[ \t]+)[\w-]+)+"
)
_WRAPPED_EMAIL = re.compile(
    rf"(?P<list>{_PERSON})"
    rf"(?:,?[ \t]*\(?[ \t]*(?:[CFLI]<+[ \t]*<?(?:mailto:)?|E<lt>|<|\[|&lt;|mailto:)|,[ \t]*){_MAILBOX}"
)
# POD, Markdown and man pages: a heading that is only `AUTHOR`, `Maintainer`, `CURRENT MAINTAINER`, `Author(s)`,
# with the names on the lines after it (`recognizers.name_list` reads plural headings inside longer lines).
_AUTHOR_HEADING = re.compile(
    r"(?im)^[ \t#*=.]*(?:=head\d[ \t]+|\.SH[ \t]+)?(?:(?:current|original|primary|main|lead)[ \t]+)?"
    r"(?:author|maintainer)(?:\(s\)|s)?(?:[ \t]+(?:information|and[ \t]+(?:maintainers?|contributors?|copyright)))?"
    r"[ \t:]*\r?\n"
)
# `<a href="mailto:jroe@x.org">Jane Roe</a>` (Javadoc `@author`, HTML pages).
_MAILTO_LINK = re.compile(rf"""mailto:[^"'<>\s]+["']?[^<>\n]*>[ \t]*(?P<list>{_PERSON})[ \t]*</a>""")
# A Debian changelog's per-person section: `  [ Jane Roe ]`.
_CHANGELOG_SECTION = re.compile(rf"(?m)^[ \t]+\[[ \t]*(?P<list>{_PERSON})[ \t]*\][ \t]*\r?$")
# Gradle's `developer {` and `contributor {` blocks (Maven's and PEAR's XML blocks: `recognizers._in_developer`).
_OPEN_GRADLE_DEVELOPER = re.compile(r"(?s)\b(?:developer|contributor)[ \t]*\{[^{}]*$")
_GRADLE_FIELD = r"""(?:[ \t]*=[ \t]*|[ \t]+|\.set\([ \t]*)["']"""


def _in_gradle_developer(match: re.Match[str], text: str) -> bool:
    return _preceded_by(_OPEN_GRADLE_DEVELOPER, match.start(), text, 600)


def _one(_text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    yield start, end


# Groovy's `asNode().appendNode('developers').appendNode('developer')...appendNode('name', 'Jane Roe')`, and the
# properties of Gradle's Maven publishing plugins: `POM_DEVELOPER_NAME=Jane Roe`, `POM_DEVELOPER_ID=jroe`.
_APPEND_NODE = re.compile(
    r"""appendNode\([ \t]*["'](?P<field>name|id)["'][ \t]*,[ \t]*["'](?P<list>[^"'\n]{1,200})["']"""
)
_OPEN_APPEND_DEVELOPER = re.compile(
    r"""(?s)appendNode\([ \t]*["'](?:developer|contributor)["']"""
    r"""(?:(?!appendNode\([ \t]*["'](?:developer|contributor)["']).){0,600}$"""
)
_POM_PROPERTY = re.compile(
    r"(?im)^[ \t]*POM_(?:DEVELOPER|AUTHOR)_(?P<field>NAME|ID)[ \t]*[=:][ \t]*(?P<list>[^\n\r]{1,200}?)[ \t]*\r?$"
)


def _developer_node(match: re.Match[str], text: str) -> bool:
    return _preceded_by(_OPEN_APPEND_DEVELOPER, match.start(), text, 700)


# A record of a person in any literal: `[id: 'jroe', name: 'Jane Roe', email: '...']` (Groovy), `{"name": "Jane
# Roe", "email": ...}`, `name => 'Jane Roe', email => ...` (Perl), `(name = "Jane Roe", email = ...)`.
_NAMED_PERSON = re.compile(rf"""(?i:\bname)["']?[ \t]*(?:=>|[:=])[ \t]*["'](?P<list>{_PERSON})["']""")
_RECORD_EMAIL = re.compile(r"""(?i)\b(?:e-?mail|mail)["']?[ \t]*(?:=>|[:=])""")


_ADDRESS = re.compile(r"[\w.+%-]+@([\w-]+(?:\.[\w-]+)+)")


def _in_person_record(match: re.Match[str], text: str) -> bool:
    """An email key in the same literal: between the brackets around the name, on its line or the next two."""
    lo = max(text.rfind(c, 0, match.start()) for c in "[{(")
    his = [i for i in (text.find(c, match.end()) for c in "]})") if i >= 0]
    hi = min(his) if his else len(text)
    if lo < 0 or hi - lo > 600 or _RECORD_EMAIL.search(text, lo, hi) is None:
        return False
    # a made-up customer of an example's fixtures has a made-up address (`email="mreed@example.com"`)
    return not any(_EXAMPLE_DOMAIN.search(address.group(1)) for address in _ADDRESS.finditer(text, lo, hi))


_CLOSING_NAMES = re.compile(
    rf"(?m)\((?:[^()\n]{{0,40}},[ \t]*)?(?P<list>{_PERSON}(?:[ \t]*(?:,|and|&)[ \t]*{_PERSON})*)\)[ \t.]*\r?$"
)
_CREDIT_OPENING = re.compile(r"(?:(?:Thanks|Thank[ \t]+you|Patch(?:es)?[ \t]+by|Reported[ \t]+by|By|From|Via)[ \t]+)+")


# A CI job's name in brackets (`:alt: GitHub Actions build status (Test Windows)`): a verb of builds, no name.
_JOB_WORDS = frozenset("Test Tests Build Builds Lint Deploy Check Checks Run Release Publish Docs".split())


def _closing_names(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The names of `(Jane Roe, Tom Li)`, without a credit's opening words (`(Thanks Jane Roe)`)."""
    for name in _PERSON_LINE.finditer(text, start, end):
        opening = _CREDIT_OPENING.match(text, name.start(), name.end())
        begin = opening.end() if opening else name.start()
        if _PERSON_LINE.fullmatch(text, begin, name.end()) and text[begin : name.end()].split()[0] not in _JOB_WORDS:
            yield begin, name.end()


_STARRED_NAME = re.compile(rf"\*({_PERSON})\*")

NAME_PLACES = [
    # Rails' changelogs close each entry with its author: `    *Jane Roe*`, `*Jane Roe*, *Tom Li*`.
    NamePlace(
        "changelog_author",
        re.compile(rf"(?m)^[ \t]*(?P<list>\*{_PERSON}\*(?:[ \t]*(?:,|and|&)[ \t]*\*{_PERSON}\*)*)[ \t]*\r?$"),
        ("*",),
        names=lambda text, start, end: (m.span(1) for m in _STARRED_NAME.finditer(text, start, end)),
    ),
    NamePlace(
        "closing_credit",
        _CLOSING_NAMES,
        (")",),
        names=_closing_names,
    ),
    NamePlace("person_record", _NAMED_PERSON, ("name",), names=_one, check=_in_person_record, anchor=("mail",)),
    # Maven's changes plugin (`src/changes/changes.xml`): `<action dev="jroe" type="fix" due-to="Jane Roe">`.
    NamePlace(
        "changes_due_to", re.compile(rf'<action\b[^>\n]*?\bdue-to="(?P<list>{_PERSON})"'), ("<action",), names=_one
    ),
    NamePlace("r_person", _R_PERSON, ("person(",), names=_r_person_names, reach=2000),
    NamePlace(
        "dcf_author",
        re.compile(r"(?m)^Author:[ \t]*(?P<list>[^\n]*(?:\n[ \t]+[^\n]*)*)"),
        ("author:",),
        names=_dcf_names,
        reach=20000,
    ),
    NamePlace("wrapped_email", _WRAPPED_EMAIL, ("@", "[at]", "(at)", "<at>", "{at}", " at "), names=_one),
    NamePlace("author_heading", _AUTHOR_HEADING, ("author", "maintainer"), names=not_prose(_name_lines)),
    NamePlace("mailto_link", _MAILTO_LINK, ("mailto:",), names=_one),
    NamePlace("changelog_section", _CHANGELOG_SECTION, ("[ ",), names=_one),
    NamePlace(
        "gradle_developer",
        _APPEND_NODE,
        ("appendnode",),
        names=_one,
        check=lambda match, text: match.group("field") == "name" and _developer_node(match, text),
        anchor=("developer",),
    ),
    NamePlace(
        "gradle_developer",
        _POM_PROPERTY,
        ("pom_developer", "pom_author"),
        names=_one,
        check=lambda match, _text: match.group("field").upper() == "NAME",
    ),
    NamePlace(
        "gradle_developer",
        re.compile(rf"""\bname{_GRADLE_FIELD}(?P<list>[^"'\n]{{1,200}})["']"""),
        ("name",),
        check=_in_gradle_developer,
        anchor=("developer", "contributor"),
    ),
]

# --- handles and addresses ------------------------------------------------------------------------------------

# `/home/jroe/...`, `/Users/jroe/...`, `C:\Users\jroe\...`; not the shared accounts images and CI set up.
_SHARED_ACCOUNTS = frozenset(
    "user username users you your yourname me myself name someone foo bar test tester guest admin root ubuntu debian "
    "vagrant pi ec2-user centos fedora runner travis circleci jenkins gitlab-runner build builder buildd docker "
    "git www-data nobody default public shared all common administrator sbuild pbuilder dev developer app "
    "node vscode codespace jovyan rstudio foobar asdf work john jane joe bob alice data src project projects "
    "me myuser someuser".split()
)  # fmt: skip
_HOME_PATH = re.compile(rf"(?:(?<![\w.~])/home/|(?<![\w.])/Users/|\b[A-Za-z]:\\\\?Users\\\\?)({_HANDLE})(?=[/\\])")


_NUMBERED = re.compile(r"(?:user|test|foo|bar|guest|demo)[\w-]?\d*")  # `user2`, `test_1`


def _personal_home(match: re.Match[str], _text: str) -> bool:
    name = match.group(1)
    return name.lower() not in _SHARED_ACCOUNTS and not _NUMBERED.fullmatch(name.lower()) and not name.isdigit()


# `jroe at example dot org`, `jroe [at] example [dot] org`, `jroe(at)example.org`: a mailbox, an `at`, and a
# domain whose dots may be spelled out; spelled with spaces only, both words must be spelled (` at ` and ` dot `).
_OBFUSCATED_EMAIL = re.compile(
    r"(?<![\w.+%-])[A-Za-z0-9][\w.+%-]{0,63}"
    r"(?:[ \t]*[\[({<][ \t]*(?i:at)[ \t]*[\])}>][ \t]*[\w-]+"
    r"(?:(?:[ \t]*[\[({<][ \t]*(?i:dot)[ \t]*[\])}>][ \t]*|\.)[\w-]+)+"
    r"|[ \t]+(?:at|AT)[ \t]+[\w-]+(?:[ \t]+(?:dot|DOT)[ \t]+[\w-]+)+)"
    r"(?![\w-])"
)
_AT_WORD_EMAIL = re.compile(
    r"(?<![\w.+%-])([A-Za-z0-9][\w.+%]{1,63}?)(?:[ \t]+(?:at|AT)[ \t]+|[ \t]*([-_/])(?:at|AT)\2[ \t]*)"
    r"[A-Za-z0-9][\w-]*(?:(?:\.|[ \t]*[-_/](?:dot|DOT)[-_/][ \t]*|[ \t]+(?:dot|DOT)[ \t]+)[\w-]+)+"
    r"(?<!\.)(?![\w-]|\.\w)"
)
# `<jroe at example.org>`: in angle brackets an `at` between a mailbox and a domain is an address.
_BRACKETED_AT = re.compile(r"<([\w.+%-]{1,64}[ \t]+(?:at|AT)[ \t]+[\w-]+(?:\.[\w-]+)+)>")
_SPELLED_DOT = re.compile(r"[ \t]*[\[({<\-_/]?[ \t]*(?i:dot)[ \t]*[\])}>\-_/]?[ \t]*")


_SPELLED_AT = re.compile(r"[ \t]*[\[({<\-_/][ \t]*(?i:at)[ \t]*[\])}>\-_/][ \t]*|[ \t]+(?:at|AT)[ \t]+")


# `fredt@users dot sourceforge.net`: an `@`, and a dot spelled out in the domain.
_AT_SPELLED_DOT_EMAIL = re.compile(
    r"(?<![\w.+%-])[A-Za-z0-9][\w.+%-]{0,63}@[A-Za-z0-9][\w-]*(?:\.[\w-]+)*"
    r"(?:[ \t]+(?:dot|DOT)[ \t]+|[ \t]*[\[(<{](?:dot|DOT)[\])>}][ \t]*)[\w-]+(?:(?:\.|[ \t]+(?:dot|DOT)[ \t]+)[\w-]+)*"
    r"(?![\w-])"
)
# An address with its `@` escaped (`rules.ESCAPED_AT`: Perl's `"jroe\@cpan.org"`, HTML's `&#64;`, a URL's `%40`).
_ESCAPED_AT_EMAIL = re.compile(
    rf"(?<![\w.+%-])[^\W_][\w.+-]{{0,63}}(?:{ESCAPED_AT.pattern})(?:[^\W_](?:[\w-]{{0,61}}[^\W_])?\.)+[^\W\d_]{{2,24}}"
    r"(?![\w-])"
)


def _escaped_address(match: re.Match[str], text: str) -> bool:
    """A public suffix ends its domain; not a URL's credentials (Perl's `"mysql://u:...\\@db.acme.de/x"`)."""
    domain = ESCAPED_AT.split(match.group(0), maxsplit=1)[-1]
    return bool(_tld_extract()(domain).suffix) and not _preceded_by(_IN_USERINFO, match.start(), text, 200)


def _spelled_address(value: str) -> bool:
    """Its domain, dots restored, ends in a public suffix (`jroe at example dot org`, not `look at this dot`)."""
    domain = value.split("@", 1)[1] if "@" in value else _SPELLED_AT.split(value, maxsplit=1)[-1]
    domain = _SPELLED_DOT.sub(".", domain) if re.search(r"(?i)dot", domain) else domain
    extracted = _tld_extract()(domain)
    return bool(extracted.suffix and extracted.domain)


# A changelog entry's closing credit in brackets (PHP's NEWS: `... (CVE-2022-31631). (nielsdos)`, `(ilutov, cmb)`):
# handle-shaped words that are no English word (the words of CPython's documentation, shipped with it).
_CLOSING_CREDIT = re.compile(r"(?m)\.[ \t]+\(([\w@][\w@ ,\-]{1,80})\)[ \t]*\r?$")
_CLOSING_BRACKET_CREDIT = re.compile(r"(?m)\.[ \t]+\[([\w@][\w@ ,\-]{1,80})\][ \t]*\r?$")  # `Fix x. [jroe]`
_CREDIT_WORD = re.compile(rf"@?({_HANDLE})")
# `(CVE-2026-6472)`, `(GH-12)`, a commit `(5cb3865)`, a date
_REFERENCE = re.compile(r"(?i)(?:cve|gh|bug|pr|issue|rfc|bsc|lp|ticket)-?\d|\d+$|[0-9a-f]{7,40}$|\d{4}-\d\d")


def _credited_handles(match: re.Match[str], _text: str) -> bool:
    return any(_handle_word(w.strip()) or _PERSON_LINE.fullmatch(w.strip()) for w in match.group(1).split(","))


_PERSON_LINE = re.compile(_PERSON)


# Who changelogs thank that is nobody's handle: groups, projects, distributions, tools and bots.
_NOT_CREDITED = frozenset(
    "upstream guys everyone everybody all folks team people maintainers contributors users debian ubuntu github "
    "gitlab fedora redhat coverity covscan valgrind asan ubsan msan oss-fuzz ossfuzz clang gcc lintian dependabot "
    "renovate bot travis appveyor jenkins".split()
)  # fmt: skip


def _handle_word(word: str) -> bool:
    bare = word.lstrip("@")
    if bare.lower() in _NOT_CREDITED or bare.lower().startswith("lib"):
        return False
    return (
        _CREDIT_WORD.fullmatch(word) is not None
        and _REFERENCE.match(bare) is None
        and len(bare) >= 3
        and (bare.islower() or any(c.isdigit() for c in bare) and not bare.isupper())
        and not all(part in english_words() for part in bare.lower().split("-"))
    )


class _ClosingCredits(RegexRecognizer):
    """Each handle of `(nielsdos, ilutov)` and each name of `(Jane Roe, jroe)` its own span (a Rule gives one
    span per group)."""

    def analyze(self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None) -> list:
        results = []
        for match in super().analyze(text, entities, nlp_artifacts):
            at = match.start
            for word in text[match.start : match.end].split(","):
                start = at + len(word) - len(word.lstrip())
                stripped = word.strip()
                entity = NAME if _PERSON_LINE.fullmatch(stripped) else USERNAME if _handle_word(stripped) else None
                if entity is not None:
                    start += entity == USERNAME and stripped.startswith("@")
                    result = RecognizerResult(entity, start, at + len(word.rstrip()), match.score)
                    result.recognition_metadata = match.recognition_metadata
                    results.append(result)
                at += len(word) + 1
        return results


# A handle where a person's name goes (`@author jroe`, `Copyright (c) 2021 jroe <jroe@x.org>`, `Author: jroe`,
# `Patch by jroe.`, `Thanks to jroe`): one lowercase word that is no English word and no group (`_handle_word`).
# Not after `created by` (tools create things) nor after a copyright with no year (`copyright ownership`).
_SLOT_HANDLE = re.compile(
    r"(?i:@author[ \t]+|(?<![\w-])(?:__)?authors?(?:__)?[\"']?[ \t]*(?:=>|[:=])[ \t]*\[?[\"']?|"
    r"(?<![\w-])(?:copyright[ \t]*(?:\(c\)|©)?|\(c\)|©)[ \t]+"
    r"(?:19|20)\d\d(?:[ \t]*[-–,][ \t]*(?:19|20)?\d\d)*[ \t,]+|"
    r"(?<![\w-])(?:patch(?:es)?|reported|suggested|fixed|contributed)[ \t]+by[ \t]+|"
    r"(?<![\w-])thanks(?:[ \t]+to|,)[ \t]+)"
    r"@?([a-z0-9][a-z0-9_\-]{2,38})(?=[ \t]*(?:<|\(|\)|,|\.(?!\w)|;|\"|'|\]|\r?$))"
)
# R's DESCRIPTION: `Packaged: 2023-01-04 10:12:31 UTC; jroe`, the account that built the tarball.
_PACKAGED_BY = re.compile(r"(?m)^Packaged:[^;\n]*;[ \t]*([A-Za-z0-9][\w.\-]{1,38})[ \t]*\r?$")

_OPEN_ACTION = re.compile(r"<action\b[^>\n]*$")
_TWITTER_PAGES = frozenset("hashtag intent share search home settings login signup explore i messages".split())
_BUILT_BY = re.compile(rf"""Built-By["']?[ \t]*[:=][ \t]*["']?({_HANDLE})(?![\w.@-])""")

_AUTHOR_NAMES = frozenset({"author", "authors", "owner", "owners", "maintainer", "maintainers"})  # `Author: author,`


def _slot_handle(match: re.Match[str], _text: str) -> bool:
    word = next(group for group in match.groups() if group)
    return _handle_word(word) and word.lower() not in _SHARED_ACCOUNTS | _NOT_LISTED_HANDLES | _AUTHOR_NAMES


HANDLE_RULES = [
    # Maven's `<developer><id>jroe</id>`, PEAR's `<lead><user>jroe</user>`.
    Rule(
        "manifest_id",
        re.compile(rf"<(?:id|user|username)>[ \t]*({_HANDLE})[ \t]*</(?:id|user|username)>"),
        ((1, USERNAME),),
        0.8,
        _in_developer,
        keywords=("<id>", "<user>", "<username>"),
    ),
    # Gradle's `developer { id = "jroe" }` / `id 'jroe'` / `id.set("jroe")`.
    Rule(
        "gradle_developer_id",
        re.compile(rf"""\bid{_GRADLE_FIELD}({_HANDLE})["']"""),
        ((1, USERNAME),),
        0.8,
        _in_gradle_developer,
        anchor="developer",
        keywords=("id ", "id=", "id.set"),
    ),
    Rule(
        "gradle_developer_id",
        _APPEND_NODE,
        (("list", USERNAME),),
        0.8,
        lambda match, text: match.group("field") == "id" and _developer_node(match, text),
        anchor="appendNode",
        keywords=("appendnode",),
    ),
    Rule(
        "gradle_developer_id",
        _POM_PROPERTY,
        (("list", USERNAME),),
        0.8,
        lambda match, _text: match.group("field").upper() == "ID",
        keywords=("pom_developer", "pom_author"),
    ),
    # CPAN's author pages: `L<https://metacpan.org/author/JROE>`, `http://search.cpan.org/~jroe/`.
    Rule(
        "cpan_author",
        re.compile(r"(?:metacpan\.org/(?:pod/)?author/|search\.cpan\.org/~)([A-Za-z][A-Za-z0-9-]{1,38})\b"),
        ((1, USERNAME),),
        0.85,
        keywords=("metacpan.org/", "search.cpan.org/~"),
    ),
    # A user's home on a web server (`http://people.apache.org/~jroe/`, `https://www.cs.x.edu/~jroe`) and a
    # Twitter profile (`https://twitter.com/jroe`): the account's name.
    Rule(
        "profile_url",
        re.compile(
            r"(?i:https?://[\w.\-]+(?::\d+)?/~|(?<![\w.])(?:twitter|x)\.com/@?)([A-Za-z0-9][A-Za-z0-9_\-]{1,38})"
            r"(?![\w.\-]*[?=&])"
        ),
        ((1, USERNAME),),
        0.8,
        lambda match, text: _slot_handle(match, text) and match.group(1).lower() not in _TWITTER_PAGES,
        keywords=("/~", "twitter.com/", "x.com/"),
    ),
    # A changelog's credit to a handle: `thanks to jroe`, `patch from jroe`, `reported by jroe` (no English word).
    Rule(
        "credit_handle",
        re.compile(
            r"(?i:\bthanks(?:[ \t]+to)?,?|\b(?:patch(?:es)?|fix(?:es)?|report|pull[ \t]+request)[ \t]+(?:from|by)|"
            r"\b(?:reported|suggested|"
            rf"requested|patched|fixed|contributed|noticed|spotted)[ \t]+by)[ \t]+@?({_HANDLE})\b"
            r"(?![@.]\w|[ \t]+[A-Z][a-z])"
        ),
        ((1, USERNAME),),
        0.75,
        lambda match, _text: _handle_word(match.group(1)),
        keywords=("thanks", " from ", " by "),
    ),
    # Maven's changes plugin: `<action dev="jroe" type="fix" due-to="tli">`, the committer and the contributor.
    Rule(
        "changes_dev",
        re.compile(rf'\b(?:dev|due-to)="({_HANDLE})"'),
        ((1, USERNAME),),
        0.8,
        lambda match, text: _handle_word(match.group(1)) and _preceded_by(_OPEN_ACTION, match.start(), text, 300),
        keywords=("<action",),
    ),
    # GitHub's merge commits, quoted in changelogs: `Merge pull request #12 from jroe/fix-parser`.
    Rule(
        "merge_from",
        re.compile(rf"[Mm]erge (?:pull request|PR) #\d+ from ({_HANDLE})/"),
        ((1, USERNAME),),
        0.85,
        keywords=("merge",),
    ),
    # `Jane Roe <jroe@x.org> (@jroe)`: MAINTAINERS and CODEOWNERS-like lists.
    Rule(
        "maintainer_handle",
        re.compile(rf"{_PERSON}[ \t]*<[^<>\s]+@[^<>\s]+>[ \t]*\(@({_HANDLE})\)"),
        ((1, USERNAME),),
        0.85,
        keywords=("(@",),
    ),
    Rule("home_path", _HOME_PATH, ((1, USERNAME),), 0.7, _personal_home, keywords=("/home/", "/users/", "\\users")),
    Rule(
        "slot_handle",
        _SLOT_HANDLE,
        ((1, USERNAME),),
        0.75,
        _slot_handle,
        keywords=("author", "copyright", "(c)", "©", " by ", "thanks"),
    ),
    Rule("packaged_by", _PACKAGED_BY, ((1, USERNAME),), 0.8, _slot_handle, keywords=("packaged:",)),
    # A jar's manifest names the account that built it: `Built-By: jroe`, Gradle's `attributes 'Built-By': 'jroe'`.
    Rule("packaged_by", _BUILT_BY, ((1, USERNAME),), 0.8, _slot_handle, keywords=("built-by",)),
]

EMAIL_RULES = [
    Rule(
        "obfuscated_email",
        _AT_SPELLED_DOT_EMAIL,
        ((0, EMAIL),),
        0.8,
        lambda match, _text: _spelled_address(match.group(0)),
        anchor="@",
        one_line=True,
    ),
    Rule(
        "escaped_email",
        _ESCAPED_AT_EMAIL,
        ((0, EMAIL),),
        0.85,
        _escaped_address,
        anchor=("\\@", "\\x40", "\\u0040", "&#64;", "&#x40;", "&#X40;", "&#064;", "%40"),
        one_line=True,
    ),
    Rule(
        "obfuscated_email",
        _BRACKETED_AT,
        ((1, EMAIL),),
        0.85,
        lambda match, _text: _spelled_address(match.group(1)),
        keywords=(" at ",),
    ),  # fmt: skip
    # A manifest's email element holds an address, however spelled: Maven's `<email>jroe at apache.org</email>`,
    # `<email>jroe -at- x dot org</email>`.
    Rule(
        "obfuscated_email",
        re.compile(
            r"<email>[ \t]*([\w.+%\-]{1,64}[ \t]*(?:[\[({<\-][ \t]*(?:at|AT)[ \t]*[\])}>\-]|[ \t](?:at|AT)[ \t])"
            r"[ \t]*[\w\-]+(?:(?:\.|[ \t]*[\[({<\-]?[ \t]*(?:dot|DOT)[ \t]*[\])}>\-]?[ \t]*)[\w\-]+)+)[ \t]*</email>"
        ),
        ((1, EMAIL),),
        0.85,
        keywords=("<email>",),
    ),
    # POD's `E<lt>jroe@cpan.orgE<gt>`: the generic regex would take the `E` of `E<gt>` into the domain.
    Rule(
        "pod_email",
        re.compile(r"E<lt>([\w.+%-]+(?:@|\[at\])[\w-]+(?:\.[\w-]+)+?)E<gt>"),
        ((1, EMAIL),),
        0.9,
        anchor="E<lt>",
    ),
    Rule(
        "obfuscated_email",
        _OBFUSCATED_EMAIL,
        ((0, EMAIL),),
        0.8,
        lambda match, _text: _spelled_address(match.group(0)),
        keywords=(" dot ", "[at]", "(at)", "{at}", "<at>"),
    ),
    # `jroe at cpan.org`, `jroe -at- x.org`, `jroe_at_x.org`, `jroe /at/ x /dot/ org`: a mailbox that is no word
    # (`look at github.com` is prose), a spelled `at`, a domain under a public suffix.
    Rule(
        "obfuscated_email",
        _AT_WORD_EMAIL,
        ((0, EMAIL),),
        0.8,
        lambda match, _text: match.group(1).lower() not in common_words() and _spelled_address(match.group(0)),
        keywords=(" at ", "-at-", "_at_", "/at/"),
    ),
]

# --- credentials ----------------------------------------------------------------------------------------------

_ARGUMENT = (
    r"""(?:[bu]?["'][^"'\n]{0,120}["']|[$@]?[\w.\->:\[\]]{1,80}(?:\(\))?"""
    r"""|new[ \t]+[\w.]+\([^()\n]{0,120}\))"""  # `auth(new HttpHost("h"), "u", "...")`
)
# The value (the quote before it is where the match starts) is the second argument of a call whose name
# says it authenticates (Ruby's without parentheses too, the arguments perhaps on lines of their own):
# `setBasicAuth("u", "...")`, `basic_auth 'u', '...'`, `new UsernamePasswordCredentials("u", "...")`,
# `Credentials.basic("u", "...")`, `->auth('u', '...')`, `smtp.login(user, "...")`, `ldap.bind(dn, "...")`; or
# the one after a quoted user further on: `smtp.PlainAuth("", "u", "...", host)`, `FTP(host, "u", "...")`,
# `ldap_bind($ds, "dn", "...")`, `new NetworkCredential("u", "...")`, `$ua->credentials($net, $realm, "u", "...")`,
# `ssh2_auth_password($c, "u", "...")`, `->authorization_basic("u", "...")`, `imap_open($box, "u", "...")`,
# Ruby's `Net::SMTP.start(host, 25, helo, "u", "...")`, `Net::FTP.open(host, "u", "...")`, JavaMail's
# `Transport.send(message, "u", "...")`, Spring's and Shiro's `new UsernamePassword...Token("u", "...")`, gomail's
# `NewDialer(host, 587, "u", "...")`, rest-client's `Resource.new(url, "u", "...")`; Rust's
# `Credentials::new("u".to_string(), "...")` and `.basic_auth("u", Some("..."))`.
_AUTH_CALL_BEFORE = re.compile(
    r"(?i)(?:(?:\w*basic_?auth\w*|\w*password_?(?:credentials|authentication)|(?<![\w])(?:basic|auth|login|logon|"
    r"sign_?in|bind|simple_bind_s|authenticate|with_?basic_?auth|http_?auth))(?:[ \t]*\(|[ \t]+)\s*"
    + _ARGUMENT + r"""(?:\.\w+\(\))?\s*,\s*(?:Some\()?[bu]?["']$"""
    r"|:basic_auth[ \t]*,\s*" + _ARGUMENT + r"""\s*,\s*[bu]?["']$"""  # Faraday's `f.request :basic_auth, 'u', '...'`
    r"|(?:\w*auth|\w*login|\w+_bind|\w*credentials?(?:::new)?|\w*password|\w*basic|\w*authenticator|imap_open|"
    r"ftp(?:_tls)?|smtp(?:_ssl)?|imap4(?:_ssl)?|pop3|(?:ftp(?:tls)?|smtp|pop3?|imap|telnet)\.(?:start|open|new)|"
    r"transport\.send|usernamepassword\w*token|\w*dialer|resource\.new)"
    r"[ \t]*\(\s*(?:" + _ARGUMENT + r"""\s*,\s*){0,3}[bu]?["'][^"'\n]{1,80}["'](?:\.\w+\(\))?\s*,\s*"""
    r"""(?:Some\()?[bu]?["']$)"""
)  # fmt: skip
# ... or the third of a database connect call: `DriverManager.getConnection(url, "u", "...")`,
# `DBI->connect($dsn, "u", "...")`, `mysqli_connect("host", "u", "...")`, `new PDO($dsn, 'u', '...')`,
# `new mysqli("host", "u", "...", "db")`, `new Sequelize("db", "u", "...", {...})`, ldap3's `Connection(server,
# "dn", "...")`, Slick's `Database.forURL(url, "u", "...")`, Groovy's `Sql.newInstance(url, "u", "...")`, Ruby's
# `Mysql.new(host, "u", "...")` and `PG.connect(host, port, opts, tty, db, "u", "...")`; Oracle's clients take the
# user first: `oci_connect("u", "...", db)`, `cx_Oracle.connect("u", "...", dsn)`.
_CONNECT_CALL_BEFORE = re.compile(
    r"(?i)(?:(?:(?:->|\.|(?<![\w]))connect|getconnection|\w+_connect|dbconnect|connection|forurl|sql\.newinstance|"
    r"mysql\.new|new[ \t]+(?:pdo|mysqli|sequelize))[ \t]*\(\s*(?:" + _ARGUMENT + r"\s*,\s*){1,5}"
    r"|(?:oci_(?:p|new_)?connect|(?:cx_oracle|oracledb)\.connect)[ \t]*\(\s*)"
    r"""[bu]?["'][^"'\n]{1,64}["']\s*,\s*[bu]?["']$"""
)  # fmt: skip
_QUOTED = quoted_values(4)
# ... or what a setter or builder of a password takes (`ds.setPassword("...")`, `.withPassword("...")`,
# `.password("...")`), or the value after a password's key (`props.setProperty("mail.smtp.password", "...")`,
# `config.put("password", "...")`, `Map.of("password", "...")`, `env.put(Context.SECURITY_CREDENTIALS, "...")`).
_PASSWORD_SETTER_BEFORE = re.compile(
    r"(?i)(?:\bset\w*?|\.with|\.)(?:password|passwd|passphrase|pwd|pass_)[ \t]*\([ \t]*"
    r"(?:new[ \t]+String\([ \t]*)?[bu]?[\"']$"
    r"""|\([ \t]*["'][\w.\-]*(?:password|passwd|passphrase|pwd)["'][ \t]*,[ \t]*[bu]?["']$"""
    r"""|\((?:[ \t]*[\w.$&>\-]+[ \t]*,)?[ \t]*[\w.]*(?-i:PASSWORD|PASSWD|CREDENTIALS)[ \t]*,[ \t]*[bu]?["']$"""
    r"""|\bnew[ \t]+Password\([ \t]*["']$|\bCredential\.getCredential\([ \t]*["']$"""  # Jetty's
)


_IDENTIFIER = re.compile(r"[a-z]+(?:[_.][a-z]+)+")
_HOST_PATH = re.compile(r"[\w.\-]+(?::\d+)?/[\w.\-]*")  # `localhost/XE`, `db.acme.de:1521/orcl`
# A setting names a word (`sslmode=require`, `ApplicationName=x`), not a random run (`E9lSi0tcL21pffWQ=J+E`).
_SETTING = re.compile(r"(?:[a-z_][a-z0-9_.\-]{2,}|[A-Za-z][a-z]+(?:[A-Z][a-z]+)*)=|[^;]*=[^;]*;")


def _credential_argument(match: re.Match[str], text: str) -> bool:
    value, before = match.group(0), text[max(0, match.start() - 24) : match.start() - 1].rstrip(" \t\r\nbu")
    if not before.endswith(("(", ",")):  # an argument: right after `(` or `,`
        return False
    # any shape a password takes (a long random one too: it is in a password's place), but not a URL or a
    # connection string (`"Server=x;Password=y"`: the env rule's) or a setting (`"sslmode=require"`)
    if not not_a_word(value) or "://" in value or _SETTING.match(value):
        return False
    if is_path(value) or value.startswith("-"):  # a path or a flag (`lookup('password', '/tmp/pwfile')`)
        return False
    if _IDENTIFIER.fullmatch(value):  # `('ansible_become_password', 'ansible_become_pass')`: names, not values
        return False
    if _DOTTED_NAME.fullmatch(value) or _HOST_PATH.fullmatch(value):  # a driver's class, a database's address
        return False
    return (
        _preceded_by(_AUTH_CALL_BEFORE, match.start(), text, 240)
        or _preceded_by(_CONNECT_CALL_BEFORE, match.start(), text, 320)
        or _preceded_by(_PASSWORD_SETTER_BEFORE, match.start(), text, 120)
    )


# Command lines: `curl -u user:pass`, `lftp -u user,pass`, `smbclient -U user%pass`, `mysql -psecret`,
# `mysql -p secret` is a database name (the client prompts), `mysqldump -p'secret'`, `mysqladmin password new`,
# `mongo -u u -p pass`, `sshpass -p pass`, `redis-cli -a pass`, `htpasswd -b file u pass`, `rabbitmqctl add_user u
# pass`, `echo "u:pass" | chpasswd`, `ldapsearch -D dn -w pass`, `docker login -u u -p pass`, `snmpwalk -A pass`,
# `openssl ... -passout pass:pass`, `keytool -storepass pass`, `wget --http-password=pass`, `PGPASSWORD=pass psql`
# (the generic env rule takes unquoted values).
_CLI_CREDENTIALS = re.compile(
    r"(?m)(?:"
    r"\bcurl\b[^\n]*?(?:-u|--user)[ \t]+[\"']?[^\s:\"']{1,64}:([^\s\"'<>]{4,128})[\"']?(?=[\s<]|$)"
    r"|\blftp\b[^\n]*?-u[ \t]+[\"']?[^\s,\"']{1,64},([^\s\"'<>]{4,128})[\"']?(?=[\s<]|$)"
    r"|\bsmbclient\b[^\n]*?-U[ \t]+[\"']?[^\s%\"']{1,64}%([^\s\"'<>]{4,128})[\"']?(?=[\s<]|$)"
    r"|\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mariadb|mariadb-dump)\b[^\n]*?[ \t]-p"
    r"(?:([^\s\"'-][^\s\"'<>]{3,127})|\"([^\s\"]{4,128})\"|'([^\s']{4,128})')(?=[\s<]|$)"
    r"|\bmysqladmin\b[^\n]*?[ \t]password[ \t]+[\"']?([^\s\"'-][^\s\"'<>]{3,127})[\"']?(?=[\s<]|$)"
    r"|\bmongo(?:sh|dump|restore|import|export|stat|top)?\b[^\n]*?[ \t]-p[ \t]+[\"']?"
    r"([^\s\"'-][^\s\"'<>]{3,127})[\"']?(?=[\s<]|$)"
    r"|\bhtpasswd\b[^\n]*?[ \t]-\w*b\w*(?:[ \t]+-\w+)*[ \t]+\S+[ \t]+\S+[ \t]+[\"']?([^\s\"'-][^\s\"'<>]{3,127})[\"']?"
    r"(?=[\s<]|$)"
    r"|\brabbitmqctl\b[^\n]*?[ \t](?:add_user|change_password)[ \t]+\S+[ \t]+[\"']?([^\s\"'-][^\s\"'<>]{3,127})"
    r"[\"']?(?=[\s<]|$)"
    r"|[\"']?[\w.\-]{1,32}:([^\s\"':]{4,128})[\"']?[ \t]*\|[ \t]*(?:sudo[ \t]+)?chpasswd\b"
    r"|\bldap\w*\b[^\n]*?[ \t]-w[ \t]+[\"']?([^\s\"'-][^\s\"'<>]{3,127})[\"']?(?=[\s<]|$)"
    r"|\b(?:docker|podman|buildah|helm|skopeo)\b[^\n]*?\blogin\b[^\n]*?[ \t]-p[ \t]+"
    r"[\"']?([^\s\"'-][^\s\"'<>]{3,127})[\"']?(?=[\s<]|$)"
    r"|\bsnmp\w*\b[^\n]*?[ \t]-[AX][ \t]+[\"']?([^\s\"'-][^\s\"'<>]{3,127})[\"']?(?=[\s<]|$)"
    r"|(?<![\w-])-pass(?:in|out)?[ \t]+[\"']?pass:([^\s\"'$][^\s\"'<>]{3,127})[\"']?(?=[\s<]|$)"
    r"|(?<![\w-])-(?:src|dest)?(?:store|key)pass[ \t]+[\"']?([^\s\"'-][^\s\"'<>]{3,127})[\"']?(?=[\s<]|$)"
    r"|\bsshpass\b[^\n]*?[ \t]-p[ \t]*[\"']?([^\s\"'-][^\s\"'<>]{3,127})[\"']?(?=[\s<]|$)"
    r"|\bredis-cli\b[^\n]*?[ \t]-a[ \t]+[\"']?([^\s\"'-][^\s\"'<>]{3,127})[\"']?(?=[\s<]|$)"
    r"|(?<![\w-])--(?:http-|ftp-|proxy-|db-)?password[ \t]*=?[ \t]*[\"']([^\s\"'$<>{}]{4,128})[\"']"
    r"|(?<![\w-])(?:PGPASSWORD|MYSQL_PWD|REDISCLI_AUTH|SSHPASS)=[\"']([^\s\"'$]{4,128})[\"']"
    r")"
)
# An environment variable named for a password, set with blanks: Dockerfile's `ENV DB_PASS value`, csh's and
# Apache's `setenv`/`SetEnv NAME value`, nginx's `fastcgi_param NAME value;`, fish's `set -x NAME value`.
_ENV_SETTER = re.compile(
    r"(?im)^[ \t]*(?:ENV|setenv|fastcgi_param|env|set[ \t]+-[gxU]+)[ \t]+"
    r"[A-Za-z_]\w*?(?:password|passwd|pass|pwd)\w*[ \t]+[\"']?([^\s\"';$]{4,128})[\"']?[ \t]*;?[ \t]*\r?$"
)
# Kubernetes' and compose's env lists: `- name: DB_PASSWORD` with its `value: "..."` on the next line.
_NAMED_ENV = re.compile(
    r"(?i)\bname:[ \t]*[\"']?[\w.\-]*(?:password|passwd|pwd)[\w.\-]*[\"']?[ \t]*\r?\n[ \t]*value:[ \t]*"
    r"[\"']?([^\s\"'$]{4,128})[\"']?[ \t]*\r?$"
)
# XML: `<password>...</password>` (any element named for a password or secret, its value perhaps in CDATA),
# `<property name="db.password" value="..."/>`, `<entry key="password">...</entry>`, `<param name="password"
# value="..."/>`.
_XML_PASSWORD = re.compile(
    r"(?i)<([\w:.\-]*(?:password|passwd|pwd|passphrase|[._\-]pass))(?:[ \t][^<>]*)?>\s*(?:<!\[CDATA\[)?"
    r"([^<>\s]{4,128}?)(?:\]\]>)?\s*</\1>"
    r"|(?i:name|key|property)=[\"'][\w.\-]*(?:password|passwd|pwd|passphrase)[\"']"
    r"(?:[ \t]+value=[\"']([^\"'\s]{4,128})[\"']"
    r"|[ \t]*>\s*(?:<value>\s*)?([^<>\s]{4,128})[ \t]*<)"
)  # Spring's `<property name="password"><value>...</value></property>` too
# ... and a servlet's `<param-name>password</param-name>`, Hadoop's and Hive's `<name>...Password</name>` or a
# properties file's `<key>db.password</key>`, its `<param-value>`/`<value>` often a line below.
_SERVLET_PASSWORD = re.compile(
    r"(?i)<(param-name|name|key)>[ \t]*[\w.\-]*(?:password|passwd|pwd|passphrase)[ \t]*</\1>\s*"
    r"<(?:param-)?value>[ \t]*([^<>\s]{4,128})[ \t]*</(?:param-)?value>"
)
# netrc (`machine h login u password p`) and fetchmailrc (`poll h ... user "u" there with pass "p"`), a statement
# on one line or on several (no blank line, no next statement between).
_STATEMENT_GOES_ON = r"(?:[^\n]|\n(?![ \t]*(?:\n|(?:machine|poll|skip|default)\b)))"
_NETRC = re.compile(
    rf"(?m)^[ \t]*(?:machine|poll|skip|default)\b{_STATEMENT_GOES_ON}{{0,300}}?\b(?:login|user(?:name)?)[ \t]+\S+"
    rf"{_STATEMENT_GOES_ON}{{0,120}}?\bpass(?:word)?[ \t]+[\"']?([^\s\"']{{4,128}})[\"']?(?=\s|$)"
)
# SQL: `CREATE USER 'u'@'h' IDENTIFIED BY '...'` (MySQL, Oracle), `CREATE ROLE u WITH LOGIN PASSWORD '...'`,
# `ALTER USER u WITH ENCRYPTED PASSWORD '...'` (PostgreSQL).
_SQL_PASSWORD = re.compile(
    r"(?i)\bidentified[ \t]+(?:with[ \t]+\w+[ \t]+)?by[ \t]+(?:password[ \t]+)?"
    r"(?:'([^\s']{4,128})'|\"([^\s\"]{4,128})\")"
    r"|\b(?:user|role)\b[^;\n]{0,80}?[ \t](?:encrypted[ \t]+)?password[ \t]+'([^\s']{4,128})'"
)
# A config line that is a password's directive and its value, space-separated: Redis' `requirepass ...` and
# `masterauth ...`, Groovy's and Gradle's `password '...'` (a `credentials { }` block), a Java properties file's
# dotted `db.password ...` and a Dockerfile's `ENV DB_PASSWORD ...` (not a Go field's `Password *string`).
_DIRECTIVE_PASSWORD = re.compile(
    r"(?im)^[ \t]*(?:(?:requirepass|masterauth)[ \t]+[\"']?([^\s\"']{4,128})[\"']?"
    r"|(?:password|passwd)[ \t]+[\"']([^\s\"']{4,128})[\"']"
    r"|(?:ENV[ \t]+[\w\-]*|[\w\-]+\.[\w.\-]*)(?:password|passwd|pwd)[\w.\-]*[ \t]+([^\s\"'=:{<*&][^\s\"']{3,127}))"
    r"[ \t]*;?\r?$"
)
# A DSN's `user:password@` before Go's MySQL driver's protocol (`"root:...@tcp(127.0.0.1:3306)/db"`), and an
# Oracle thin URL's `user/password@` (`jdbc:oracle:thin:scott/...@host:1521:orcl`).
_DSN_PASSWORD = re.compile(
    r"""["'`][\w.\-]{1,64}:([^\s"'`/]{3,128})@(?:tcp|unix|udp)\("""
    r"|\bjdbc:oracle:(?:thin|oci):[\w$#]{1,64}/([^\s\"'/]{3,128})@[\w.\-]"
)
# Azure Storage and Service Bus connection strings: `AccountKey=<base64>`, `SharedAccessKey=<base64>`.
_ACCOUNT_KEY = re.compile(r"\b(?:AccountKey|SharedAccessKey|SharedAccessSignature)=([A-Za-z0-9+/]{30,}={0,2})")
# A session cookie's value: `Cookie: sessionid=...`, `JSESSIONID=...`, `_session_id=...`, and as a client's
# cookie jar writes it: `{"session": "..."}`, `cookies.set("PHPSESSID", "...")`.
# `cookies['_app_session'] = "..."`, Go's `http.Cookie{Name: "session_token", Value: "..."}` and a Netscape cookie
# file's tab-separated `sessionid<TAB>...` too; the session cookies of other servers by their names: Zope's
# `_ZopeId="..."`, ASP's `ASP.NET_SessionId` and `ASPSESSIONID...`, ColdFusion's `CFTOKEN`, Drupal's `SESS<hex>`.
_SESSION_COOKIE = re.compile(
    r"(?i)(?:\b(?:session(?:_?(?:id|token|key))?|sid|phpsessid|jsessionid|connect\.sid|csrftoken|_zopeid|"
    r"asp\.net_sessionid|aspsessionid\w*|cftoken|sess[0-9a-f]{32})|\w+_session\b|"
    r"""\bremember_token)(?:=(?:"|%22)?|\t|["'][ \t]*[:,][ \t]*(?:value:[ \t]*)?["']|["']\][ \t]*=[ \t]*["'])"""
    r"([A-Za-z0-9%._\-]{16,}?)(?=%22|[^A-Za-z0-9%._\-]|$)"
)


def _session_id(match: re.Match[str], _text: str) -> bool:
    """Random-looking; hex too, however short (a server's session ids are: `_ZopeId="19859283A3b5b4d9"`)."""
    return _looks_random(match.group(1).strip("=%"), short_hex=True)


def _secret_shaped(value: str) -> bool:
    """A digit or a symbol, and not a reference (`$PASS`, `%(password)s`, `<password>`, `:pass`: `is_reference`)."""
    return not is_reference(value) and not_a_word(value)


def _value_group(match: re.Match[str]) -> int:
    """The rule's value: the last group that matched (a rule's alternatives each have their own)."""
    return max(i for i in range(1, (match.re.groups or 0) + 1) if match.group(i))


def _last_value(match: re.Match[str], _text: str) -> bool:
    """The rule's value is shaped like a secret."""
    return _secret_shaped(match.group(_value_group(match)))


def _random_value(match: re.Match[str], _text: str) -> bool:
    return _looks_random(match.group(1).strip("=%"))


# `"jroe:s3cret"` handed to a Base64 encoder for a basic-auth header (`encodeToString("jroe:...".getBytes())`,
# `base64.b64encode(b"jroe:...")`, `btoa("jroe:...")`).
# Or assigned to a name that says what it is: `String auth = "jroe:..."`, `userpass = "jroe" + ":" + "..."`.
_USER_COLON_SECRET = re.compile(r"""(?<=["'`])[\w.@+\-]{1,64}:([^"'`\s:/]{4,128})(?=["'`])""")
_ENCODER_BEFORE = re.compile(
    r"(?i)(?:base64|b64encode|btoa|encode\w*|basic|userpwd|buffer\.from\([ \t]*[\"'`])[^\n]{0,60}$"
    r"|(?<![\w.])(?:auth|user_?pass|credentials?|basic_?auth)\w*[ \t]*=[ \t]*[\"'`]$"
)
# ... or joined there: `("jroe" + ":" + "...")`, `"jroe:" + "..."`.
_JOINED_SECRET = re.compile(r"""["'][^"'\n]{0,64}:["'][ \t]*\+[ \t]*["']([^"'\s]{4,128})["']""")


_ENCODER_WORDS = (
    "base64",
    "b64encode",
    "btoa",
    "encode",
    "basic",
    "auth",
    "userpass",
    "user_pass",
    "credential",
    "userpwd",
    "buffer.from",
)


def _encoded_credentials(match: re.Match[str], text: str) -> bool:
    return _secret_shaped(match.group(1)) and _preceded_by(_ENCODER_BEFORE, match.start(), text, 80)


# A passphrase of words and a number (`maple river cloud stone 417`, Diceware's and password managers' kind) after
# a password's name, quoted or ending a config line: `password = "..."`, `"password": "..."`, `password: ...`,
# `<password>...</password>`. Not a message (`"Password reset email sent 2"` reads as prose: `_passphrase`).
_PASSPHRASE = re.compile(
    r"(?i)(?<![a-z0-9])[\w.\-]*(?:password|passwd|passphrase|pass|pwd)[\w.\-]*[\"']?[ \t]*(?:=>|:=|[:=>])[ \t]*"
    r"(?:[bru]?([\"'`])|(?=[a-z]))((?:[a-z]{2,12}[ \t]){2,5}[a-z]{2,12}[ \t]\d{1,4})(?:\1|<|[ \t]*\r?$)",
    re.M,
)
_PROSE_WORDS = frozenset(
    "a an the your my our their his her its this that these those to of in on at by for from with without and or not "
    "no is are was were be been must should can could will would may might please enter new old invalid wrong "
    "incorrect least most than characters chars letters digits long short after before retry attempts times "
    "minimum maximum min max reset sent email try again expired expires days hours minutes seconds".split()
)


def _passphrase(match: re.Match[str], _text: str) -> bool:
    """Three words or more of one case, no word prose is made of (`at least`, `your`, `characters`)."""
    words = match.group(2).split()[:-1]
    return all(word.lower() not in _PROSE_WORDS for word in words) and (
        all(word.islower() for word in words) or all(word.istitle() for word in words)
    )


# Redis clients' `AUTH` with the password alone: `jedis.auth("...")`, `r.auth("...")`, `client.auth("...", cb)`.
_REDIS_AUTH = re.compile(r"""\.auth[ \t]*\([ \t]*["']([^"'\s]{4,128})["'][ \t]*[,)]""")


# A user's flag, then a password's, on one command: `cqlsh -u u -p ...`, `sqlcmd -U sa -P ...`, `mosquitto_pub -u
# u -P ...`, `influx -username u -password ...`, `az login -u u -p ...`, `ipmitool -U u -P ...`, PowerShell's
# `-User u -Password ...`, PuTTY's `-l u -pw ...`. Not MySQL's clients (`mysql -u u -p db`: the client prompts;
# their own rule), not a port or a published port (`docker run -u 1000 -p 8080:80`), not an option's name.
_FLAG_PAIR = re.compile(
    r"(?i)(?<![\w-])(?:-u|--?user(?:name)?|--?login|-l(?=[ \t]+\S+[ \t]+(?:\S+[ \t]+)*?-pw\b))(?:[ \t]+|=)"
    r"[\"']?[^\s\"'|;&<>-][^\s\"'|;&<>]{0,63}[\"']?(?:[ \t]+[^\s|;&<>]+)*?[ \t]+"
    r"(?:-p|--?pass(?:word|wd)?|-pw)(?:[ \t]+|=)[\"']?([^\s\"'$<>|;&-][^\s\"'<>|;&]{3,127}?)[\"']?(?=[\s;|&)]|$)"
)
_MYSQL_CLIENT = re.compile(r"\b(?:mysql\w*|mariadb\w*)\b")
_PORTS = re.compile(r"[\d.:\[\]]+(?:/\w+)?")  # `8080:80`, `127.0.0.1:80:80`, `53/udp`
_NAMES = re.compile(r"[a-z]+(?:[:_.\-/][a-z]+)*")  # `no:cacheprovider`, `my-profile`


def _flag_password(match: re.Match[str], text: str) -> bool:
    value = match.group(1)
    line = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
    return (
        plain_secret(value)
        and not _PORTS.fullmatch(value)
        and not _NAMES.fullmatch(value)
        and not _MYSQL_CLIENT.search(line + text[match.start() : match.start(1)])
    )


# A password piped to what reads it from standard input: `echo "..." | sudo -S cmd`, `echo ... | docker login -u u
# --password-stdin`, `echo ... | passwd --stdin u`; PowerShell's `ConvertTo-SecureString "..." -AsPlainText`.
_STDIN_PASSWORD = re.compile(
    r"(?m)\becho[ \t]+(?:-[ne][ \t]+)*[\"']?([^\s\"'$<>|-][^\s\"'<>|]{3,127})[\"']?[ \t]*\|[ \t]*"
    r"(?:sudo[ \t]+(?:-\w+[ \t]+)*?-S\b|[^\n|]*--password-stdin\b|passwd[ \t]+--stdin\b)"
    r"|(?i:ConvertTo-SecureString)[ \t]+(?:-String[ \t]+)?[\"']([^\"'\n]{4,128})[\"'][ \t]+-AsPlainText"
)
# Oracle's `user/password@service` on its tools' command lines (`sqlplus -s scott/...@orcl`, `expdp
# system/...@db`, `rman target sys/...@db`, `exp userid=scott/...`) and in its Python drivers' `connect("u/...@dsn")`.
_ORACLE_LOGIN = re.compile(
    r"(?m)(?:\b(?:sqlplus|sqlldr|expdp|impdp|rman|dgmgrl)\b(?:[ \t]+-\w+)*[ \t]+(?:target[ \t]*=?[ \t]*)?"
    r"|\b(?:exp|imp|expdp|impdp|sqlldr)\b[^\n]*?[ \t]userid=)"
    r"[\"']?[\w$#]{1,30}/([^\s\"'/@]{3,128})(?=@|[\"'\s]|$)"
    r"|\b(?:cx_Oracle|oracledb)\.connect\([ \t]*(?:\w+=)?[\"'][\w$#]{1,30}/([^\s\"'/@]{3,128})@"
)
# Make's assignments of a password: `DB_PASSWORD ?= ...`, `export DB_PASS := ...` (`=` with blanks is code's too).
_MAKE_PASSWORD = re.compile(
    r"(?m)^[ \t]*(?:export[ \t]+|override[ \t]+)?(?:[A-Z0-9_]*_)?(?:PASSWORD|PASSWD|PASS|PWD)(?:_[A-Z0-9_]*)?"
    r"[ \t]*(?:\?|::?)=[ \t]*([^\s\"'$#][^\s\"']{3,127})[ \t]*\r?$"
)
# A password as documentation writes it: `Password: ...` opening a line (a list's, a quote's, a table's), the
# value ending it; `password **...**` or `` password `...` `` (markup around it), `the password is
# ...`, `| Password | ... |`. Only values no word or code reads like (`_doc_password`): `Password: required`,
# `password: String?`, `password: z.string()` stay.
_DOC_PASSWORD = re.compile(
    r"(?im)(?:^[ \t]*(?:[-*+>#|][ \t]*)*[*_:]{0,2}(?:password|passwd|passphrase)[*_]{0,2}[ \t]*[:=|][ \t]*[*_]{0,2}"
    r"[`\"']?([^\s`*\"'<>|()\[\]{}&][^\s`*\"'<>|()\[\]{}]{3,126})[`\"']?[*_]{0,2}[ \t]*\|?[ \t]*\r?$"
    r"|(?<![\w./\-])(?:password|passwd|passphrase)[*_]{0,2}(?:[ \t]*[:=|]|[ \t]+(?:is|was|of|to|set[ \t]+to|being))?"
    r"[ \t]*(?:\*\*|`|\*|__)([^\s`*\"'<>|()\[\]{}]{4,127})(?:\*\*|`|\*|__)"
    r"|(?<![\w./\-])(?:password|passwd|passphrase)[ \t]+(?:is|was|set[ \t]+to)[ \t]+[\"']?"
    r"([^\s`*\"'<>|()\[\]{},;]{4,127}?)[\"']?(?=[.,;:!)]?(?:\s|$)))"
)
_SYMBOL_INSIDE = re.compile(r"[!#$%&*+=?@^~][^\W_]|\d")  # a digit, or a symbol with a letter or digit after it
_VERSION = re.compile(r"v?\d+(?:[._\-]\d+)+\w*")
_IDENTIFIER_SHAPE = re.compile(r"[A-Za-z_]\w*")
_EXPRESSION = re.compile(r"[A-Za-z_]\w*(?:[-+*/%.][A-Za-z_]\w*)+")


def _doc_password(match: re.Match[str], _text: str) -> bool:
    """A letter, and a digit or a symbol inside (not a type's trailing `?`); no name (`user2`, `new_pass1`,
    `DB_PASS2`), path, URL, version or reference."""
    group = _value_group(match)
    value = match.group(group)
    if not plain_secret(value) or not _SYMBOL_INSIDE.search(value):
        return False
    if _NAMES.fullmatch(value) or _VERSION.fullmatch(value) or _DOTTED_NAME.fullmatch(value):
        return False
    if "=" in match.group(0)[: match.start(group) - match.start(0)] and _EXPRESSION.fullmatch(value):
        return False  # `password = Lq8-Kx2wZm` in code subtracts two names
    return not (_IDENTIFIER_SHAPE.fullmatch(value) and (len(value) < 6 or value.isupper() or "_" in value))


# Terraform's and OpenTofu's default of a password variable: `variable "db_password" { default = "..." }`.
_TERRAFORM_DEFAULT = re.compile(
    r"(?i)\bvariable[ \t]+\"[\w\-]*(?:password|passwd|pwd)[\w\-]*\"[ \t]*\{[^{}]{0,300}?"
    r"\bdefault[ \t]*=[ \t]*\"([^\"\s$]{4,128})\""
)

# scp's `user:password@host:path`, in an Ant task's attribute (`todir="u:...@host:/srv"`) or on an scp line.
_SCP_USERINFO = re.compile(
    r"""(?:\b(?:todir|remotetodir|remotefile|file|localtodir|remotetofile)=["']|\bscp\b[^\n]*?[ \t])"""
    r"([\w.\-]{1,32}):([^\s\"'@]{3,64})@[\w.\-]+:"
)
# A Google app password (four groups of four lower-case letters, as Google shows it) on a credential's line.
_APP_PASSWORD = re.compile(
    r"(?im)(?:pass|pwd|secret|credential|auth|login|smtp|mail)[^\n]{0,120}?(?<=[\"'>=:\s])"
    r"((?-i:[a-z]{4} [a-z]{4} [a-z]{4} [a-z]{4}))(?=[\"'<]|[ \t]*$)"
)

PASSWORD_RULES = [
    Rule("scp_credentials", _SCP_USERINFO, ((1, USERNAME), (2, PASSWORD)), 0.85, anchor=("@",), one_line=True),
    Rule(
        "app_password",
        _APP_PASSWORD,
        ((1, PASSWORD),),
        0.8,
        lambda match, _text: sum(group in common_words() for group in match.group(1).split()) <= 1,  # not prose
        keywords=("pass", "pwd", "secret", "credential", "auth", "login", "smtp", "mail"),
    ),
    Rule(
        "encoded_credentials",
        _JOINED_SECRET,
        ((1, PASSWORD),),
        0.8,
        _encoded_credentials,
        keywords=_ENCODER_WORDS,
    ),
    Rule(
        "encoded_credentials",
        _USER_COLON_SECRET,
        ((1, PASSWORD),),
        0.8,
        _encoded_credentials,
        keywords=_ENCODER_WORDS,
    ),
    Rule(
        "credential_argument",
        _QUOTED,
        ((0, PASSWORD),),
        0.8,
        _credential_argument,
        keywords=(
            "auth",
            "basic",
            "credential",
            "login",
            "logon",
            "signin",
            "sign_in",
            "bind",
            "connect",
            "pdo",
            "mysqli",
            "sequelize",
            "dialer",
            "resource.new",
            "forurl",
            "newinstance",
            "mysql.new",
            "oci_",
            "oracle",
            "pass",
            "pwd",
            "ftp",
            "smtp",
            "imap",
            "pop3",
            "transport",
        ),  # fmt: skip
        follow=3,  # `getConnection(\n url,\n "u",\n "...")`
    ),
    Rule(
        "cli_credentials",
        _CLI_CREDENTIALS,
        tuple((group, PASSWORD) for group in range(1, _CLI_CREDENTIALS.groups + 1)),
        0.8,
        _last_value,
        keywords=(
            "curl",
            "lftp",
            "smbclient",
            "mysql",
            "mariadb",
            "sshpass",
            "redis-cli",
            "-password",
            "pgpassword",
            "mysql_pwd",
            "rediscli_auth",
            "mongo",
            "htpasswd",
            "rabbitmqctl",
            "chpasswd",
            "ldap",
            "login",
            "snmp",
            "pass:",
            "storepass",
            "keypass",
        ),
    ),  # fmt: skip
    Rule(
        "xml_password",
        _XML_PASSWORD,
        ((2, PASSWORD), (3, PASSWORD), (4, PASSWORD)),
        0.8,
        _last_value,
        keywords=("pass", "pwd"),
        follow=2,  # `<password>\n  ...\n</password>`
    ),
    Rule(
        "xml_password",
        _SERVLET_PASSWORD,
        ((2, PASSWORD),),
        0.8,
        _last_value,
        anchor=("<param-name>", "<name>", "<key>"),
    ),
    Rule("env_password", _ENV_SETTER, ((1, PASSWORD),), 0.8, _last_value, keywords=("pass", "pwd")),
    Rule("env_password", _NAMED_ENV, ((1, PASSWORD),), 0.8, _last_value, keywords=("name:",), follow=1),
    Rule(
        "netrc_password",
        _NETRC,
        ((1, PASSWORD),),
        0.8,
        _last_value,
        keywords=("machine", "poll", "skip", "default"),
        follow=4,
    ),  # fmt: skip
    Rule(
        "sql_password",
        _SQL_PASSWORD,
        ((1, PASSWORD), (2, PASSWORD), (3, PASSWORD)),
        0.8,
        _last_value,
        keywords=("identified", "password"),
    ),
    Rule(
        "directive_password",
        _DIRECTIVE_PASSWORD,
        ((1, PASSWORD), (2, PASSWORD), (3, PASSWORD)),
        0.8,
        _last_value,
        keywords=("requirepass", "masterauth", "password", "passwd"),
    ),
    Rule("passphrase", _PASSPHRASE, ((2, PASSWORD),), 0.75, _passphrase, keywords=("pass", "pwd")),
    Rule("redis_auth", _REDIS_AUTH, ((1, PASSWORD),), 0.75, _last_value, keywords=(".auth",)),
    Rule("cli_credentials", _FLAG_PAIR, ((1, PASSWORD),), 0.75, _flag_password, keywords=("-p",)),
    Rule(
        "cli_credentials",
        _STDIN_PASSWORD,
        ((1, PASSWORD), (2, PASSWORD)),
        0.8,
        _last_value,
        keywords=("sudo", "stdin", "-asplaintext"),
    ),
    Rule(
        "oracle_login",
        _ORACLE_LOGIN,
        ((1, PASSWORD), (2, PASSWORD)),
        0.8,
        _last_value,
        keywords=("sqlplus", "sqlldr", "expdp", "impdp", "userid=", "rman ", "dgmgrl", "oracle"),
    ),
    Rule("make_password", _MAKE_PASSWORD, ((1, PASSWORD),), 0.75, _doc_password, keywords=("pass", "pwd")),
    Rule(
        "doc_password",
        _DOC_PASSWORD,
        ((1, PASSWORD), (2, PASSWORD), (3, PASSWORD)),
        0.75,
        _doc_password,
        keywords=("password", "passwd", "passphrase"),
    ),
    Rule(
        "terraform_password", _TERRAFORM_DEFAULT, ((1, PASSWORD),), 0.8, _last_value, keywords=("variable",), follow=6
    ),
    Rule(
        "dsn_password",
        _DSN_PASSWORD,
        ((1, PASSWORD), (2, PASSWORD)),
        0.8,
        _last_value,
        keywords=("@tcp(", "@unix(", "jdbc:oracle"),
    ),
]

# `--secret-key <key>`, `--access-key=<key>` on command lines (s3cmd, minio's mc), `--account-key <key>` (az).
_CLI_KEY = re.compile(
    r"(?i)(?<![\w-])--(?:aws-)?(?:secret|access|account|storage)[-_]?(?:access[-_]?)?key(?:[-_]id)?(?:=|[ \t]+)[\"']?"
    r"([A-Za-z0-9+/=_\-]{16,128})[\"']?(?=[\s;|&)]|$)"
)

# AWS's secret access key (40 characters of base64) after its name, in any syntax: a credentials file's
# `aws_secret_access_key = ...`, `aws_secret_access_key="..."` in a call, `AWS_SECRET_ACCESS_KEY: ...` in YAML.
_AWS_SECRET = re.compile(
    r"(?i)\baws_?secret_?access_?key\b[\"']?[ \t]*(?:=|:|=>|,)[ \t]*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
)
# A random literal after the first argument of a call that builds a credential: Azure's
# `NewSharedKeyCredential("acct", "...")`, `new StorageSharedKeyCredential(acct, "...")`, AWS's
# `new BasicAWSCredentials("AKIA...", "...")`, minio's `credentials.NewStaticV4("id", "...", "")`.
# Ruby's `Aws::Credentials.new("AKIA...", "...")`; the argument after an access key ID (twenty capitals and digits:
# `minio.New(host, "Q3AM3UQ867SPQQA43P2F", "...", true)`); Python's `BlobServiceClient(url, credential="...")`.
_CREDENTIAL_CALL_BEFORE = re.compile(
    r"(?i)\b(?!\w*(?:password|basic))\w*(?:credentials?|staticv[24])(?:\.new)?[ \t]*\([ \t]*"
    r"(?:[bu]?[\"'][^\"'\n]{1,80}[\"']|[$@]?[\w.\->]{1,80})"
    r"[ \t]*,[ \t]*[bu]?[\"']$"
    r"""|(?-i:["'][A-Z0-9]{20}["'])[ \t]*,[ \t]*[bu]?["']$|\b(?:credential|account_key)[ \t]*=[ \t]*[bu]?["']$"""
)
_QUOTED_TOKEN = re.compile(r"""(?<=["'`])[A-Za-z0-9+/=_\-.~]{20,}(?=["'`])""")


def _credential_key(match: re.Match[str], text: str) -> bool:
    return _token_literal(match.group(0)) and _preceded_by(_CREDENTIAL_CALL_BEFORE, match.start(), text, 200)


KEY_RULES = [
    Rule("cli_key", _CLI_KEY, ((1, KEY),), 0.8, _random_value, keywords=("-key",)),
    Rule("aws_secret_key", _AWS_SECRET, ((1, KEY),), 0.9, _random_value, keywords=("secret_access", "secretaccess")),
    Rule(
        "credential_key",
        _QUOTED_TOKEN,
        ((0, KEY),),
        0.8,
        _credential_key,
        keywords=("credential", "staticv", "minio.new", "account_key"),
    ),
    Rule("account_key", _ACCOUNT_KEY, ((1, KEY),), 0.9, _random_value, anchor=("AccountKey=", "SharedAccess")),
    Rule(
        "session_cookie",
        _SESSION_COOKIE,
        ((1, KEY),),
        0.75,
        _session_id,
        keywords=("session", "sessid", "sid=", "sid\t", "csrftoken", "remember_token", "zopeid", "cftoken", "sess"),
    ),
]


def recognizers() -> list[EntityRecognizer]:
    """The recognizers of this module that join every file's (`recognizers.code_recognizers`)."""
    return [
        RegexRecognizer("IdiomEmailPattern", EMAIL_RULES),
        RegexRecognizer("IdiomKeyPattern", KEY_RULES),
        RegexRecognizer("IdiomPasswordPattern", PASSWORD_RULES),
        _ClosingCredits(
            "ClosingCredits",
            [
                Rule("closing_credit", _CLOSING_CREDIT, ((1, USERNAME),), 0.75, _credited_handles, anchor=")"),
                Rule("closing_credit", _CLOSING_BRACKET_CREDIT, ((1, USERNAME),), 0.75, _credited_handles, anchor="]"),
            ],
        ),
    ]


# --- changelogs -------------------------------------------------------------------------------------------------

# An entry that closes with who did it, no period before (`- Fix x (jroe)`, `* Add y [@jroe]`, `- fix leak (GH#3)
# [Jane Roe]`, `(dkg, Jane Roe)`): a closing bracket at the end of a line.
_TRAILING = re.compile(r"(?m)\S[ \t]+[(\[]([\w@][\w@ ,.'’\-]{1,80})[)\]]\.?[ \t]*\r?$")
_TRAILING_ITEM = re.compile(r",[ \t]*|[ \t]+and[ \t]+")
_BARE_HANDLE = re.compile(r"@?[A-Za-z0-9][A-Za-z0-9\-]{1,38}")  # a forge's or CPAN's: no `_`, no dots
# A link definition for a handle, as Ruby and Go changelogs write them: `[@jroe]: https://github.com/jroe`.
_HANDLE_LINK = re.compile(
    r"(?m)^\[@([A-Za-z0-9][A-Za-z0-9\-]{0,38})\]:[ \t]*https?://(?:www\.)?(?:github|gitlab)\.com/"
)
TRAILING_CONVENTION = 2  # closing brackets holding a name or an @handle that make a file's entries close with credit


class _TrailingCredits(EntityRecognizer):
    """The handles that close a changelog's entries, in a file whose entries close that way: at least
    `TRAILING_CONVENTION` closing brackets hold a person's name or an `@handle` (`(Jane Roe)`, `[@jroe]`). Then a
    bare word there is a handle (`(solnic)`, `[rkitover]`) unless it is a word: of English (`english_words`) or of
    the shipped encoder's vocabulary, a common word or name (`(experimental)`, `(unreleased)`, `(rpm)`). Dates,
    references and groups are never handles (`_handle_word`). On Debian's Perl, Ruby, R and Go changelogs
    (other packages than the evaluation sets'), files without names or handles in that place close their entries
    with module names, flags and words (`(bilinear)`, `(normcnst)`), and those with them with handles."""

    def __init__(self) -> None:
        super().__init__(supported_entities=[USERNAME], name="TrailingCredits")

    def load(self) -> None:
        pass

    def analyze(self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None) -> list:
        if USERNAME not in entities or (")" not in text and "]" not in text):
            return []
        items = []  # (end, the item as written)
        for match in _TRAILING.finditer(text):
            at, parts = match.start(1), _TRAILING_ITEM.split(match.group(1))
            if any(part.lower() in common_words() for part in parts):  # `(speling, etc)`: a list of words
                continue
            for part in parts:
                start = text.index(part, at) if part else at
                items.append((start + len(part), part))
                at = start + len(part)
        credited = sum(part.startswith("@") and _handle_word(part) or bool(_PERSON_LINE.fullmatch(part))
                       for *_, part in items)  # fmt: skip
        results = [self._result(*match.span(1), "handle_link_definition") for match in _HANDLE_LINK.finditer(text)]
        if credited < TRAILING_CONVENTION:
            return results
        for end, part in items:
            if _BARE_HANDLE.fullmatch(part) and _handle_word(part) and any(c.isalpha() for c in part):
                bare = part.lstrip("@")
                if part.startswith("@") or bare.lower() not in common_words():
                    results.append(self._result(end - len(bare), end, "trailing_credit"))
        return results

    def _result(self, start: int, end: int, rule: str) -> RecognizerResult:
        result = RecognizerResult(USERNAME, start, end, 0.75)
        result.recognition_metadata = {
            DETECTOR: f"pattern:{rule}",
            RecognizerResult.RECOGNIZER_NAME_KEY: self.name,
            RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id,
        }
        return result


def history_recognizers() -> list[EntityRecognizer]:
    """The recognizers added for changelogs (`is_history_file`)."""
    return [_TrailingCredits()]


# --- files that list people -------------------------------------------------------------------------------------

# In an AUTHORS, THANKS, CONTRIBUTORS or MAINTAINERS file, a line that starts with a name names a person, whatever
# follows: an aligned address (`Jane Roe        jroe@x.org`, GNU's THANKS), a spelled-out one (`jroe at x.org`), what
# they did (`Jane Roe -- trac handler`, `Jane Roe: ports`), a role in brackets, or nothing. A `- `, a year or a
# `M: ` (the Linux kernel's) may come first.
_PEOPLE_LINE = re.compile(
    rf"(?m)^[ \t]*(?:[-*+•][ \t]+|=item[ \t]+(?:\*[ \t]+)?|(?:19|20)\d\d(?:[-–]\d{{2,4}})?,?[ \t]+|[A-Z]:[ \t]+)?"
    rf"(?P<list>{_PERSON})"
    r"(?=[ \t]*(?:\r?$|[<(\[*,;:]|--?[ \t]|[ \t]{2}|\t|[\w.+%-]+(?:@|[ \t]+at[ \t]+|[ \t]*[\[(]at[\])])))"
)
# A line that is a handle, alone or before what they did or their address: `rhatto -- rub handler`, `- jroe`,
# `@jroe`, `jroe <jroe@x.org>`, `jroe      jroe@x.org` (not `scrypt      Colin Percival`: a table of what each did).
_HANDLE_LINE = re.compile(
    rf"(?m)^[ \t]*(?:[-*+•][ \t]+)?@?({_HANDLE})"
    rf"(?=[ \t]*(?:\r?$|--?[ \t]|<[^<>@\s]+@|\([^()\s]+@|:[ \t]+{_PERSON})|[ \t]+[\w.+%-]+@)"
)  # and `jroe: Jane Roe`
# `Jane Roe @jroe`, `Jane Roe (@jroe)`, `Jane Roe [@jroe]`; after an address too: `Jane Roe <jroe@x.org> [jroe]`,
# `Jane Roe <jroe@x.org> github: jroe`.
_NAME_THEN_HANDLE = re.compile(rf"{_PERSON}[ \t]+[(\[]?@({_HANDLE})[)\]]?")
_ADDRESS_THEN_HANDLE = re.compile(
    rf"{_PERSON}[ \t]*<[^<>\s]+@[^<>\s]+>[ \t]*(?:[(\[][ \t]*@?({_HANDLE})[ \t]*[)\]]"
    rf"|(?i:github|gitlab|irc|handle|nick)[ \t]*:[ \t]*@?({_HANDLE}))"
)
# Any `@jroe` of a people file (a table's cell, CODEOWNERS), not a team (`@acme/docs`) or an address.
_AT_HANDLE = re.compile(rf"(?<![\w.@/`])@({_HANDLE})(?![\w-]*(?:/|@|\.\w))")
# Docker's TOML MAINTAINERS: `[people.jroe]` with `Name = "Jane Roe"`, `Email = ...`, `GitHub = "jroe"`.
_TOML_PERSON = re.compile(
    rf"(?m)^[ \t]*\[people\.({_HANDLE})\]"
    rf"""|^[ \t]*(?i:github|gitlab|handle|username)[ \t]*=[ \t]*["']@?({_HANDLE})["']"""
)
# Docker's MAINTAINERS: each team's `people = [ "jroe", "tli", ]`, a quoted handle on each line (or on one).
_OPEN_PEOPLE_ARRAY = re.compile(r"(?:^|\n)[ \t]*people[ \t]*=[ \t]*\[[^\]]*\Z")  # still open where the handle is
_QUOTED_HANDLE = re.compile(rf"""["']@?({_HANDLE})["']""")
# A Markdown table of people: a name in the first cell (`| Jane Roe | @jroe | jroe@x.org |`).
_TABLE_NAME = re.compile(rf"(?m)^\|[ \t]*(?P<list>{_PERSON})[ \t]*\|")
_TOML_NAME = re.compile(rf"""(?m)^[ \t]*(?i:name|fullname)[ \t]*=[ \t]*["'](?P<list>{_PERSON})["'][ \t]*\r?$""")
_NOT_LISTED_HANDLES = frozenset("none and the etc others other see todo tbd n/a various unknown".split())


_COLUMN_GAP = re.compile(r"[ \t]{2,}|\t")


def _people_names(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    for line in _PEOPLE_LINE.finditer(text, start, end):
        name_start, name_end = line.span("list")
        column = _COLUMN_GAP.search(text, name_start, name_end)  # `Jane Roe      Jane.Roe@x.org`: two columns
        yield name_start, column.start() if column else name_end


def _people_handle(match: re.Match[str], text: str) -> bool:
    return match.group(1).lower() not in _NOT_LISTED_HANDLES and _listed_handle(match, text)


def people_recognizers() -> list[EntityRecognizer]:
    """The recognizers added for files that list people (`is_people_file`)."""
    return [
        NameRecognizer(
            [
                NamePlace("people_file", re.compile(r"\A(?P<list>[\s\S]+)"), (), names=_people_names, reach=1 << 40),
                NamePlace("people_file", _TOML_NAME, ("name",), names=_one),
                NamePlace("people_file", _TABLE_NAME, ("|",), names=_one),
            ],
            name="PeopleFileName",
        ),
        RegexRecognizer(
            "PeopleFileHandle",
            [
                Rule("people_file_handle", _HANDLE_LINE, ((1, USERNAME),), 0.75, _people_handle),
                Rule("people_file_handle", _NAME_THEN_HANDLE, ((1, USERNAME),), 0.8, anchor="@"),
                Rule(
                    "people_file_handle",
                    _ADDRESS_THEN_HANDLE,
                    ((1, USERNAME), (2, USERNAME)),
                    0.8,
                    _slot_handle,
                    anchor="@",
                    one_line=True,
                ),
                Rule(
                    "people_file_handle", _AT_HANDLE, ((1, USERNAME),), 0.75, _credit_handle, anchor="@", one_line=True
                ),
                Rule("people_file_handle", _TOML_PERSON, ((1, USERNAME), (2, USERNAME)), 0.8),
                Rule(
                    "people_file_handle",
                    _QUOTED_HANDLE,
                    ((1, USERNAME),),
                    0.8,
                    lambda match, text: _preceded_by(_OPEN_PEOPLE_ARRAY, match.start(), text, 4000),
                    anchor="people",
                ),
            ],
        ),
        RegexRecognizer(
            "PeopleFileEmail",
            [
                Rule(
                    "obfuscated_email",
                    re.compile(r"(?<![\w.+%-])[\w.+%-]{1,64}[ \t]+(?:at|AT)[ \t]+[\w-]+(?:\.[\w-]+)+(?![\w-])"),
                    ((0, EMAIL),),
                    0.8,
                    lambda match, _text: _spelled_address(match.group(0)),
                    keywords=(" at ",),
                ),
            ],
        ),
    ]
