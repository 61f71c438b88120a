"""Hostile inputs, fourth round (issue 56, item 1): a pack (or release) folder URL that arrives from outside is read
through `data.remote_folders.pack_filesystem`, never from any host fsspec would reach.

Each test runs its own loopback servers (python's `http.server`, as a pack's mirror would), and a `TrapServer` (on
127.0.0.2, or another port of 127.0.0.1) stands for every place a hostile redirect points to: it records every
connection, so "not followed" is seen on the wire.
"""

from __future__ import annotations

import functools
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.memory import MemoryFileSystem

import data.remote_folders as remote_folders
import data.ssrf as ssrf
from data.remote_folders import ReadErrorsFileSystem, RemoteReadError, pack_filesystem
from data.ssrf import AddressPolicy, is_loopback_host, parse_ip_host
from tests.support.fake_hub import trap
from tests.support.paths import REPO_ROOT

PACK = REPO_ROOT / "data" / "reference"


@dataclass
class Site:
    """A loopback `http.server` serving `folder`; `redirects` (path -> Location), `statuses` (path -> an error
    status) and `nested` (every folder lists one more below it) change its answers; `requests` records them."""

    folder: Path
    url: str = ""
    redirects: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    nested: bool = False
    requests: list[str] = field(default_factory=list)


