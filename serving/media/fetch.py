"""Fetches media URLs with httpx under a byte cap, a timeout, a redirect limit and a private-address guard."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

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
        return address.is_global and not address.is_multicast


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
            await self._check_target(url, param)
            try:
                async with self._client.stream("GET", url, follow_redirects=False) as response:
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

    async def _check_target(self, url: str, param: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise MediaError("only http(s) and data: URLs are accepted", code="invalid_image_url", param=param)
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise MediaError(f"cannot resolve host {host!r}", code="media_fetch_failed", param=param) from exc
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if not self._policy.permits(host, address):
                raise MediaError(
                    f"refusing to fetch {host!r}: it resolves to a private, loopback or link-local address",
                    code="invalid_image_url",
                    param=param,
                )
