"""The HTTP downloader against a fault-injecting image host on 127.0.0.1 (tests/support/fake_image_host.py)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from collectors.downloader import (
    DownloadJournal,
    _Failure,
    _Inflater,
    download_hits,
    download_hits_async,
)
from collectors.image_check import ImageLimits
from collectors.ssrf import AddressPolicy, BlockedAddressError, GuardedResolver, UrlRefused, check_url
from data.schemas import IMAGES
from data.workspace import BlobStore, Storage, sha256_bytes
from tests.support.download_helpers import by_id, tag
from tests.support.download_helpers import download_config as config
from tests.support.fake_image_host import FakeImageHost, compress, compression_bomb, make_corpus
from tests.support.paths import REPO_ROOT

CORPUS = make_corpus(4, seed=7, min_kib=8, max_kib=24)
RETRY_AFTER_S = 1


@pytest.fixture
def host() -> Iterator[FakeImageHost]:
    with FakeImageHost(corpus=CORPUS, retry_after_s=RETRY_AFTER_S, slow_s=3.0) as server:
        yield server


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage(str(tmp_path / "ws"))


@pytest.fixture
def blobs(storage: Storage) -> BlobStore:
    return BlobStore(storage, "blobs")


# -- every failure class ----------------------------------------------------------------------------------------


FAULTS = {
    # path (tag appended)            expected error       transient
    "/status/404/": ("http_404", False),
    "/status/500/": ("http_500", True),
    "/status/403/": ("http_403", False),
    "/html/": ("not_an_image", False),
    "/truncated/1/": ("truncated", False),
    "/cut/2/": ("truncated", False),
    "/slow/0/": ("timeout", True),
    "/tiny/": ("too_small", False),
    "/bomb/": ("decompression_bomb", False),
    "/big/1024/declared-": ("too_large", False),
    "/redirect/9/0/": ("too_many_redirects", False),
}


def test_every_failure_class_is_classified(host: FakeImageHost, blobs: BlobStore) -> None:
    hits = [{"image_id": path, "url": host.url(path + tag())} for path in FAULTS]
    hits.append({"image_id": "undeclared-big", "url": host.url(f"/big/1024/{tag()}?declared=0")})
    hits.append({"image_id": "dns", "url": "http://no-such-host.invalid/a.jpg"})
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there any more
    hits.append({"image_id": "connect", "url": f"http://127.0.0.1:{closed_port}/a.jpg"})

    rows = by_id(download_hits(hits, blobs, config()))

    for path, (error, transient) in FAULTS.items():
        assert rows[path]["status"] == "failed", path
        assert rows[path]["error"] == error, (path, rows[path]["detail"])
        assert rows[path]["transient"] is transient, path
        assert rows[path]["detail"], path
        assert rows[path]["sha256"] is None, path
    assert rows["undeclared-big"]["error"] == "too_large"
    assert "while streaming" in rows["undeclared-big"]["detail"]
    assert "Content-Length" in rows["/big/1024/declared-"]["detail"]
    assert rows["dns"]["error"] == "dns"
    assert rows["connect"]["error"] == "connect"
    # Transient failures were retried up to the policy's limit, the others tried once.
    assert rows["/status/500/"]["attempts"] == 3
    assert rows["/slow/0/"]["attempts"] == 3
    assert rows["/status/404/"]["attempts"] == 1
    assert rows["/html/"]["http_status"] == 200
    assert rows["/html/"]["content_type"] == "image/jpeg"  # declared, and not believed


def test_ok_rows_store_the_bytes_and_record_the_response(host: FakeImageHost, blobs: BlobStore) -> None:
    hits = [{"image_id": f"i{n}", "url": host.url(f"/img/{n}/{tag()}")} for n in range(len(CORPUS))]
    table = download_hits(hits, blobs, config())

    assert table.schema == IMAGES
    assert [r["image_id"] for r in table.to_pylist()] == [h["image_id"] for h in hits]
    for n, row in enumerate(table.to_pylist()):
        assert row["status"] == "ok" and row["error"] is None
        assert row["sha256"] == sha256_bytes(CORPUS[n])
        assert blobs.get(row["sha256"]) == CORPUS[n]
        assert row["num_bytes"] == len(CORPUS[n])
        assert row["format"] == "JPEG" and row["width"] > 0 and row["height"] > 0
        assert row["final_url"] == hits[n]["url"]
        assert row["http_status"] == 200 and row["content_type"] == "image/jpeg"
        assert row["attempts"] == 1 and row["transient"] is False


def test_identical_urls_are_fetched_once(host: FakeImageHost, blobs: BlobStore) -> None:
    path = f"/img/1/{tag()}"
    hits = [{"image_id": "a", "url": host.url(path)}, {"image_id": "b", "url": host.url(path)}]
    table = download_hits(hits, blobs, config())
    assert [r["image_id"] for r in table.to_pylist()] == ["a", "b"]
    assert {r["status"] for r in table.to_pylist()} == {"ok"}
    assert host.counts[path] == 1


# -- compressed bodies ------------------------------------------------------------------------------------------

BOMB_MIB = 64  # inflates to 256 times the tests' max_bytes (256 KiB); about 64 KiB on the wire, under it


@pytest.mark.parametrize(("encoding", "honour"), [("gzip", False), ("deflate", False), ("gzip", True)])
def test_a_compression_bomb_is_refused_at_once_and_never_retried(
    encoding: str, honour: bool, host: FakeImageHost, blobs: BlobStore
) -> None:
    path = f"/gzip-bomb/{BOMB_MIB}/{tag()}"
    url = host.url(f"{path}?encoding={encoding}&honour={int(honour)}")
    compression_bomb(BOMB_MIB, encoding)  # built once, before the clock starts: the host's speed is not timed
    started = time.monotonic()
    row = download_hits([{"image_id": "x", "url": url}], blobs, config()).to_pylist()[0]
    elapsed = time.monotonic() - started

    # We ask for the body as it is stored: a server that honours that sends no compressed body at all.
    assert host.request_headers[path][0]["Accept-Encoding"] == "identity"
    assert row["status"] == "failed" and row["sha256"] is None
    if honour:
        assert row["error"] == "too_large" and "Content-Length" in row["detail"], row["detail"]
    else:
        # The server compressed anyway: inflated by us, and stopped at the cap from a few KiB of input.
        assert row["error"] == "decompression_bomb", row["detail"]
        assert encoding in row["detail"] and "max_bytes" in row["detail"]
        assert row["num_bytes"] is None
    assert row["transient"] is False and row["attempts"] == 1
    assert host.counts[path] == 1  # not retried
    assert elapsed < 5  # not a timeout (read_timeout 0.4 s, three attempts)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
def test_a_compressed_image_from_a_server_that_ignores_identity_is_inflated(
    encoding: str, host: FakeImageHost, blobs: BlobStore
) -> None:
    path = f"/encoded/1/{tag()}"
    row = download_hits([{"image_id": "x", "url": host.url(f"{path}?encoding={encoding}")}], blobs, config())
    row = row.to_pylist()[0]
    assert row["status"] == "ok", row["detail"]
    assert row["sha256"] == sha256_bytes(CORPUS[1]) and blobs.get(row["sha256"]) == CORPUS[1]
    assert row["num_bytes"] == len(CORPUS[1])


def test_unusable_encodings_are_classified(host: FakeImageHost, blobs: BlobStore) -> None:
    t = tag()
    hits = [
        {"image_id": "br", "url": host.url(f"/encoded/0/{t}?encoding=br")},
        {"image_id": "stacked", "url": host.url(f"/encoded/0/{t}-2?encoding=gzip,%20gzip")},
        {"image_id": "cut", "url": host.url(f"/encoded/0/{t}?encoding=gzip-cut")},
        {"image_id": "identity", "url": host.url(f"/encoded/0/{t}?encoding=identity")},
    ]
    rows = by_id(download_hits(hits, blobs, config()))
    assert rows["br"]["error"] == "unsupported_encoding" and "br" in rows["br"]["detail"]
    assert rows["stacked"]["error"] == "unsupported_encoding"
    assert rows["cut"]["error"] == "truncated" and "gzip" in rows["cut"]["detail"]
    assert rows["identity"]["status"] == "ok"
    for key in ("br", "stacked", "cut"):
        assert rows[key]["transient"] is False and rows[key]["attempts"] == 1, key


@pytest.mark.parametrize("piece", [1, 7, 1 << 16])
def test_inflater_reads_every_gzip_member_whatever_the_pieces(piece: int) -> None:
    first, second = CORPUS[0], CORPUS[1]
    body = compress(first, "gzip") + compress(second, "gzip")
    inflater = _Inflater("gzip", limit=len(first) + len(second))
    for start in range(0, len(body), piece):
        inflater.feed(body[start : start + piece])
    assert inflater.finish() == first + second


def test_inflater_tells_a_bomb_from_a_large_body() -> None:
    noise = np.random.default_rng(0).bytes(300_000)  # incompressible: over the cap at about 1:1
    with pytest.raises(_Failure) as large:
        _Inflater("gzip", limit=200_000).feed(compress(noise, "gzip"))
    assert large.value.error == "too_large"
    with pytest.raises(_Failure) as bomb:
        _Inflater("deflate", limit=200_000).feed(compress(bytes(10_000_000), "deflate"))
    assert bomb.value.error == "decompression_bomb"


# -- retries ----------------------------------------------------------------------------------------------------


def test_429_waits_for_retry_after_then_succeeds(host: FakeImageHost, blobs: BlobStore) -> None:
    path = f"/429/0/{tag()}"
    row = download_hits([{"image_id": "x", "url": host.url(path)}], blobs, config()).to_pylist()[0]
    assert row["status"] == "ok" and row["attempts"] == 2
    first, second = host.times[path]
    assert second - first >= RETRY_AFTER_S  # the backoff alone (<= 0.05 s) would have come back far sooner


def test_5xx_then_success(host: FakeImageHost, blobs: BlobStore) -> None:
    path = f"/flaky/2/1/{tag()}"
    row = download_hits([{"image_id": "x", "url": host.url(path)}], blobs, config()).to_pylist()[0]
    assert row["status"] == "ok" and row["attempts"] == 3
    assert host.counts[path] == 3


def test_a_retry_sleeps_without_holding_a_slot(host: FakeImageHost, blobs: BlobStore) -> None:
    # One slot in all: while the 429 waits out its Retry-After, the other URL must get the slot.
    limited, other = f"/429/0/{tag()}", f"/img/0/{tag()}"
    hits = [{"image_id": "a", "url": host.url(limited)}, {"image_id": "b", "url": host.url(other)}]
    download_hits(hits, blobs, config(concurrency=1, per_host_concurrency=1))
    first, second = host.times[limited]
    assert first < host.times[other][0] < second


@pytest.mark.parametrize(("concurrency", "per_host", "bound"), [(8, 2, 2), (3, 8, 3)])
def test_concurrency_limits(concurrency: int, per_host: int, bound: int, blobs: BlobStore) -> None:
    with FakeImageHost(corpus=CORPUS, latency_s=0.05) as server:
        hits = [{"image_id": str(i), "url": server.url(f"/img/{i}/{tag()}")} for i in range(12)]
        table = download_hits(hits, blobs, config(concurrency=concurrency, per_host_concurrency=per_host))
        assert {r["status"] for r in table.to_pylist()} == {"ok"}
        assert 1 <= server.max_in_flight <= bound


# -- redirects and the SSRF guard --------------------------------------------------------------------------------


def test_redirects(host: FakeImageHost, blobs: BlobStore) -> None:
    ok, too_many = f"/redirect/3/2/{tag()}", f"/redirect/6/2/{tag()}"
    hits = [
        {"image_id": "ok", "url": host.url(ok)},
        {"image_id": "too_many", "url": host.url(too_many)},
        # Link-local (cloud metadata) and unspecified stay refused even with private addresses allowed.
        {"image_id": "metadata", "url": host.url("/redirect-to?url=http://169.254.169.254/latest/meta-data/")},
        {"image_id": "zero", "url": host.url(f"/redirect-to?url=http://0.0.0.0:{host.port}/img/0/x")},
        {"image_id": "file", "url": host.url("/redirect-to?url=file:///etc/passwd")},
    ]
    rows = by_id(download_hits(hits, blobs, config(max_redirects=5)))
    assert rows["ok"]["status"] == "ok"
    assert rows["ok"]["final_url"].endswith(ok.replace("/redirect/3/", "/img/"))
    assert rows["too_many"]["error"] == "too_many_redirects"
    assert rows["metadata"]["error"] == "blocked_address"
    assert "redirect" in rows["metadata"]["detail"]
    assert rows["zero"]["error"] == "blocked_address"
    assert rows["file"]["error"] == "invalid_url"
    assert host.counts[f"/img/2/{too_many.rsplit('/', 1)[1]}"] == 0


def test_loopback_is_refused_by_default(host: FakeImageHost, blobs: BlobStore) -> None:
    literal, named = f"/img/0/{tag()}", f"/img/1/{tag()}"
    hits = [
        {"image_id": "literal", "url": host.url(literal)},
        # A host name goes through the resolver, which drops the loopback answer.
        {"image_id": "named", "url": f"http://localhost:{host.port}{named}"},
    ]
    rows = by_id(download_hits(hits, blobs, config(allow_private_addresses=False)))
    assert rows["literal"]["error"] == "blocked_address"
    assert rows["named"]["error"] == "blocked_address"
    assert "loopback" in rows["named"]["detail"]
    assert host.counts[literal] == 0 and host.counts[named] == 0


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/a.jpg",
        "javascript:alert(1)",
        "data:image/png;base64,AAAA",
        "http:///a.jpg",
        "//example.com/a.jpg",
        "example.com/a.jpg",
        "http://user:secret@example.com/a.jpg",
        "http://example.com@8.8.8.8/a.jpg",
        "http://example.com:99999/a.jpg",
        "http://exa\nmple.com/a.jpg",
    ],
)
def test_invalid_urls(url: str, blobs: BlobStore) -> None:
    row = download_hits([{"image_id": "x", "url": url}], blobs, config(allow_private_addresses=False)).to_pylist()[0]
    assert row["status"] == "failed"
    assert row["error"] == "invalid_url", row["detail"]
    assert row["attempts"] == 0


BLOCKED_HOSTS = [
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",  # shared address space (carrier-grade NAT)
    "169.254.169.254",
    "0.0.0.0",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "[::1]",
    "[::]",
    "[fe80::1]",
    "[fc00::1]",
    "[ff02::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:169.254.169.254]",
    "[2002:7f00:1::]",  # 6to4 wrapping 127.0.0.1
    "[64:ff9b::a00:1]",  # NAT64 wrapping 10.0.0.1
    "2130706433",  # decimal 127.0.0.1
    "0x7f000001",
    "0177.0.0.1",
    "127.1",
    "0",
]


@pytest.mark.parametrize("host", BLOCKED_HOSTS)
def test_guard_refuses_internal_addresses(host: str) -> None:
    with pytest.raises(UrlRefused) as refused:
        check_url(f"http://{host}/a.jpg", AddressPolicy(allow_private=False))
    assert refused.value.error == "blocked_address"


@pytest.mark.parametrize("host", ["93.184.216.34", "[2606:4700:4700::1111]", "example.com", "xn--e1afmkfd.xn--p1ai"])
def test_guard_admits_public_hosts(host: str) -> None:
    assert check_url(f"https://{host}/a.jpg", AddressPolicy()).raw_host


def test_allow_private_admits_loopback_but_not_metadata() -> None:
    policy = AddressPolicy(allow_private=True)
    assert policy.refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert policy.refusal(ipaddress.ip_address("10.0.0.1")) is None
    assert policy.refusal(ipaddress.ip_address("169.254.169.254")) is not None
    assert policy.refusal(ipaddress.ip_address("0.0.0.0")) is not None
    # Non-canonical numeric forms are never fetched, even of an admitted address.
    with pytest.raises(UrlRefused) as refused:
        check_url("http://2130706433/", policy)
    assert refused.value.error == "invalid_url"


class _FixedResolver(AbstractResolver):
    """Answers every lookup with fixed addresses, like a DNS-rebinding attacker's name server would."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            {"hostname": host, "host": a, "port": port, "family": family, "proto": 0, "flags": 0}
            for a in self.addresses
        ]

    async def close(self) -> None:
        return None


