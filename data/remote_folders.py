"""A folder (a reference pack, a release) read from a location that arrives from outside: `reference check FOLDER`,
`build --reference`, a config's `reference:`, a Prefect parameter. `pack_filesystem(location)` gives the fsspec
filesystem and root path to read it from, and never reaches a network host unguarded:

| location | read through |
|---|---|
| a path, `file://`, `memory://` | fsspec, as any local folder |
| `s3://`, `gs://`, ... | its fsspec backend if installed (else one line naming it); errors as `RemoteReadError` |
| `https://` | `GuardedHTTPFileSystem`: public addresses (or this machine) only |
| `http://` | the same, to a loopback host only (`localhost`, 127.0.0.0/8, ::1): plain http must not leave the machine |
| `a::b`, `zip://`, `reference://`, `ftp://`, ... | refused |

`GuardedHTTPFileSystem` is read-only and makes its own requests (fsspec's HTTPFileSystem would connect anywhere and
follow any redirect): the SSRF guard (`data.ssrf.check_url`) before every request and every redirect hop, the guarded
resolver (`data.ssrf.GuardedResolver`: no private, link-local or metadata address, even through DNS), redirects
within the folder's own origin (scheme, host and port) only, at most `MAX_REDIRECTS` of them, no proxy from the
environment, no cookies. A folder is listed from the HTML index its server answers for `<folder>/` (the links to its
direct children; python's `http.server` and most autoindex pages), within caps on the listing's size, the entries,
the listings and the bytes of one response.

Every refusal and every failure to read (an unreachable host, a timeout, an HTTP error other than 404) is a
`RemoteReadError` (a ValueError): one line, `<url>: <why>`, the URL shown without user, password or query. A missing
file or folder stays what fsspec says for it (FileNotFoundError, `isdir` False), so a reader tells "not there" from
"cannot read".
"""

from __future__ import annotations

import asyncio
import codecs
import io
import os
import re
import weakref
from collections.abc import Callable, Iterator
from html import unescape
from typing import Any, Literal, TypedDict
from urllib.parse import urlsplit

import aiohttp
from fsspec.asyn import AsyncFileSystem, sync
from fsspec.core import split_protocol, url_to_fs
from fsspec.implementations.http import HTTPFileSystem
from fsspec.spec import AbstractFileSystem
from yarl import URL

from data.ssrf import AddressPolicy, BlockedAddressError, GuardedResolver, UrlRefused, check_url, is_loopback_host
from data.ssrf import storage_refusal as _storage_refusal

MAX_REDIRECTS = 5
#: Caps on what a folder's server may make us read: an index page, its entries, the indexes of one folder tree (a
#: pack has a few, a release a few dozen), and one response's body (a pack's file is capped far lower by its reader).
MAX_LISTING_BYTES = 4 * 2**20
MAX_ENTRIES = 10_000
MAX_LISTINGS = 1_000
MAX_RESPONSE_BYTES = 256 * 2**20
CONNECT_TIMEOUT_S = 15
READ_TIMEOUT_S = 60
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
LOCAL_PROTOCOLS = frozenset({"file", "local", "memory"})
HTTP_PROTOCOLS = frozenset({"http", "https"})
LISTING_TYPES = frozenset({"text/html", "application/xhtml+xml"})
USER_AGENT = "culturebench (reference pack reader)"
_HREF = re.compile(r"""<a\s[^>]*?\bhref\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_IPV6_HOST = re.compile(r"https?://(?:[^/?#@\[\]]*@)?\[[0-9a-z:.%_-]*\]", re.IGNORECASE)
_WHAT_IS_READ = "a folder is read from a path, file://, an object store (s3://, gs://, ...) or https://"


class EntryInfo(TypedDict):
    """What fsspec's `ls(detail=True)` and `info` give of an entry."""

    name: str
    size: int | None  # None for a folder, and for a file served compressed
    type: Literal["directory", "file"]


class RemoteReadError(ValueError):
    """A location that is refused, or that cannot be read: `<url>: <why>`, on one line."""

    def __init__(self, location: str, reason: str) -> None:
        self.location = shown(location)
        self.reason = " ".join(reason.split())
        super().__init__(f"{self.location}: {self.reason}")


def is_chained(location: str) -> bool:
    """Whether fsspec would read `location` as a chain (`a::b`); the `::` of an IPv6 host (`http://[::1]/`) aside,
    which `pack_filesystem` reads itself, never through fsspec."""
    literal = _IPV6_HOST.match(location)
    return "::" in (location[literal.end() :] if literal else location)


def shown(location: str | URL) -> str:
    """How a message names a location: each URL without its user, password, query or fragment; one line."""
    text = str(location)
    links = text.split("::") if is_chained(text) else [text]
    return _CONTROL.sub("?", "::".join(_shown_link(link) for link in links))[:500]


def _shown_link(text: str) -> str:
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        scheme, _, rest = text.partition("://")
        return f"{scheme}://{re.split(r'[?#]', rest.rpartition('@')[2], maxsplit=1)[0]}"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}{parts.path}"


