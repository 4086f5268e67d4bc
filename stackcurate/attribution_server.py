"""`stackcurate serve INDEX`: the attribution index over local HTTP (stackcurate/attribution.py).

- `POST /overlap` with `{"document": text}` answers `{"spans": [[start, end], ...]}`, character offsets of the
  sent text: the request and answer of Hugging Face's llm-vscode "Show Code Attribution" (it sends the text
  around the cursor to `<endpoint>/overlap` and highlights the spans), so the editor extension works against it;
- `POST /attribute` with `{"text": text, "min_tokens": n}` answers every span with its sources, as
  `stackcurate attribute --json`;
- `GET /search?q=...` answers the files that best match by BM25 (`{"hits": [{"score", ...source}]}`).

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

MAX_BYTES = 1_000_000  # a request body larger than this is refused: llm-vscode sends about 500 characters


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
                    least = body.get("min_tokens")
                    if least is not None and (not isinstance(least, int) or isinstance(least, bool) or least < 1):
                        raise _BadRequest(HTTPStatus.BAD_REQUEST, "min_tokens must be a positive integer")
                    spans = index.attribute(text, least)
                    self._send(HTTPStatus.OK, {"spans": [s.to_dict() for s in spans]})
                else:
                    raise _BadRequest(HTTPStatus.NOT_FOUND, f"no endpoint {self.path}: POST /overlap or /attribute")
            except _BadRequest as exc:
                self._send(exc.status, {"error": str(exc)})

        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            url = urlsplit(self.path)
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


def _field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise _BadRequest(HTTPStatus.BAD_REQUEST, f'the body must hold "{name}": a string')
    return value