def test_resolver_drops_refused_addresses() -> None:
    async def resolve(addresses: list[str]) -> list[str]:
        resolver = GuardedResolver(AddressPolicy(), inner=_FixedResolver(addresses))
        return [r["host"] for r in await resolver.resolve("rebind.example", 80)]

    assert asyncio.run(resolve(["10.0.0.5", "93.184.216.34", "::ffff:127.0.0.1"])) == ["93.184.216.34"]
    with pytest.raises(BlockedAddressError) as blocked:
        asyncio.run(resolve(["127.0.0.1", "169.254.169.254"]))
    assert "loopback" in str(blocked.value) and "link-local" in str(blocked.value)


# -- journal, resume and retry_failed ----------------------------------------------------------------------------


def mixed_hits(host: FakeImageHost) -> list[dict]:
    t = tag()
    paths = [f"/img/0/{t}", f"/img/1/{t}", f"/status/404/{t}", f"/status/503/{t}", f"/slow/0/{t}", f"/tiny/{t}"]
    return [{"image_id": p, "url": host.url(p)} for p in paths]


def test_rerun_fetches_nothing_again(host: FakeImageHost, blobs: BlobStore, storage: Storage) -> None:
    hits = mixed_hits(host)
    # One journal instance over two calls, as shards use it: the second call skips what the first fetched.
    journal = DownloadJournal(storage, "journal")
    download_hits(hits[:3], blobs, config(), journal=journal)
    first = download_hits(hits, blobs, config(), journal=journal)
    assert all(n == 1 for path, n in host.counts.items() if "/slow/" not in path and "/status/503/" not in path)
    counts = dict(host.counts)
    # A new process (a fresh instance) reads the journal files back.
    second = download_hits(hits, blobs, config(), journal=DownloadJournal(storage, "journal"))
    assert dict(host.counts) == counts
    assert second.to_pylist() == first.to_pylist()