def pack_filesystem(location: str | os.PathLike[str]) -> tuple[AbstractFileSystem, str]:
    """The filesystem and root path to read a pack (or release) folder at `location` from (see the module); any
    refusal is a `RemoteReadError`, before a request is made."""
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    text = str(location)
    if is_chained(text):
        # fsspec reads `a::b` as a chain (zip://x::http://..., simplecache::...): it fetches the inner link at once.
        raise RemoteReadError(text, f"a chained fsspec URL ('a::b') is refused; {_WHAT_IS_READ}")
    protocol = split_protocol(text)[0]
    if protocol is not None and protocol.lower() in HTTP_PROTOCOLS:
        return http_folder(text)
    refusal = _storage_refusal(text)
    if refusal:
        raise RemoteReadError(text, f"refused: {refusal}; {_WHAT_IS_READ}")
    try:
        fs, root = url_to_fs(text)
    except ImportError as exc:  # fsspec knows the protocol, its package is not installed
        raise RemoteReadError(text, f"cannot read: {protocol}:// needs a package not installed here ({exc})") from None
    except (ValueError, TypeError) as exc:
        raise RemoteReadError(text, f"not a usable location ({exc})") from None
    if protocol is None or protocol in LOCAL_PROTOCOLS:
        return fs, root
    return ReadErrorsFileSystem(fs, text), root


def http_folder(location: str) -> tuple[GuardedHTTPFileSystem, str]:
    """The guarded filesystem for an http(s) folder URL, and the URL as its root; RemoteReadError when the URL is
    refused (checked without a DNS lookup or a connection)."""
    try:
        url = URL(location.strip())
        scheme = (url.scheme or "").lower()
    except (ValueError, TypeError) as exc:
        raise RemoteReadError(location, f"not a URL ({exc})") from None
    policy = AddressPolicy(only_loopback=True) if scheme == "http" else AddressPolicy(allow_loopback=True)
    try:
        url = check_url(url, policy)
    except UrlRefused as exc:
        raise RemoteReadError(location, f"refused: {exc.detail}") from None
    if url.raw_query_string or url.raw_fragment:
        raise RemoteReadError(location, "refused: a folder URL has no query or fragment")
    if scheme == "http" and not is_loopback_host(url.raw_host or ""):
        raise RemoteReadError(
            location,
            "refused: plain http:// is read from this machine only (localhost, 127.0.0.0/8, ::1); use https://",
        )
    root = str(url)
    return GuardedHTTPFileSystem(root, policy), root


def _origin(url: URL) -> tuple[str, str, int | None]:
    return (url.scheme or "").lower(), (url.raw_host or "").lower(), url.port


def _mimetype(response: aiohttp.ClientResponse) -> str:
    return response.headers.get("Content-Type", "").partition(";")[0].strip().lower()


def _codec(charset: str | None) -> str:
    """The codec an index page names, if Python knows it; UTF-8 otherwise."""
    try:
        return codecs.lookup(charset or "utf-8").name
    except LookupError:
        return "utf-8"


