"""Response security headers (CSP and friends, HSTS) and the rule for whether a request arrived over https.

A request is secure when its own scheme is https, or when its peer is one of the configured trusted proxies and
that proxy's X-Forwarded-Proto says https. Forwarding headers from any other peer are ignored: a client can write
them. Secure requests get HSTS; cookies are marked Secure on secure requests, or always when the operator forces
them on.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from litestar.datastructures import MutableScopeHeaders
from litestar.types import Message, Scope

# One policy for every console page and error page. Inline scripts, inline event handlers, javascript: URLs,
# eval and style attributes are all refused. data: and blob: images and media are the playground's previews of
# chosen files and recordings; nothing else needs them.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data: blob:",
        "connect-src 'self'",
        "media-src 'self' data: blob:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
HSTS = "max-age=31536000; includeSubDomains"
PAGE_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",  # frame-ancestors, for browsers that predate it
}
# The JSON API and the operations endpoints: machine-read, never rendered, so no page policy.
API_PATHS = re.compile(r"^/(v1|admin)/|^/(health|metrics)$")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class TrustedProxies:
    """The reverse proxies whose X-Forwarded-Proto is believed."""

    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> TrustedProxies:
        networks = []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError as exc:
                raise ValueError(f"TESSERA_TRUSTED_PROXIES: {entry!r} is not an IP address or CIDR") from exc
        return cls(tuple(networks))

    def trusts(self, host: str | None) -> bool:
        if not host or not self.networks:
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False  # a unix socket or a test client's name: not an address anyone configured
        return any(address in network for network in self.networks)

    def is_secure(self, scope: Scope) -> bool:
        if scope.get("scheme") in ("https", "wss"):
            return True
        client = scope.get("client")
        if not self.trusts(client[0] if client else None):
            return False
        return forwarded_proto(scope) == "https"


def forwarded_proto(scope: Scope) -> str | None:
    """The protocol the nearest proxy reports: the last entry of X-Forwarded-Proto, lower-cased."""
    values = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"x-forwarded-proto"]
    entries = [e.strip().lower() for e in ",".join(values).split(",") if e.strip()]
    return entries[-1] if entries else None


def secure_cookie(header: str) -> str:
    """A Set-Cookie value with the Secure attribute, added if it is missing."""
    attributes = [a.strip().lower() for a in header.split(";")[1:]]
    return header if "secure" in attributes else header + "; Secure"


BeforeSend = Callable[[Message, Scope], Awaitable[None]]


def security_headers(proxies: TrustedProxies, *, always_secure_cookies: bool) -> BeforeSend:
    """A `before_send` hook: it sees every response the app sends, routed or not, errors included."""

    async def before_send(message: Message, scope: Scope) -> None:
        if message["type"] != "http.response.start":
            return
        headers = MutableScopeHeaders.from_message(message)
        if "x-content-type-options" not in headers:
            headers["x-content-type-options"] = "nosniff"
        if not API_PATHS.search(scope.get("path", "")):
            for name, value in PAGE_HEADERS.items():
                if name not in headers:
                    headers[name] = value
        secure = proxies.is_secure(scope)
        if secure:
            headers["strict-transport-security"] = HSTS
        if secure or always_secure_cookies:
            cookies = headers.getall("set-cookie", [])
            if cookies:
                del headers["set-cookie"]
                for cookie in cookies:
                    headers.add("set-cookie", secure_cookie(cookie))

    return before_send