def test_retry_failed_refetches_only_transient_failures(
    host: FakeImageHost, blobs: BlobStore, storage: Storage
) -> None:
    hits = mixed_hits(host)
    first = by_id(download_hits(hits, blobs, config(), journal=DownloadJournal(storage, "journal")))
    transient = {i for i, r in first.items() if r["transient"]}
    assert transient == {h["image_id"] for h in hits if "/status/503/" in h["url"] or "/slow/" in h["url"]}
    before = dict(host.counts)
    download_hits(hits, blobs, config(retry_failed=True), journal=DownloadJournal(storage, "journal"))
    refetched = {path for path, n in host.counts.items() if n > before.get(path, 0)}
    assert refetched == transient


def test_changed_limits_recheck_stored_blobs_without_refetching(
    host: FakeImageHost, blobs: BlobStore, storage: Storage
) -> None:
    t = tag()
    ok, tiny = f"/img/0/{t}", f"/tiny/{t}"
    hits = [{"image_id": "ok", "url": host.url(ok)}, {"image_id": "tiny", "url": host.url(tiny)}]
    download_hits(hits, blobs, config(), journal=DownloadJournal(storage, "journal"))
    stricter = config(limits=ImageLimits(min_side=4000, min_bytes=0, max_bytes=256 * 1024))
    rows = by_id(download_hits(hits, blobs, stricter, journal=DownloadJournal(storage, "journal")))
    assert rows["ok"]["error"] == "too_small"  # decided again from the stored blob
    assert host.counts[ok] == 1
    assert host.counts[tiny] == 2  # a limit-dependent failure kept no bytes: fetched again