def _failure(exc: BaseException, url: URL) -> str:
    """Why a request failed, in a few words (never the request's headers)."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        if isinstance(exc.os_error, BlockedAddressError):
            return f"refused: {exc.os_error}"
        return f"cannot read (cannot resolve {url.host}: {exc.os_error})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot read (cannot connect to {url.host}:{url.port}: {exc.os_error.strerror or exc.os_error})"
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return f"cannot read (no answer within {READ_TIMEOUT_S} s)"
    return f"cannot read ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"


class GuardedHTTPFileSystem(AsyncFileSystem):  # type: ignore[misc]  # fsspec is untyped
    """A read-only fsspec filesystem for the http(s) folder `root` (see the module). Not cached by fsspec: each
    folder has its own session and its own listing budget."""

    protocol = ("http", "https")
    sep = "/"
    cachable = False

    def __init__(self, root: str, policy: AddressPolicy, **kwargs: Any) -> None:
        super().__init__(asynchronous=False, **kwargs)
        self.root = root
        self.origin = _origin(URL(root))
        self.policy = policy
        self.listings = 0
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return str(path)  # a URL stays whole, as in fsspec's HTTPFileSystem

    @classmethod
    def _parent(cls, path: str) -> str:
        return str(path).rstrip("/").rpartition("/")[0]

    async def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=4, resolver=GuardedResolver(self.policy))
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S),
                headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,  # an environment proxy would connect on our behalf, past the resolver's guard
                auto_decompress=False,
            )
            weakref.finalize(self, HTTPFileSystem.close_session, self.loop, self._session)
        return self._session

    def _checked(self, target: URL, url: str, hop: int) -> URL:
        """`target` if it may be requested: the SSRF guard, and the folder's own origin."""
        where = f" (redirect {hop})" if hop else ""
        try:
            checked = check_url(target, self.policy)
        except UrlRefused as exc:
            raise RemoteReadError(url, f"refused{where}: {exc.detail}") from None
        if _origin(checked) != self.origin:
            scheme, host, port = _origin(checked)
            raise RemoteReadError(
                url,
                f"refused{where}: {scheme}://{host}:{port} is another origin than the folder's; a folder is read "
                "from its own scheme, host and port only",
            )
        return checked

    async def _response(self, path: str, folder: bool = False) -> tuple[aiohttp.ClientResponse, URL]:
        """The 2xx response to a GET of `path` (of its index page `<path>/` for a `folder`; the body unread, the
        caller releases it) and the URL that answered, redirects followed by hand; FileNotFoundError for a 404,
        RemoteReadError (naming `path`) for everything else."""
        url = path
        try:
            current = URL(f"{path.rstrip('/')}/" if folder else path)
        except (ValueError, TypeError) as exc:
            raise RemoteReadError(url, f"not a URL ({exc})") from None
        session = await self._get_session()
        for hop in range(MAX_REDIRECTS + 1):
            current = self._checked(current, url, hop)
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S + READ_TIMEOUT_S):
                    response = await session.get(current, allow_redirects=False)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise RemoteReadError(url, _failure(exc, current)) from None
            status = response.status
            if status in REDIRECT_CODES:
                location = response.headers.get("Location")
                response.release()
                if not location:
                    raise RemoteReadError(url, f"HTTP {status} redirect without a Location")
                try:
                    current = current.join(URL(location))
                except ValueError:
                    raise RemoteReadError(url, f"HTTP {status} redirect to an unusable Location") from None
                continue
            if status == 404:
                response.release()
                raise FileNotFoundError(shown(url))
            if not 200 <= status < 300:
                response.release()
                raise RemoteReadError(url, f"cannot read (HTTP {status} {response.reason or ''})".replace(" )", ")"))
            return response, current
        raise RemoteReadError(url, f"refused: more than {MAX_REDIRECTS} redirects")

    async def _body(self, response: aiohttp.ClientResponse, url: str, limit: int, size: int = -1) -> bytes:
        """Up to `size` bytes of the body (all of it when negative), never more than `limit`."""
        wanted = limit if size < 0 else min(size, limit)
        chunks: list[bytes] = []
        got = 0
        try:
            while got < wanted:
                chunk = await response.content.read(min(wanted - got, 1 << 20))
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                got += len(chunk)
            if size < 0 and await response.content.read(1):
                raise RemoteReadError(url, f"refused: more than {limit:,} bytes in one response")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise RemoteReadError(url, _failure(exc, URL(url))) from None
        return b"".join(chunks)

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        """The folder's direct children, from the links of its index page (`<path>/`): a link ending in `/` is a
        folder; a link elsewhere (another origin, outside the folder, with a query) is not a child."""
        self.listings += 1
        if self.listings > MAX_LISTINGS:
            raise RemoteReadError(path, f"refused: more than {MAX_LISTINGS} folders listed")
        response, answered = await self._response(path, folder=True)
        try:
            if _mimetype(response) not in LISTING_TYPES:
                return []  # a file: nothing under it
            page = await self._body(response, path, MAX_LISTING_BYTES)
            charset = _codec(response.charset)
        finally:
            response.release()
        base = answered if answered.path.endswith("/") else answered.with_path(f"{answered.path}/")
        entries: dict[str, EntryInfo] = {}
        for href in _HREF.findall(page.decode(charset, errors="replace")):
            try:
                target = base.join(URL(unescape(href)))
            except ValueError:
                continue
            if _origin(target) != _origin(base) or target.raw_query_string or not target.path.startswith(base.path):
                continue
            relative = target.path[len(base.path) :]
            name = relative.rstrip("/")
            if not name or "/" in name or name in (".", ".."):
                continue  # the folder itself, its parent, or deeper: not a direct child
            full = f"{path.rstrip('/')}/{name}"
            entries[full] = {"name": full, "size": None, "type": "directory" if relative.endswith("/") else "file"}
            if len(entries) > MAX_ENTRIES:
                raise RemoteReadError(path, f"refused: more than {MAX_ENTRIES} entries in one folder")
        listed = [entries[name] for name in sorted(entries)]
        return listed if detail else [entry["name"] for entry in listed]

    async def _isdir(self, path: str) -> bool:
        """A folder: `<path>/` answers an index page."""
        try:
            response, _ = await self._response(path, folder=True)
        except FileNotFoundError:
            return False
        try:
            return _mimetype(response) in LISTING_TYPES
        finally:
            response.release()

    async def _info(self, path: str, **kwargs: Any) -> EntryInfo:
        response, _ = await self._response(path)
        try:
            listing = _mimetype(response) in LISTING_TYPES
            size = response.content_length if not response.headers.get("Content-Encoding") else None
        finally:
            response.release()
        return {"name": path, "size": None if listing else size, "type": "directory" if listing else "file"}

    async def _isfile(self, path: str) -> bool:
        try:
            return bool((await self._info(path))["type"] == "file")
        except FileNotFoundError:
            return False

    async def _exists(self, path: str, **kwargs: Any) -> bool:
        try:
            await self._info(path)
        except FileNotFoundError:
            return False
        return True

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        response, _ = await self._response(path)
        try:
            data = await self._body(response, path, MAX_RESPONSE_BYTES)
        finally:
            response.release()
        return data[start:end]

    async def _pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
        raise RemoteReadError(path, "refused: an http(s) folder is read, never written")

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> RemoteFile:
        if mode != "rb":
            raise RemoteReadError(path, "refused: an http(s) folder is read, never written")
        return RemoteFile(self, path)


