"""Fetches media URLs with httpx under a byte cap, a timeout, a redirect limit and a private-address guard.

Each hop's host is resolved once, every address is checked, and the connection goes to the checked address
(the URL carries the IP; `Host` and TLS SNI carry the name), so DNS rebinding between the check and the
connection cannot reach a private address."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from serving.errors import MediaError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class FetchPolicy:
    timeout_s: float
    max_bytes: int
    max_redirects: int
    allow_hosts: frozenset[str]
    allow_networks: tuple[IPNetwork, ...]

    @classmethod
    def build(cls, *, timeout_s: float, max_bytes: int, max_redirects: int, allow: Iterable[str]) -> FetchPolicy:
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in allow:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower())
        return cls(timeout_s, max_bytes, max_redirects, frozenset(hosts), tuple(networks))

    def permits(self, host: str, address: IPAddress) -> bool:
        if host.lower() in self.allow_hosts or any(address in net for net in self.allow_networks):
            return True
        if address in _LOCAL_NAT64 and address not in _LOCAL_NAT64_96:
            return False  # a network-specific NAT64 prefix longer than /48: where its IPv4 sits is not knowable
        if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
            return False  # deprecated fec0::/10, which older ipaddress versions count as global
        embedded = _embedded_ipv4(address)
        if embedded is not None and not (embedded.is_global and not embedded.is_multicast):
            return False
        return address.is_global and not address.is_multicast


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215 local-use prefix
_LOCAL_NAT64_96 = ipaddress.ip_network("64:ff9b:1::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated ::a.b.c.d
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT ::ffff:0:a.b.c.d
_LAST_32_BITS = (_NAT64, _LOCAL_NAT64_96, _IPV4_COMPATIBLE, _IPV4_TRANSLATED)


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for: mapped (::ffff:a.b.c.d), 6to4 (2002::/16), NAT64 (64:ff9b::/96
    and the local-use 64:ff9b:1::/96), IPv4-compatible (::a.b.c.d) or IPv4-translated (::ffff:0:a.b.c.d)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in net for net in _LAST_32_BITS):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


class MediaFetcher:
    """Downloads one URL for a request; every hop is checked against the policy before it is contacted."""

    def __init__(self, client: httpx.AsyncClient, policy: FetchPolicy) -> None:
        self._client = client
        self._policy = policy

    async def fetch(self, url: str, *, param: str) -> bytes:
        try:
            return await asyncio.wait_for(self._follow(url, param), timeout=self._policy.timeout_s)
        except TimeoutError as exc:
            raise MediaError(
                f"fetching {url} timed out after {self._policy.timeout_s:g}s", code="media_fetch_failed", param=param
            ) from exc

    async def _follow(self, url: str, param: str) -> bytes:
        for _ in range(self._policy.max_redirects + 1):
            address = await self._check_target(url, param)
            try:
                async with self._client.stream("GET", **_pinned(url, address), follow_redirects=False) as response:
                    if response.is_redirect:
                        url = urljoin(url, response.headers.get("location", ""))
                        continue
                    if response.status_code != 200:
                        raise MediaError(
                            f"fetching the URL returned HTTP {response.status_code}",
                            code="media_fetch_failed",
                            param=param,
                        )
                    return await self._read_capped(response, param)
            except httpx.HTTPError as exc:
                raise MediaError(
                    f"fetching the URL failed: {type(exc).__name__}", code="media_fetch_failed", param=param
                ) from exc
        raise MediaError(f"more than {self._policy.max_redirects} redirects", code="media_fetch_failed", param=param)

    async def _read_capped(self, response: httpx.Response, param: str) -> bytes:
        declared = response.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self._policy.max_bytes:
            raise MediaError(
                f"the URL's content is larger than {self._policy.max_bytes} bytes", code="media_too_large", param=param
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self._policy.max_bytes:
                raise MediaError(
                    f"the URL's content is larger than {self._policy.max_bytes} bytes",
                    code="media_too_large",
                    param=param,
                )
            chunks.append(chunk)
        return b"".join(chunks)

    async def _check_target(self, url: str, param: str) -> IPAddress:
        """The address to connect to, once every address the host resolves to has passed the policy."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise MediaError("only http(s) and data: URLs are accepted", code="invalid_image_url", param=param)
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise MediaError(f"cannot resolve host {host!r}", code="media_fetch_failed", param=param) from exc
        addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
        for address in addresses:
            if not self._policy.permits(host, address):
                raise MediaError(
                    f"refusing to fetch {host!r}: it resolves to a private, loopback or link-local address",
                    code="invalid_image_url",
                    param=param,
                )
        if not addresses:
            raise MediaError(f"cannot resolve host {host!r}", code="media_fetch_failed", param=param)
        return next((a for a in addresses if a.version == 4), addresses[0])  # v4 first, as most servers listen


def _pinned(url: str, address: IPAddress) -> dict[str, Any]:
    """Request arguments that reach `address` while naming the URL's host in `Host` and TLS SNI."""
    parts = urlsplit(url)
    ip = f"[{address}]" if address.version == 6 else str(address)
    netloc = ip if parts.port is None else f"{ip}:{parts.port}"
    host_header = parts.netloc.rsplit("@", 1)[-1]
    return {
        "url": urlunsplit(parts._replace(netloc=netloc)),
        "headers": {"host": host_header},
        "extensions": {"sni_hostname": parts.hostname},
    }