def test_check_verdicts_follow_the_limits(host: FakeImageHost, blobs: BlobStore) -> None:
    # The same bytes under other limits must be decided again, not taken from the verdict cache.
    path = f"/img/0/{tag()}"
    hit = [{"image_id": "a", "url": host.url(path)}]
    assert download_hits(hit, blobs, config())["status"][0].as_py() == "ok"
    strict = config(limits=ImageLimits(min_side=4000, max_bytes=256 * 1024))
    assert download_hits(hit, blobs, strict)["error"][0].as_py() == "too_small"


CHILD = """
import json, sys
from collectors.downloader import DownloadJournal, HttpDownloadConfig, download_hits
from data.workspace import BlobStore, Storage
spec = json.loads(sys.argv[1])
storage = Storage(spec["storage"])
journal = DownloadJournal(storage, "journal", flush_every=spec["flush_every"], flush_interval_s=3600)
config = HttpDownloadConfig(allow_private_addresses=True, concurrency=spec["concurrency"])
download_hits(spec["hits"], BlobStore(storage, "blobs"), config, journal=journal)
"""


def test_kill_9_loses_at_most_the_unflushed_batch(storage: Storage, blobs: BlobStore) -> None:
    flush_every, concurrency = 4, 2
    with FakeImageHost(corpus=CORPUS, latency_s=0.1) as server:
        t = tag()
        hits = [{"image_id": str(i), "url": server.url(f"/img/{i}/{t}-{i}")} for i in range(80)]
        spec = {"storage": storage.url, "hits": hits, "flush_every": flush_every, "concurrency": concurrency}
        child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec)], cwd=REPO_ROOT)
        folder = storage.path("journal")
        deadline = time.monotonic() + 60

        # Batches only: the temporary file of a write still in progress (fsynced before its rename) is not one.
        def batches() -> int:
            return sum(1 for name in storage.listdir(folder) if name.endswith(".jsonl") and not name.startswith("."))

        while batches() < 2 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait()
        served = {path for path, n in server.counts.items() if n}
        journaled = DownloadJournal(storage, "journal").load()
        assert 2 * flush_every <= len(journaled) < len(hits)  # killed mid-run, after two batches
        # Lost: finished but unflushed (< flush_every) plus what was in flight (<= concurrency).
        assert len(served) - len(journaled) <= flush_every - 1 + concurrency
        before = dict(server.counts)
        table = download_hits(hits, blobs, config(), journal=DownloadJournal(storage, "journal"))
        assert {r["status"] for r in table.to_pylist()} == {"ok"}
        for url in journaled:
            path = url.split(str(server.port), 1)[1]
            assert server.counts[path] == before[path] == 1  # journaled: not fetched again


