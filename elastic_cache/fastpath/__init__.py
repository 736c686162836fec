"""The lean HTTP/1.1 front of the node and the coordinator (docs/architecture.md, "The
data path").

One listening socket per server. Every connection starts here: httptools (llhttp, the
parser of uvicorn and sanic) parses it, and the server's `HotRoutes` decide, from a
request's method, path and headers, whether this layer answers it. The hot requests
(key GET/HEAD/PUT/DELETE, read-through GET/HEAD) are answered here, without a web
framework. Everything else, and any request a hot handler declines, is served by the
server's full aiohttp application, which keeps every route:

- the connection's **first** request not hot: the whole connection is handed to aiohttp
  (its bytes so far are replayed into aiohttp's protocol), so control-plane clients and
  migration streams, which open their own connections, pay nothing;
- a request not hot **later** on a connection that already had hot answers: relayed to
  the same aiohttp application over a private Unix socket, its body streamed as it
  arrives and aiohttp's answer relayed byte for byte (the parser gives no byte offset
  of a message, so a connection cannot change hands in the middle).

Answers go out in request order (pipelining), one request in work at a time per
connection; a connection idle past ``keepalive`` seconds, or silent for
``request_timeout`` seconds in the middle of a request, is closed; a malformed request
gets a JSON 400 and the connection is closed.

The package: `answers` builds an answer's bytes, `request` holds what routes see and
decide with, `connection` is one client connection (`parsing` builds its requests,
`relay` hands it over or relays to aiohttp), `server` the listening socket.
"""

from __future__ import annotations

from elastic_cache.fastpath.answers import (
    chunked_head,
    error_bytes,
    no_content_bytes,
    response_bytes,
    stored_answer,
    value_bytes,
)
from elastic_cache.fastpath.parsing import aiohttp_limits
from elastic_cache.fastpath.request import (
    CLIENT_HEADER,
    DECLINE,
    HotRequest,
    HotRoutes,
    Later,
    Streamed,
    client_address,
    plain_content_type,
    query_value,
    split_target,
    whole_body_within,
)
from elastic_cache.fastpath.server import RUN_DIR_ENV, FastServer, ensure_port_free

__all__ = [
    "CLIENT_HEADER",
    "DECLINE",
    "RUN_DIR_ENV",
    "FastServer",
    "HotRequest",
    "HotRoutes",
    "Later",
    "Streamed",
    "aiohttp_limits",
    "chunked_head",
    "client_address",
    "ensure_port_free",
    "error_bytes",
    "no_content_bytes",
    "plain_content_type",
    "query_value",
    "response_bytes",
    "split_target",
    "stored_answer",
    "value_bytes",
    "whole_body_within",
]
