"""Software Heritage intrinsic identifiers (SWHIDs), computed with hashlib only.

SWH identifies contents, directories, revisions and releases by their git object hashes, and snapshots by a
SHA-1 over an SWH-specific manifest hashed the same way (a git-style `<type> <length>\\0` header, then the
body). The scheme is specified in SWH's "SoftWare Heritage persistent IDentifiers" document
(docs.softwareheritage.org, `swh-model/persistent-identifiers`); origins are identified by the SHA-1 of their
URL, as in the SWH graph export's `origin.id` column.

Every function returns the 40-digit lowercase hex id, the form the export's ORC tables use; the full SWHID is
`swh:1:<cnt|dir|rev|rel|snp>:<hex>`. This module is written from the specification: `swh.model` (GPL) is
neither imported nor copied.
"""

import hashlib

DIRECTORY_PERMS = 0o40000  # a tree entry that names a directory (git writes it as "40000")
SNAPSHOT_TARGET_TYPES = frozenset({"content", "directory", "revision", "release", "snapshot", "alias"})


def _git_object_id(kind: bytes, body: bytes) -> str:
    """SHA-1 of a git object: the header `<kind> <decimal length>\\0`, then the body."""
    return hashlib.sha1(b"%s %d\0" % (kind, len(body)) + body).hexdigest()


def content_id(data: bytes) -> str:
    """`swh:1:cnt:` id of a file's bytes: its git blob hash (`sha1_git` in the export's `content` table).

    Specified as the git blob object id: SHA-1 of `b"blob <length>\\0"` followed by the raw bytes.
    """
    return _git_object_id(b"blob", data)


def directory_id(entries: list[tuple[bytes, int, str]]) -> str:
    """`swh:1:dir:` id of a directory: its git tree hash, equal to `git write-tree` for the same entries.

    Args:
        entries: one `(name, perms, target)` per entry: the name bytes, the git mode as an int (`0o100644`,
            `0o100755`, `0o120000` symlink, `0o40000` directory, `0o160000` submodule) and the target's hex id.

    Entries are sorted as git sorts them, by name bytes with `/` appended to directory names (so `a.txt`
    sorts before the directory `a`, but `a-b` after it), and each is serialized as
    `b"<perms in octal> <name>\\0"` followed by the target's 20 raw bytes.
    """
    ordered = sorted(entries, key=lambda e: e[0] + b"/" if e[1] == DIRECTORY_PERMS else e[0])
    body = b"".join(b"%o %s\0" % (perms, name) + bytes.fromhex(target) for name, perms, target in ordered)
    return _git_object_id(b"tree", body)


def snapshot_id(branches: dict[bytes, tuple[str, bytes | None]]) -> str:
    """`swh:1:snp:` id of a snapshot: SHA-1 over SWH's manifest of its name-sorted branches.

    Args:
        branches: branch name -> `(target_type, target)`. `target_type` is one of content, directory,
            revision, release, snapshot (then `target` is the target's 20 raw id bytes) or alias (then
            `target` is the name bytes of the branch it points to). A `None` target is a dangling branch.

    Per the persistent-identifiers document, each branch is `<target_type> <name>\\0<len>:<target>` (a
    dangling one has type `dangling` and an empty target), and the concatenation is hashed as a git-style
    object of type `snapshot`.
    """
    body = bytearray()
    for name, (target_type, target) in sorted(branches.items()):
        if target is None:
            target_type, target = "dangling", b""
        elif target_type not in SNAPSHOT_TARGET_TYPES:
            raise ValueError(f"branch {name!r}: unknown target type {target_type!r}")
        elif target_type != "alias" and len(target) != 20:
            raise ValueError(f"branch {name!r}: a {target_type} target is 20 raw bytes, got {len(target)}")
        body += target_type.encode() + b" " + name + b"\0" + b"%d:" % len(target) + target
    return _git_object_id(b"snapshot", bytes(body))


def origin_id(url: str) -> str:
    """Id of an origin in the SWH graph export (`origin.id`): the SHA-1 hex of the URL's UTF-8 bytes."""
    return hashlib.sha1(url.encode("utf-8")).hexdigest()
