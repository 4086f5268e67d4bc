"""Bytes to text, following The Stack v2 extraction rules (SC2 §2.1; REFERENCE a5).

- A NUL byte means binary: the file is dropped.
- Decode with the declared encoding, then UTF-8, then the detected charset; a file none of them decodes is
  bad input. (The Stack v2 used cchardet for detection; charset-normalizer is the maintained equivalent.)
"""

import codecs
import hashlib
from dataclasses import dataclass

from charset_normalizer import from_bytes

# SWH serves these bodies instead of the content (REFERENCE a3); they are not source code.
SWH_PLACEHOLDERS = (
    b"This content has not been retrieved in the Software Heritage archive due to its size.",
    b"This content is hidden.",
)
_MISSING_MARK = b"missing from the Software Heritage archive"


def sha1_hex(data: bytes) -> str:
    """SWH `sha1` / The Stack v2 `blob_id`: plain SHA-1 of the raw bytes."""
    return hashlib.sha1(data).hexdigest()


def git_blob_hex(data: bytes) -> str:
    """SWH `sha1_git` / The Stack v2 `content_id`: the git blob hash, as in `swh:1:cnt:<hex>`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_placeholder(data: bytes) -> bool:
    head = data[:200]
    return any(head.startswith(p) for p in SWH_PLACEHOLDERS) or (len(data) < 400 and _MISSING_MARK in data)


@dataclass(frozen=True)
class Decoded:
    text: str | None
    encoding: str | None = None
    reason: str | None = None
    detail: str | None = None


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def decode(data: bytes, declared: str | None = None) -> Decoded:
    """Decode file bytes: declared encoding, then UTF-8, then detection (SC2 §2.1)."""
    if not data:
        return Decoded(None, reason="empty")
    if b"\0" in data:
        return Decoded(None, reason="binary", detail="contains a NUL byte")
    tried = []
    for name in (declared, "utf-8"):
        codec = _codec(name)
        if codec is None or codec in tried:
            continue
        tried.append(codec)
        try:
            return Decoded(data.decode(codec), encoding=name if name == declared else "UTF-8")
        except (UnicodeDecodeError, LookupError):  # LookupError: a bytes-to-bytes codec such as base64
            continue
    best = from_bytes(data).best()
    if best is not None and best.encoding:
        try:
            return Decoded(data.decode(best.encoding), encoding=best.encoding)
        except (UnicodeDecodeError, LookupError):
            pass
    return Decoded(None, reason="undecodable", detail=f"not {', '.join(tried)} and no charset detected")