def test_journal_loses_at_most_the_unflushed_batch(storage: Storage) -> None:
    writer = DownloadJournal(storage, "journal", flush_every=10)
    for i in range(25):
        writer.record(f"http://example.com/{i}", {"status": "ok"}, "k")
    # No final flush: the process "died" here.
    assert sorted(DownloadJournal(storage, "journal").load()) == sorted(f"http://example.com/{i}" for i in range(20))


def test_two_writers_never_clash_and_the_newest_entry_wins(storage: Storage) -> None:
    a, b = DownloadJournal(storage, "journal"), DownloadJournal(storage, "journal")
    a.record("u", {"status": "failed"}, "k")
    a.flush()
    b.record("u", {"status": "ok"}, "k")
    b.flush()
    a.record("v", {"status": "ok"}, "k")
    a.flush()
    assert len(storage.listdir(storage.path("journal"))) == 3
    entries = DownloadJournal(storage, "journal").load()
    assert entries["u"]["row"]["status"] == "ok" and set(entries) == {"u", "v"}


# -- progress and calling contexts -------------------------------------------------------------------------------


def test_progress_reaches_the_total(host: FakeImageHost, blobs: BlobStore) -> None:
    path = f"/img/0/{tag()}"
    hits = [{"image_id": "a", "url": host.url(path)}, {"image_id": "b", "url": host.url(path)}]
    hits.append({"image_id": "c", "url": host.url(f"/status/404/{tag()}")})
    seen: list[tuple[int, int]] = []
    download_hits(hits, blobs, config(), on_item=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (3, 3)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_sync_entry_works_inside_a_running_loop_and_in_a_worker_thread(host: FakeImageHost, blobs: BlobStore) -> None:
    hit = [{"image_id": "a", "url": host.url(f"/img/0/{tag()}")}]

    async def inside_loop() -> tuple[str, str, str]:
        direct = download_hits(hit, blobs, config())  # this thread runs a loop: a helper thread is used
        threaded = await asyncio.get_running_loop().run_in_executor(None, download_hits, hit, blobs, config())
        native = await download_hits_async(hit, blobs, config())
        return direct["status"][0].as_py(), threaded["status"][0].as_py(), native["status"][0].as_py()

    assert asyncio.run(inside_loop()) == ("ok", "ok", "ok")
    results: list[str] = []
    worker = threading.Thread(target=lambda: results.append(download_hits(hit, blobs, config())["status"][0].as_py()))
    worker.start()
    worker.join()
    assert results == ["ok"]
