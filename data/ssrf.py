"""SSRF guard for every URL that arrives from outside: which URLs may be fetched, and which addresses may be
connected to.

Search hits are URLs chosen by strangers, and so are a reference pack's URL (a config's `reference:`, `--reference`,
a Prefect parameter) and a Hub endpoint. Without a guard, such a URL (or a redirect it leads to) could make us fetch
`http://169.254.169.254/` (cloud metadata), `http://localhost:8080/admin` or a host on the private network. Two
checks close that door:

- `check_url` runs before every request, the first and each redirect hop: scheme, host, userinfo, literal IPs
  (canonical or legacy numeric forms such as `2130706433` or `0x7f.1`) are decided without any DNS lookup;
- `GuardedResolver` is the aiohttp resolver: it drops every resolved address that is not allowed, so the address
  that is checked is the address that is connected to (no time-of-check/time-of-use gap for DNS rebinding).
  aiohttp never calls a resolver for a literal IP host, which is why `check_url` covers those.

fsspec speaks http, ftp, sftp, smb and more without any of these checks. `storage_refusal` keeps a reader to
storage protocols, so a URL that names a network host can only be fetched by a guarded client (the downloader,
`data.remote_folders`).

It lives in `data/` so that both the collectors (the downloader) and the shared readers (reference packs,
publishing) use the one guard; `collectors.ssrf` re-exports it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from fsspec.core import split_protocol as fsspec_split_protocol
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOWED_SCHEMES = frozenset({"http", "https"})
# What a local corpus (and the build workspace, where the demo corpus lives) may be read from through fsspec: local
# files, memory, and object stores. An object-store URL names a bucket, reached through the endpoint the operator
# configured, never a host of its own; every other protocol (http, ftp, sftp, smb, webdav, ...) names a host.
STORAGE_PROTOCOLS = frozenset({"file", "local", "memory", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl"})
MAX_URL_CHARS = 8192  # longer URLs are refused by most servers anyway; a cheap cap on abuse

# RFC 6052 NAT64 well-known prefix: the last 32 bits are an IPv4 address reached through a translator.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# Legacy numeric IPv4 spellings that inet_aton accepts: decimal, octal or hex parts, 1 to 4 of them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_LEGACY_IPV4 = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\.?$", re.IGNORECASE)


class UrlRefused(Exception):
    """A URL that must not be fetched; `error` is `invalid_url` or `blocked_address`."""

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(f"{error}: {detail}")
        self.error = error
        self.detail = detail


def storage_refusal(url: str) -> str | None:
    """Why fsspec must not open `url` for a local corpus, or None when it may (see STORAGE_PROTOCOLS).

    The answer says what is wrong; callers add what to do instead, which depends on where the URL came from.
    """
    text = str(url)
    if "::" in text:
        # fsspec reads `a::b` as a chain (simplecache::http://..., zip://x::ftp://...): the inner link is fetched too.
        # Not echoed: the URL is in the row already, and a link of the chain may carry credentials.
        return "a chained fsspec URL ('a::b') is not a storage URL (only plain paths and storage URLs are read)"
    protocol = fsspec_split_protocol(text)[0]  # as fsspec will read it: `data:` included, case kept
    if protocol is None or protocol in STORAGE_PROTOCOLS:
        return None
    storage = ", ".join(sorted(STORAGE_PROTOCOLS - {"local"}))
    return f"{protocol!r} is not a storage protocol (local paths, {storage})"


class BlockedAddressError(OSError):
    """Raised by the resolver when every address of a host is refused.

    An OSError so that aiohttp wraps it in `ClientConnectorDNSError` (its `os_error` keeps this instance) instead
    of letting it escape as an unexpected exception.
    """

    def __init__(self, host: str, reasons: list[str]) -> None:
        super().__init__(f"{host} resolves only to refused addresses: {', '.join(reasons)}")
        self.host = host
        self.reasons = reasons


@dataclass(frozen=True)
class AddressPolicy:
    """`allow_private` admits loopback and private-network addresses (tests, intranet mirrors); `allow_loopback`
    admits this machine only (a local mirror, a test server), not the private network; `only_loopback` admits
    nothing else (plain http, which must not leave the machine).

    Link-local (169.254.0.0/16 holds cloud metadata endpoints), multicast, unspecified and reserved addresses stay
    refused even then: no image host legitimately lives there.
    """

    allow_private: bool = False
    allow_loopback: bool = False
    only_loopback: bool = False

    def refusal(self, ip: IPAddress) -> str | None:
        """Why `ip` may not be connected to, or None when it may."""
        if isinstance(ip, ipaddress.IPv6Address):
            embedded = _embedded_ipv4(ip)
            if embedded is not None:
                if self.only_loopback and ip.ipv4_mapped is None:  # 6to4, Teredo, NAT64: reached via a relay
                    return f"{ip} is not loopback (it reaches {embedded} through a relay)"
                reason = self.refusal(embedded)
                return f"{reason} (embedded in {ip})" if reason else None
        if ip.is_unspecified:
            return f"{ip} is unspecified"
        if ip.is_multicast:
            return f"{ip} is multicast"
        if ip.is_link_local:
            return f"{ip} is link-local"
        if ip.is_loopback:
            loopback_allowed = self.allow_private or self.allow_loopback or self.only_loopback
            return None if loopback_allowed else f"{ip} is loopback"
        if self.only_loopback:
            return f"{ip} is not loopback"
        if ip.is_reserved:
            return f"{ip} is reserved"
        if ip.is_private or not ip.is_global:
            # is_private covers RFC 1918, ULA and the special ranges; not is_global adds shared 100.64.0.0/10.
            return None if self.allow_private else f"{ip} is private/non-global"
        return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, Teredo client, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def parse_ip_host(host: str) -> tuple[IPAddress, bool] | None:
    """The IP a host names literally, and whether it was written in canonical form; None for a domain name."""
    candidate = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(candidate.split("%", 1)[0]), True
    except ValueError:
        pass
    if _LEGACY_IPV4.match(candidate):
        try:
            # inet_aton reads 127.1, 0177.0.0.1, 0x7f000001 and 2130706433 as 127.0.0.1, as a resolver would.
            return ipaddress.IPv4Address(socket.inet_aton(candidate.rstrip("."))), False
        except OSError:
            return None
    return None


def is_loopback_host(host: str) -> bool:
    """Whether a URL's host names this machine without a DNS lookup: `localhost`, or a loopback IP in canonical
    form (127.0.0.0/8, ::1; not a legacy spelling, not an IPv4-mapped or embedded form). Another name may resolve
    anywhere."""
    if host.lower().rstrip(".") == "localhost":
        return True
    literal = parse_ip_host(host)
    return literal is not None and literal[1] and literal[0].is_loopback


def check_url(raw: str | URL, policy: AddressPolicy) -> URL:
    """Parse and vet a URL before a request; raise `UrlRefused` or return the URL to hand to aiohttp."""
    text = str(raw)
    if len(text) > MAX_URL_CHARS:
        raise UrlRefused("invalid_url", f"URL is {len(text)} characters long (max {MAX_URL_CHARS})")
    if _CONTROL.search(text):
        raise UrlRefused("invalid_url", "URL contains control characters")
    try:
        url = raw if isinstance(raw, URL) else URL(text.strip())
    except (ValueError, TypeError) as exc:
        raise UrlRefused("invalid_url", f"unparsable URL: {exc}") from None
    scheme = (url.scheme or "").lower()
    if scheme not in ALLOWED_SCHEMES:
        raise UrlRefused("invalid_url", f"scheme {scheme or '(none)'!r} is not http or https")
    if url.user is not None or url.password is not None:
        # `http://trusted.example@10.0.0.1/` reads like the trusted host but connects to the one after the '@'.
        raise UrlRefused("invalid_url", "credentials (userinfo) in the URL are refused")
    host = url.raw_host
    if not host:
        raise UrlRefused("invalid_url", "URL has no host")
    try:
        url.port  # noqa: B018 - yarl validates the port lazily
    except ValueError as exc:
        raise UrlRefused("invalid_url", f"bad port: {exc}") from None
    literal = parse_ip_host(host)
    if literal is not None:
        ip, canonical = literal
        reason = policy.refusal(ip)
        if reason:
            raise UrlRefused("blocked_address", f"host {host} is a refused address: {reason}")
        if not canonical:
            # aiohttp refuses these forms itself; say why before it does.
            raise UrlRefused("invalid_url", f"host {host} is a non-canonical numeric IPv4 form of {ip}")
    return url


class GuardedResolver(AbstractResolver):
    """Wraps aiohttp's default resolver and removes refused addresses from every answer.

    When nothing is left, raises `BlockedAddressError`, which aiohttp reports as a DNS error of the connection;
    the downloader maps it to `blocked_address`. Results pass through aiohttp's DNS cache only after this filter.
    """

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        allowed: list[ResolveResult] = []
        reasons: list[str] = []
        for result in results:
            parsed = parse_ip_host(result["host"])
            reason = "unparsable address" if parsed is None else self.policy.refusal(parsed[0])
            if reason:
                reasons.append(reason)
            else:
                allowed.append(result)
        if not allowed:
            raise BlockedAddressError(host, reasons)
        return allowed

    async def close(self) -> None:
        await self._inner.close()
