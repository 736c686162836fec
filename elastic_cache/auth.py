"""The cluster token: what guards every route of the coordinator and the nodes.

With a token configured, every request to the coordinator or to a node must carry
``Authorization: Bearer TOKEN``; any other answers ``401`` with a JSON `Unauthorized`
body and ``WWW-Authenticate: Bearer``. The check runs on both edges of a server: the
lean layer (`elastic_cache.fastpath`, once per request, on the raw header bytes) and the
aiohttp application (`token_middleware`, for the connections the lean layer hands
over). Without a token nothing is checked and nothing is added to the request path.

Open without the token, by design (docs/aws.md, "Threat model"): ``GET /healthz``
(load balancers and launchers probe it; it says only whether the server serves, its
node id and ring epoch) and the dashboard's static files (``/`` and ``/dashboard/*``:
the package's own HTML, CSS and JavaScript, the same for every cluster; the data they
show comes from ``/v1/cluster``, which needs the token).

Where the token comes from: ``ecache deploy`` keeps a random one in SSM Parameter Store
(a SecureString; never in user data, on disk or on a command line), which the
coordinator and the nodes read at start (`elastic_cache.aws.ssm.fetch_token`); locally,
``ecache up --token`` (or ``$ECACHE_TOKEN``) gives it to the coordinator, which passes it
to the nodes it starts in their environment.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from elastic_cache.errors import ConfigError, Unauthorized
from elastic_cache.httpio import refuse_before_body

#: What aiohttp calls before a body announced with ``Expect: 100-continue`` is sent.
ExpectHandler = Callable[[web.Request], Awaitable[web.StreamResponse | None]]

__all__ = [
    "CHALLENGE",
    "REFUSED_ROUTE",
    "TOKEN_ENV",
    "TokenGuard",
    "check_token",
    "guarded_expect",
    "token_middleware",
    "unauthorized",
]

#: The environment variable that carries the token to ``ecache`` and to the node
#: processes a local coordinator starts (read only by `elastic_cache.cli`).
TOKEN_ENV = "ECACHE_TOKEN"

#: The ``route`` label of the 401s in ``ecache_http_requests_total`` (answered before
#: any routing).
REFUSED_ROUTE = "unauthorized"

#: The header every 401 carries (RFC 6750).
CHALLENGE = ("WWW-Authenticate", "Bearer")

_ALLOWED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")


def check_token(token: str) -> str:
    """``token`` if it can be a bearer token (RFC 6750's ``b64token``: letters, digits
    and ``-._~+/=``, 16 to 512 characters), so it goes into a header as it is.

    Raises:
        ConfigError: it cannot; the operator's to fix.
    """
    if not 16 <= len(token) <= 512 or not set(token) <= _ALLOWED:
        raise ConfigError(
            "a cluster token must be 16 to 512 characters of A-Z a-z 0-9 - . _ ~ + / = "
            f"(got {len(token)} characters)"
        )
    return token


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenGuard:
    """What a server with a token admits.

    Attributes:
        token: the cluster token (`check_token`).
        open_paths: exact paths answered without it.
        open_prefixes: path prefixes answered without it.
    """

    token: str = field(repr=False)
    open_paths: frozenset[str] = frozenset({"/healthz"})
    open_prefixes: tuple[str, ...] = ()
    #: Where its 401s are counted (`count_refusals`).
    counted_by: list[Callable[[str, str, int, float], None]] = field(
        default_factory=list, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        check_token(self.token)

    @classmethod
    def for_node(cls, token: str) -> TokenGuard:
        """A node's: only ``/healthz`` is open."""
        return cls(token=token)

    @classmethod
    def for_coordinator(cls, token: str) -> TokenGuard:
        """The coordinator's: ``/healthz`` and the dashboard's static files are open."""
        return cls(
            token=token, open_paths=frozenset({"/healthz", "/"}), open_prefixes=("/dashboard/",)
        )

    def count_refusals(self, record: Callable[[str, str, int, float], None]) -> None:
        """Count every 401 answered for this guard, on either layer, with ``record`` (a
        process's `RequestMeter.record`: route ``unauthorized``, status 401), in place
        of any earlier one. They were counted nowhere, so ``/metrics`` showed no
        refused request (review)."""
        self.counted_by[:] = [record]

    def refused(self, method: str) -> None:
        """A request was answered 401."""
        for record in self.counted_by:
            record(REFUSED_ROUTE, method, 401, 0.0)

    @property
    def expected(self) -> bytes:
        """The token a request's ``Authorization: Bearer`` must present (`bearer_token`),
        as bytes."""
        return self.token.encode()

    def is_open(self, raw_path: str) -> bool:
        """Whether ``raw_path`` (as sent, without the query) is answered without the
        token. A path with a dot segment or a percent escape never is: what it names
        after decoding is the router's to say, not a prefix check's."""
        if "/." in raw_path or "%" in raw_path:
            return False
        return raw_path in self.open_paths or (
            bool(self.open_prefixes) and raw_path.startswith(self.open_prefixes)
        )


def authorization(token: str) -> str:
    """The ``Authorization`` header value that carries ``token``."""
    return f"Bearer {token}"


def bearer_token(value: bytes) -> bytes:
    """The token an ``Authorization`` value presents under the Bearer scheme, whose name
    is case-insensitive (RFC 9110 §11.1: ``bearer`` and ``BEARER`` too) and followed by
    one or more spaces; b"" for any other scheme."""
    scheme, _, rest = value.partition(b" ")
    if scheme.lower() != b"bearer":
        return b""
    return rest.lstrip(b" ")


def unauthorized(given: bool) -> Unauthorized:
    """The error of a request without the token (``given`` False) or with a wrong one."""
    if given:
        return Unauthorized("wrong cluster token in Authorization: Bearer")
    return Unauthorized(
        "this cluster needs Authorization: Bearer <the cluster token> (ecache token "
        "--name NAME prints a deployed cluster's; clients take token=, ecache --token or "
        "$ECACHE_TOKEN)"
    )


def token_middleware(guard: TokenGuard) -> Middleware:
    """An aiohttp middleware that answers 401 to any request without exactly one
    ``Authorization: Bearer token`` header (constant-time compare), but on
    ``guard``'s open paths."""

    @web.middleware
    async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        refusal = _refusal(guard, request)
        return refusal if refusal is not None else await handler(request)

    return require_token


def guarded_expect(guard: TokenGuard | None, expect: ExpectHandler) -> ExpectHandler:
    """A route's ``Expect: 100-continue`` handler that first checks the token: aiohttp
    runs a route's expect handler before any middleware, so on a connection handed over
    a PUT without the token got the handler's 421 or 413, with the node's fill and
    epoch, instead of a 401 (review)."""
    if guard is None:
        return expect

    async def check_first(request: web.Request) -> web.StreamResponse | None:
        refusal = _refusal(guard, request)
        if refusal is not None:
            return await refuse_before_body(request, refusal)
        return await expect(request)

    return check_first


def _refusal(guard: TokenGuard, request: web.Request) -> web.Response | None:
    """The 401 for a request without exactly one ``Authorization: Bearer token`` header
    (constant-time compare), but on ``guard``'s open paths; None: it may pass."""
    header = request.headers.getall("Authorization", ())
    given = header[0].encode("latin-1", "replace") if len(header) == 1 else b""
    path = request.raw_path.partition("?")[0]
    if hmac.compare_digest(bearer_token(given), guard.expected) or guard.is_open(path):
        return None
    guard.refused(request.method)
    err = unauthorized(bool(header))
    return web.json_response(err.to_json(), status=err.status, headers=dict([CHALLENGE]))