@contextmanager
def serving(folder: Path) -> Iterator[Site]:
    site = Site(folder)

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            site.requests.append(f"{self.command} {self.path}")
            if self.path in site.redirects:
                self.send_response(302)
                self.send_header("Location", site.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path in site.statuses:
                self.send_error(site.statuses[self.path])
            elif site.nested and self.path.endswith("/"):
                page = b'<html><body><a href="d/">d/</a></body></html>'
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
            else:
                super().do_GET()

        do_HEAD = do_GET

        def do_POST(self) -> None:
            site.requests.append(f"{self.command} {self.path}")
            self.send_error(405)

        do_PUT = do_POST

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    site.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """The shipped default pack, served as `<site.url>/pack`."""
    shutil.copytree(PACK, tmp_path / "www" / "pack")
    with serving(tmp_path / "www") as served:
        yield served


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every DNS lookup and connection attempted, refused and recorded."""
    attempts: list[str] = []

    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(f"getaddrinfo {host}")
        raise OSError("no network in this test")

    def connect(self: socket.socket, address: Any) -> Any:
        attempts.append(f"connect {address}")
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    return attempts


def one_line(exc: pytest.ExceptionInfo[RemoteReadError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.strip() == text, text
    return text


def files_under(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_pack_served_on_loopback_reads_as_the_same_files(site: Site) -> None:
    fs, root = pack_filesystem(f"{site.url}/pack")
    assert fs.isdir(root) and not fs.isfile(root) and "file" not in fs.protocol
    found = fs.find(root, detail=True, withdirs=False)
    read = {}
    for path in found:
        with fs.open(path, "rb") as handle:
            read[path[len(root) + 1 :]] = handle.read(64 * 2**20)
    assert read == files_under(PACK)
    assert fs.isfile(f"{root}/pack.json") and not fs.isdir(f"{root}/pack.json")
    assert not fs.isdir(f"{root}/no-such-folder") and not fs.exists(f"{root}/no-such-file.csv")
    with pytest.raises(FileNotFoundError):
        fs.open(f"{root}/no-such-file.csv", "rb").read()
    assert all(request.startswith("GET ") for request in site.requests)


@pytest.mark.parametrize("elsewhere", ["another host", "another port", "another scheme"])
@pytest.mark.parametrize("redirected", ["the folder", "a file"])
def test_a_redirect_to_another_origin_is_refused_and_never_reached(site: Site, elsewhere: str, redirected: str) -> None:
    with trap("127.0.0.2" if elsewhere == "another host" else "127.0.0.1") as target:
        host, port = target.address
        location = f"https://{host}:{port}" if elsewhere == "another scheme" else target.url
        path = "/pack/" if redirected == "the folder" else "/pack/pack.json"
        site.redirects[path] = f"{location}{path}"
        fs, root = pack_filesystem(f"{site.url}/pack")
        with pytest.raises(RemoteReadError) as refused:
            if redirected == "the folder":
                fs.find(root, detail=True, withdirs=False)
            else:
                with fs.open(f"{root}/pack.json", "rb") as handle:
                    handle.read()
        line = one_line(refused)
        assert "another origin" in line and f"{port}" in line and "redirect 1" in line
    assert target.connections == [] and target.requests == []


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.0.0.1/pack/", "not loopback"),
        ("http://[::ffff:a9fe:a9fe]/latest", "link-local"),
        ("ftp://127.0.0.1/pack/", "not http or https"),
    ],
)
def test_a_redirect_to_a_refused_address_is_refused_before_connecting(
    site: Site, location: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    site.redirects["/pack/"] = location
    fs, root = pack_filesystem(f"{site.url}/pack")
    connected: list[Any] = []
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        connected.append(address)
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    with pytest.raises(RemoteReadError) as refused:
        fs.isdir(root)
    assert why in one_line(refused) and "redirect 1" in one_line(refused)
    assert all(address[0] == "127.0.0.1" for address in connected), connected


def test_a_redirect_within_the_folders_origin_is_followed_up_to_a_cap(site: Site) -> None:
    site.redirects["/moved/"] = "/pack/"
    fs, root = pack_filesystem(f"{site.url}/moved")
    assert fs.isdir(root)
    assert f"{root}/pack.json" in fs.ls(root, detail=False)

    site.redirects["/loop/"] = f"{site.url}/loop/"
    fs, root = pack_filesystem(f"{site.url}/loop")
    with pytest.raises(RemoteReadError) as refused:
        fs.isdir(root)
    assert f"more than {remote_folders.MAX_REDIRECTS} redirects" in one_line(refused)
    assert site.requests.count("GET /loop/") == remote_folders.MAX_REDIRECTS + 1


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("http://169.254.169.254/latest", "link-local"),
        ("http://10.0.0.1/x", "not loopback"),
        ("http://hub.example.org/base", "plain http:// is read from this machine only"),
        ("http://localhost.example.org/base", "plain http:// is read from this machine only"),
        ("https://169.254.169.254/latest", "link-local"),
        ("https://10.0.0.1/x", "private"),
        ("https://[fd00::1]/x", "private"),
        ("https://[::ffff:169.254.169.254]/x", "link-local"),
        ("https://2852039166/x", "link-local"),  # 169.254.169.254 in one decimal number
        ("https://0.0.0.0/x", "unspecified"),
        ("https://hub.example.org/base?token=s3cr3t", "no query"),
        ("http://user:s3cr3t@127.0.0.1:8080/pack", "credentials"),
    ],
)
def test_a_refused_url_makes_no_lookup_and_no_connection(location: str, why: str, no_network: list[str]) -> None:
    with pytest.raises(RemoteReadError) as refused:
        fs, root = pack_filesystem(location)
        fs.isdir(root)
    line = one_line(refused)
    assert why in line and "s3cr3t" not in line
    assert no_network == []


def test_a_name_that_resolves_to_a_refused_address_is_refused_at_connect_time(
    monkeypatch: pytest.MonkeyPatch, no_network: list[str]
) -> None:
    class Rebinding:
        """A resolver that answers the metadata address and a private one (a rebinding attack)."""

        async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[dict[str, Any]]:
            return [
                {"hostname": host, "host": ip, "port": port, "family": family, "proto": 0, "flags": 0}
                for ip in ("169.254.169.254", "10.1.2.3")
            ]

        async def close(self) -> None:
            pass

    monkeypatch.setattr(ssrf, "DefaultResolver", Rebinding)
    fs, root = pack_filesystem("https://mirror.example.org/pack")
    with pytest.raises(RemoteReadError) as refused:
        fs.isdir(root)
    line = one_line(refused)
    assert "mirror.example.org resolves only to refused addresses" in line and "link-local" in line
    assert no_network == []


def test_chained_and_unknown_protocols_are_one_line_and_fetch_nothing(site: Site) -> None:
    refused = {
        f"zip://pack.json::{site.url}/pack.zip": "chained",
        f"simplecache::{site.url}/pack": "chained",
        "reference://x": "'reference' is not a storage protocol",
        "ftp://127.0.0.1/pack": "'ftp' is not a storage protocol",
        "data:text/plain,hello": "'data' is not a storage protocol",
    }
    for location, why in refused.items():
        with pytest.raises(RemoteReadError) as error:
            pack_filesystem(location)
        assert why in one_line(error), location
    assert site.requests == []


@pytest.mark.parametrize(("location", "package"), [("gs://bucket/pack", "gcsfs"), ("az://container/pack", "adlfs")])
def test_an_object_store_without_its_package_is_one_line_naming_it(location: str, package: str) -> None:
    pytest.importorskip("fsspec")
    try:
        __import__(package)
    except ImportError:
        pass
    else:
        pytest.skip(f"{package} is installed here")
    with pytest.raises(RemoteReadError) as error:
        pack_filesystem(location)
    assert package in one_line(error) and "not installed" in one_line(error)


def test_failing_to_read_is_one_line_and_not_the_same_as_missing(site: Site) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    fs, root = pack_filesystem(f"http://127.0.0.1:{closed}/pack")
    with pytest.raises(RemoteReadError) as unreachable:
        fs.isdir(root)
    assert f"http://127.0.0.1:{closed}/pack: cannot read (cannot connect" in one_line(unreachable)

    site.statuses["/pack/"] = 500
    fs, root = pack_filesystem(f"{site.url}/pack")
    with pytest.raises(RemoteReadError) as failed:
        fs.find(root)
    assert one_line(failed).startswith(f"{site.url}/pack: cannot read (HTTP 500")
    site.statuses["/pack/concepts.csv"] = 403
    with pytest.raises(RemoteReadError, match="HTTP 403"):
        fs.open(f"{root}/concepts.csv", "rb").read()


def test_listing_and_reading_stay_within_their_caps(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote_folders, "MAX_LISTINGS", 5)
    site.nested = True  # every folder lists a folder below it, forever
    fs, root = pack_filesystem(f"{site.url}/deep")
    with pytest.raises(RemoteReadError, match="more than 5 folders listed"):
        fs.find(root)
    assert len(site.requests) <= 6

    site.nested = False
    monkeypatch.setattr(remote_folders, "MAX_RESPONSE_BYTES", 1000)
    fs, root = pack_filesystem(f"{site.url}/pack")
    with fs.open(f"{root}/concepts.csv", "rb") as handle:
        assert handle.read(600) == (PACK / "concepts.csv").read_bytes()[:600]
    with pytest.raises(RemoteReadError, match="more than 1,000 bytes"), fs.open(f"{root}/concepts.csv", "rb") as handle:
        handle.read()


def test_an_http_folder_is_never_written(site: Site) -> None:
    fs, root = pack_filesystem(f"{site.url}/pack")
    with pytest.raises(RemoteReadError, match="never written"):
        fs.pipe_file(f"{root}/pack.json", b"{}")
    with pytest.raises(RemoteReadError, match="never written"):
        fs.open(f"{root}/new.csv", "wb")
    assert not any(request.startswith(("POST", "PUT")) for request in site.requests)


def test_local_and_memory_folders_are_read_as_before(tmp_path: Path) -> None:
    fs, root = pack_filesystem(PACK)
    assert "file" in fs.protocol and fs.isdir(root)
    fs, root = pack_filesystem(f"file://{PACK}")
    assert fs.isdir(root)
    memory, _ = pack_filesystem("memory://pack")
    assert isinstance(memory, MemoryFileSystem)


def test_an_object_stores_own_errors_are_one_line_and_a_missing_file_stays_missing() -> None:
    class NoCredentials(Exception):
        pass

    class Store(MemoryFileSystem):  # stands for s3fs without credentials
        cachable = False

        def isdir(self, path: str) -> bool:
            raise NoCredentials("Unable to locate credentials")

    store = Store()
    store.pipe_file("/bucket/pack/pack.json", b"{}")
    fs = ReadErrorsFileSystem(store, "memory://bucket/pack")
    with pytest.raises(RemoteReadError) as error:
        fs.isdir("/bucket/pack")
    assert "cannot read (NoCredentials: Unable to locate credentials)" in one_line(error)
    with fs.open("/bucket/pack/pack.json", "rb") as handle:
        assert handle.read() == b"{}"
    with pytest.raises(FileNotFoundError):
        fs.open("/bucket/pack/missing.csv", "rb")


@pytest.mark.parametrize(
    ("policy", "allowed", "refused"),
    [
        (
            AddressPolicy(only_loopback=True),
            ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"],
            ["10.0.0.1", "8.8.8.8", "169.254.169.254", "2002:7f00:1::", "64:ff9b::7f00:1", "0.0.0.0"],
        ),
        (
            AddressPolicy(allow_loopback=True),
            ["127.0.0.1", "::1", "8.8.8.8", "2606:4700::1111"],
            ["10.0.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254", "fd00::1", "fe80::1", "::ffff:10.0.0.1"],
        ),
    ],
)
def test_the_loopback_policies(policy: AddressPolicy, allowed: list[str], refused: list[str]) -> None:
    def ip(text: str) -> Any:
        parsed = parse_ip_host(text)
        assert parsed is not None
        return parsed[0]

    assert [a for a in allowed if policy.refusal(ip(a)) is not None] == []
    assert [r for r in refused if policy.refusal(ip(r)) is None] == []


def test_a_loopback_host_is_decided_without_dns(no_network: list[str]) -> None:
    assert all(map(is_loopback_host, ["localhost", "LOCALHOST.", "127.0.0.1", "127.1.2.3", "::1", "[::1]"]))
    assert not is_loopback_host("[::ffff:127.0.0.1]")  # a mapped form: not trusted, as for --endpoint
    assert not any(map(is_loopback_host, ["localhost.example.org", "10.0.0.1", "127.1", "2130706433", "example.org"]))
    assert no_network == []
