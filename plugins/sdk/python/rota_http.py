"""Plain HTTP for Python handlers of the `rota:plugin/handler` world.

`wasi:http/outgoing-handler` is asynchronous and stream-based; a handler usually wants one
request and its whole answer. `request` does that, on the `poll_loop` module that
`componentize-py bindings` writes next to `wit_world` (copy this file beside your app, or
put `plugins/sdk/python` on the componentize path with `-p`).

    from rota_http import request
    answer = request("GET", "http://orders.internal:8080/orders/42")
    answer.status, answer.headers, answer.body, answer.text(), answer.json()

Rota sends the request only if its URL is on the job's HTTP allow-list; otherwise it is
refused before any connection is made, and `request` raises `HttpError` saying so.
"""

import asyncio
import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple
from urllib.parse import urlsplit

import poll_loop
from componentize_py_types import Err
from wit_world.imports import types


class HttpError(Exception):
    """The request was not answered: refused by the allow-list, or the network failed."""


@dataclass
class Response:
    status: int
    headers: Dict[str, str]
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self):
        return json.loads(self.body)


_METHODS = {
    "GET": types.Method_Get,
    "HEAD": types.Method_Head,
    "POST": types.Method_Post,
    "PUT": types.Method_Put,
    "DELETE": types.Method_Delete,
    "OPTIONS": types.Method_Options,
    "PATCH": types.Method_Patch,
}


def request(
    method: str,
    url: str,
    headers: Optional[List[Tuple[str, str]]] = None,
    body: bytes = b"",
) -> Response:
    """Sends one request and returns its whole answer (any status); raises `HttpError`
    if there is none."""
    return poll_loop.PollLoop().run_until_complete(_send(method, url, headers or [], body))


def _describe(error) -> str:
    value = getattr(error, "value", error)
    name = type(value).__name__.replace("ErrorCode_", "").replace("_", " ").lower()
    detail = getattr(value, "value", None)
    return f"{name}: {detail}" if detail else name


async def _send(method: str, url: str, headers: List[Tuple[str, str]], body: bytes) -> Response:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HttpError(f"`{url}` is not an http(s) URL")
    fields = types.Fields.from_list([(k, v.encode()) for k, v in headers])
    req = types.OutgoingRequest(fields)
    verb = _METHODS.get(method.upper())
    req.set_method(verb() if verb else types.Method_Other(method.upper()))
    req.set_scheme(types.Scheme_Https() if parts.scheme == "https" else types.Scheme_Http())
    req.set_authority(parts.netloc)
    req.set_path_with_query(parts.path + (f"?{parts.query}" if parts.query else "") or "/")
    outgoing = req.body()
    try:
        response = await _answer(req, outgoing, body)
    except Err as e:
        raise HttpError(f"{method.upper()} {parts.scheme}://{parts.netloc}{parts.path}: {_describe(e)}")
    status = response.status()
    answer_headers = {k: v.decode("utf-8", errors="replace") for k, v in response.headers().entries()}
    stream = poll_loop.Stream(response.consume())
    chunks = []
    while True:
        chunk = await stream.next()
        if chunk is None:
            break
        chunks.append(chunk)
    return Response(status, answer_headers, b"".join(chunks))


async def _answer(req, outgoing, body: bytes):
    # Sending starts first, so that a body larger than the host's buffer streams out.
    sending = asyncio.ensure_future(poll_loop.send(req))
    sink = poll_loop.Sink(outgoing)
    if body:
        await sink.send(body)
    sink.close()
    return await sending
