"""Who may use the admin API: requests addressed to this server (no DNS rebinding), with the
operator's bearer token, or, with no token set, reads from local clients through no proxy."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Awaitable, Callable

from aiohttp import web

from adaptivespec.server.protocol import ApiError
from adaptivespec.server.state import CONFIG

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path == "/admin" or request.path.startswith("/admin/"):
        _authorise(request)
    return await handler(request)


_PROXY_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")
_LOOPBACK_PEERS = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


# A Host header is a name or an IPv4 address, or a bracketed IPv6 address, then an optional
# port (RFC 9110 7.2): nothing else, so "evil.com@127.0.0.1" is never read as 127.0.0.1.
_HOST_HEADER = re.compile(r"(?:(?P<name>[A-Za-z0-9.-]+)|\[(?P<v6>[0-9A-Fa-f:.]+)\])(?::[0-9]{1,5})?")


def host_name(header: str | None) -> str | None:
    """The host a Host header names, lower-cased, or None when it is not a well-formed one."""
    match = _HOST_HEADER.fullmatch(header or "")
    if match is None:
        return None
    return (match.group("name") or match.group("v6")).lower()


def _authorise(request: web.Request) -> None:
    config = request.app[CONFIG]
    host = host_name(request.headers.get("Host"))
    if host is None:
        raise ApiError(400, "the Host header is not a host name with an optional port", param="Host")
    if host not in config.admin_host_names:
        raise ApiError(
            403,
            f"admin requests must be addressed to this server, not {host!r}; "
            "add the name to allowed_hosts (ADAPTIVESPEC_ALLOWED_HOSTS) if it is one",
            kind="permission_error",
        )
    changes = request.method not in ("GET", "HEAD")
    if changes and request.content_type != "application/json" and request.method != "DELETE":
        raise ApiError(415, "admin changes must be sent as Content-Type: application/json")
    if config.admin_token is None:
        _authorise_without_token(request, changes)
        return
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    expected = hashlib.sha256(config.admin_token.encode()).digest()
    # Header bytes that are not UTF-8 reach us as lone surrogates: any token, compared as bytes.
    given = hashlib.sha256(token.strip().encode("utf-8", "surrogatepass")).digest()
    if scheme.lower() != "bearer" or not hmac.compare_digest(expected, given):
        raise ApiError(401, "missing or wrong admin bearer token", kind="authentication_error")


def _authorise_without_token(request: web.Request, changes: bool) -> None:
    if changes:
        raise ApiError(
            403,
            "admin changes need a token: set ADAPTIVESPEC_ADMIN_TOKEN and send it as a bearer token",
            kind="permission_error",
        )
    proxied = any(name in request.headers for name in _PROXY_HEADERS)
    if request.remote not in _LOOPBACK_PEERS or proxied:
        raise ApiError(
            403,
            "without ADAPTIVESPEC_ADMIN_TOKEN the admin pages are served only to local clients "
            "that come through no proxy; set a token",
            kind="permission_error",
        )
