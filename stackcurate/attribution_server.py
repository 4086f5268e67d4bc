"""`stackcurate serve INDEX`: the attribution index over local HTTP (stackcurate/attribution.py).

- `POST /overlap` with `{"document": text}` answers `{"spans": [[start, end], ...]}`, character offsets of the
  sent text: the request and answer of Hugging Face's llm-vscode "Show Code Attribution" (it sends the text
  around the cursor to `<endpoint>/overlap` and highlights the spans), so the editor extension works against it;
- `POST /attribute` with `{"text": text}` and optionally `min_tokens`, `min_copied`, `max_files` (as
  `stackcurate attribute`'s flags) answers every span with its sources, as `stackcurate attribute --json`;
- `GET /search?q=...` answers the files that best match by BM25 (`{"hits": [{"score", ...source}]}`);
- `GET /` is a page where a person pastes code and sees its copied spans highlighted, each with its sources
  (links to the Software Heritage archive or the issue's URL); it loads nothing from outside this server.

A request is refused with a 4xx and one line of JSON (`{"error": ...}`) when its body is not JSON, not UTF-8,
not the expected object, or over `max_bytes` (413, read no further); the server goes on serving. It listens on
localhost unless told otherwise. The standard library's threading HTTP server: one process, a thread per
request, the index shared read-only.
"""

import json
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from stackcurate.attribution import Index

MAX_BYTES = 1_000_000
# The page: plain HTML and a script of its own, nothing from a CDN. `/?text=...` fills the box and asks at once.
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>stackcurate: copied from the training set?</title>
<style>
body { font-family: sans-serif; max-width: 60em; margin: 2em auto; }
textarea { width: 100%; height: 14em; font-family: monospace; }
pre { background: #f6f6f6; padding: 1em; white-space: pre-wrap; }
mark { background: #ffd54f; } li { margin: .4em 0; } .none { color: #555; }
</style></head>
<body>
<h1>Copied from the training set?</h1>
<p>Paste code a model wrote: the spans the training shards hold verbatim are highlighted, with the files they
come from.</p>
<textarea id="text" spellcheck="false"></textarea>
<p><button id="go">Find copied spans</button></p>
<div id="result"></div>
<script>
function escape(s) {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}
function link(source) {
  if (source.swhid) return "https://archive.softwareheritage.org/" + source.swhid;
  if (source.origin && source.origin.startsWith("https://")) return source.origin;
  return null;
}
function where(source) {
  const name = escape((source.repo_name || "") + " " + (source.path || ""));
  const url = link(source);
  const license = escape(source.license_type || "license unknown");
  return (url ? '<a href="' + escape(url) + '">' + name + "</a>" : name) + " [" + license + "]";
}
async function run() {
  const text = document.getElementById("text").value;
  const result = document.getElementById("result");
  const answer = await fetch("/attribute", {method: "POST", body: JSON.stringify({text: text})});
  const body = await answer.json();
  if (!answer.ok) { result.innerHTML = '<p class="none">' + escape(body.error) + "</p>"; return; }
  const spans = body.spans.slice().sort((a, b) => a.start - b.start);
  if (!spans.length) { result.innerHTML = '<p class="none">No span of this text is in the training set.</p>'; return; }
  let html = "", at = 0;
  spans.forEach((span, i) => {
    const start = Math.max(span.start, at);
    html += escape(text.slice(at, start));
    html += '<mark id="span-' + i + '">' + escape(text.slice(start, span.end)) + "</mark>";
    at = Math.max(at, span.end);
  });
  html += escape(text.slice(at));
  const list = spans.map((span, i) => '<li><a href="#span-' + i + '">' + span.tokens + " tokens</a>, in " +
    span.documents + " file(s), " + span.occurrences + " time(s): " + span.sources.map(where).join("; ") + "</li>");
  result.innerHTML = "<pre>" + html + "</pre><ol>" + list.join("") + "</ol>";
}
document.getElementById("go").addEventListener("click", run);
const given = new URLSearchParams(location.search).get("text");
if (given) { document.getElementById("text").value = given; run(); }
</script>
</body></html>
"""  # a request body larger than this is refused: llm-vscode sends about 500 characters


class _BadRequest(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def make_server(index: Index, host: str = "127.0.0.1", port: int = 8008, max_bytes: int = MAX_BYTES,
                timeout: float = 30.0) -> ThreadingHTTPServer:  # fmt: skip
    """An HTTP server answering from `index` (call `serve_forever`); port 0 picks a free one."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "stackcurate-attribution"

        def setup(self) -> None:
            super().setup()
            self.request.settimeout(timeout)  # a client that stops sending does not hold its thread forever

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass  # no line per request on the console

        def do_POST(self) -> None:  # noqa: N802 - the base class's name
            try:
                body = self._body()
                if self.path == "/overlap":
                    text = _field(body, "document")
                    spans = index.attribute(text)
                    self._send(HTTPStatus.OK, {"spans": sorted([s.start, s.end] for s in spans)})
                elif self.path == "/attribute":
                    text = _field(body, "text")
                    least = _count(body, "min_tokens", 1)
                    spans = index.attribute(text, least, _count(body, "min_copied", 0), _count(body, "max_files", 1))
                    self._send(HTTPStatus.OK, {"spans": [s.to_dict() for s in spans]})
                else:
                    raise _BadRequest(HTTPStatus.NOT_FOUND, f"no endpoint {self.path}: POST /overlap or /attribute")
            except _BadRequest as exc:
                self._send(exc.status, {"error": str(exc)})

        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            url = urlsplit(self.path)
            if url.path == "/":
                data = PAGE.encode()
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if url.path != "/search":
                self._send(HTTPStatus.NOT_FOUND, {"error": "GET /search?q=..., or POST /overlap or /attribute"})
                return
            query = parse_qs(url.query).get("q", [""])[0]
            if not query.strip():
                self._send(HTTPStatus.BAD_REQUEST, {"error": "give the words to search as ?q=..."})
                return
            hits = [{"score": score, **asdict(source)} for score, source in index.search(query)]
            self._send(HTTPStatus.OK, {"hits": hits})

        def _body(self) -> dict[str, Any]:
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                raise _BadRequest(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length")
            if int(length) > max_bytes:
                self.close_connection = True  # the body is not read: the connection cannot be reused
                raise _BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body is over {max_bytes} bytes")
            raw = self.rfile.read(int(length))
            try:
                body = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise _BadRequest(HTTPStatus.BAD_REQUEST, "the body is not UTF-8") from None
            except ValueError:
                raise _BadRequest(HTTPStatus.BAD_REQUEST, "the body is not JSON") from None
            if not isinstance(body, dict):
                raise _BadRequest(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
            return body

        def _send(self, status: HTTPStatus, answer: dict[str, Any]) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return ThreadingHTTPServer((host, port), Handler)


def _count(body: dict[str, Any], name: str, least: int) -> int | None:
    """The integer `body[name]`, at least `least` (None where absent); a 400 otherwise."""
    value = body.get(name)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
        raise _BadRequest(HTTPStatus.BAD_REQUEST, f"{name} must be an integer of at least {least}")
    return value


def _field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise _BadRequest(HTTPStatus.BAD_REQUEST, f'the body must hold "{name}": a string')
    return value