class RemoteFile(io.RawIOBase):
    """A file of a `GuardedHTTPFileSystem`, streamed: `read(n)` returns n bytes unless the file ends first (fsspec's
    stream returns what one network read brings)."""

    def __init__(self, fs: GuardedHTTPFileSystem, url: str) -> None:
        super().__init__()
        self.fs = fs
        self.name = url
        self._response: aiohttp.ClientResponse | None = None

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        return bytes(sync(self.fs.loop, self._read, -1 if size is None else size))

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    async def _read(self, size: int) -> bytes:
        if self._response is None:
            self._response, _ = await self.fs._response(self.name)
        return await self.fs._body(self._response, self.name, MAX_RESPONSE_BYTES, size)

    async def _release(self) -> None:
        if self._response is not None:
            self._response.release()
            self._response = None

    def close(self) -> None:
        if not self.closed and self._response is not None:
            sync(self.fs.loop, self._release)
        super().close()


class ReadErrorsFileSystem(AbstractFileSystem):  # type: ignore[misc]  # fsspec is untyped
    """An object store's filesystem whose failures (no credentials, an unreachable endpoint, access denied) are
    `RemoteReadError` lines naming the location; a missing file is still FileNotFoundError."""

    cachable = False

    def __init__(self, inner: AbstractFileSystem, location: str) -> None:
        super().__init__()
        self.inner = inner
        self.location = location
        self.protocol = inner.protocol

    def _call(self, method: Callable[..., Any], path: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(path, *args, **kwargs)
        except (FileNotFoundError, RemoteReadError):
            raise
        except Exception as exc:  # the backend's own errors (botocore's, aiohttp's, ...): one line naming the store
            where = self.inner.unstrip_protocol(str(path)) if isinstance(path, str) else self.location
            reason = f"cannot read ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
            raise RemoteReadError(where, reason) from None

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        return self._call(self.inner.ls, path, detail=detail, **kwargs)

    def info(self, path: str, **kwargs: Any) -> Any:
        return self._call(self.inner.info, path, **kwargs)

    def isdir(self, path: str) -> bool:
        return bool(self._call(self.inner.isdir, path))

    def isfile(self, path: str) -> bool:
        return bool(self._call(self.inner.isfile, path))

    def exists(self, path: str, **kwargs: Any) -> bool:
        return bool(self._call(self.inner.exists, path, **kwargs))

    def find(self, path: str, maxdepth: int | None = None, withdirs: bool = False, **kwargs: Any) -> Any:
        return self._call(self.inner.find, path, maxdepth=maxdepth, withdirs=withdirs, **kwargs)

    def walk(self, path: str, maxdepth: int | None = None, **kwargs: Any) -> Iterator[Any]:
        return iter(self._call(lambda p: list(self.inner.walk(p, maxdepth=maxdepth, **kwargs)), path))

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        return bytes(self._call(self.inner.cat_file, path, start=start, end=end, **kwargs))

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if mode != "rb":
            raise RemoteReadError(self.inner.unstrip_protocol(path), "refused: a pack folder is read here, not written")
        kwargs.pop("autocommit", None)
        return _ReadErrorsFile(self, self._call(self.inner.open, path, mode, **kwargs), path)


class _ReadErrorsFile(io.RawIOBase):
    """An object store's open file whose read failures are `RemoteReadError` lines."""

    def __init__(self, fs: ReadErrorsFileSystem, handle: Any, path: str) -> None:
        super().__init__()
        self.fs, self.handle, self.name = fs, handle, path

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        return bytes(self.fs._call(lambda _: self.handle.read(-1 if size is None else size), self.name))

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self.handle.close()
            finally:
                super().close()
