"""Hostile inputs, third round (issue 38), on the network side: a robots.txt or tdmrep.json whose matching is
O(path x piece) (item 3), and `publish` sending the token in clear or uploading files a release does not hold
(item 7).

robots.txt: a site chooses its rules and, through its redirects, the paths we ask it about. Deciding a URL is linear
(long pieces are not searched with `str.find`), bounded (`MAX_MATCH_WORK` characters, `MAX_TARGET_CHARS` of path
against rules with a `*`; past either the URL is refused, fail closed) and, when costly, off the event loop.

publish: the token goes over https, or plain http to a loopback host only; only the kinds of file a release writer
produces are uploaded (never `.gitattributes`). Both are refused in one line before any call to the Hub.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from yarl import URL

import collectors.optout as optout
from collectors.downloader import download_hits
from collectors.optout import (
    MAX_FILE_BYTES,
    HostFile,
    HostFileCache,
    OptOutChecker,
    OptOutPolicy,
    PathPattern,
    compile_pattern,
    parse_robots,
    parse_tdmrep,
    robots_refusal,
    tdmrep_refusal,
)
from data.workspace import BlobStore, Storage
from flows.cli import app
from tests.support.download_helpers import by_id, download_config, tag
from tests.support.fake_hub import FakeHub, serving
from tests.support.fake_image_host import FakeImageHost, make_corpus
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT

AGENT = "culturebench"
#: The issue's piece: 99 characters, ending like its own start, so that `str.find` compares most of it at every
#: position of a path of `a`s.
PIECE = "a" * 96 + "baa"
#: The issue's path: 8,150 characters (an aiohttp request line holds 8,190).
LONG_PATH = "/" + "a" * 8149


def allow_file(extra: str = "") -> str:
    """The issue's robots.txt: `Allow: /*<PIECE>` as many times as 512 KiB hold, then `extra`."""
    line = f"Allow: /*{PIECE}\n"
    return "User-agent: *\n" + line * ((MAX_FILE_BYTES - 40 - len(extra)) // len(line)) + extra


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a pattern was matched against a path: the work a decision did, counted."""
    calls = [0]
    real = PathPattern.match

    def match(self: PathPattern, target: str) -> bool:
        calls[0] += 1
        return real(self, target)

    monkeypatch.setattr(PathPattern, "match", match)
    return calls


# -- item 3: robots.txt, the worse case ----------------------------------------------------------------------------


def test_a_file_of_allow_rules_is_decided_without_matching(counted: list[int]) -> None:
    # The repro: 4,809 Allow rules, no Disallow. Whatever matches, nothing refuses: no rule is tried
    # (it took 2 to 6 s a URL).
    robots = parse_robots(allow_file())
    assert len(robots.rules_for("*") or ()) > 4_800
    assert robots_refusal(robots, AGENT, LONG_PATH) is None
    assert counted[0] == 0


def test_rules_too_costly_to_match_refuse_the_url_within_the_budget(counted: list[int]) -> None:
    # One Disallow after them: every Allow must be tried first. The budget stops the matching after about
    # optout.MAX_MATCH_WORK / (path + pattern) rules and refuses the URL (fail closed), naming why.
    robots = parse_robots(allow_file("Disallow: /zzz\n"))
    rules = len(robots.rules_for("*") or ())
    detail = robots_refusal(robots, AGENT, LONG_PATH)
    assert detail == (
        f"robots.txt: not matched, {rules:,} rules for * against a path of 8,150 characters cost more than the "
        f"{optout.MAX_MATCH_WORK:,} characters of matching allowed per URL (refused: fail closed)"
    )
    per_rule = len(LONG_PATH) + 1 + len(PIECE)  # the path, and the pattern `/*PIECE`
    assert counted[0] <= optout.MAX_MATCH_WORK // per_rule < rules // 4
    # Under the budget the same rules decide as before: a short path is matched against all of them.
    counted[0] = 0
    assert robots_refusal(robots, AGENT, "/zzz/a.jpg") == "robots.txt: Disallow /zzz for *"
    assert robots_refusal(robots, AGENT, "/b.jpg") is None
    assert counted[0] == 2 * rules


def test_tdmrep_locations_too_costly_to_match_refuse_the_url(counted: list[int]) -> None:
    items = [{"location": f"/*{PIECE}", "tdm-reservation": 0}] * 3_000 + [{"location": "/zzz", "tdm-reservation": 1}]
    rules = parse_tdmrep(json.dumps(items))
    assert len(rules) == 3_001
    assert tdmrep_refusal(rules, LONG_PATH) == (
        "tdmrep.json: not matched, 3,001 rules against a path of 8,150 characters cost more than the "
        f"{optout.MAX_MATCH_WORK:,} characters of matching allowed per URL (refused: fail closed)"
    )
    assert counted[0] <= optout.MAX_MATCH_WORK // len(LONG_PATH)
    # Locations that cannot refuse (after the last reserved one) are never tried.
    counted[0] = 0
    assert tdmrep_refusal(parse_tdmrep(json.dumps(items[:-1])), LONG_PATH) is None
    assert counted[0] == 0


def test_a_path_past_the_cap_is_refused_by_rules_with_a_wildcard_only() -> None:
    # `*` in a path is escaped (three characters): 3,000 of them make a 9,001-character path, past the cap.
    path = "/" + "*" * 3_000
    wild = parse_robots("User-agent: *\nDisallow: /*zzz\n")
    assert robots_refusal(wild, AGENT, path) == (
        f"robots.txt: not matched, the path has 9,001 characters, more than the {optout.MAX_TARGET_CHARS:,} matched "
        "against rules for * with a `*` (refused: fail closed)"
    )
    # Rules without a `*` compare at most their own length: matched as usual.
    assert robots_refusal(parse_robots("User-agent: *\nDisallow: /zzz\n"), AGENT, path) is None
    assert robots_refusal(parse_robots("User-agent: *\nDisallow: /%2A\n"), AGENT, path) == (
        "robots.txt: Disallow /%2A for *"
    )
    tdm = parse_tdmrep(json.dumps([{"location": "/*zzz", "tdm-reservation": 1}]))
    assert tdmrep_refusal(tdm, path) is not None and "more than the" in (tdmrep_refusal(tdm, path) or "")


def test_a_long_piece_is_searched_in_linear_time() -> None:
    # CPython's str.find compares most of a 600-character piece at every position of this path (about 1 ms a
    # match): 2,000 matches took 2 s. The linear search takes a few milliseconds; 0.5 s of this process's CPU
    # time leaves a wide margin on a loaded machine.
    matcher = compile_pattern("/*" + "a" * 597 + "baa")
    target = "/" + "a" * 2498
    assert not matcher.match(target) and matcher.match(target + "baa")
    start = time.process_time()
    for _ in range(2_000):
        matcher.match(target)
    assert time.process_time() - start < 0.5


def reference(pattern: str) -> re.Pattern[str]:
    """The obvious regex of a robots.txt pattern (backtracking, fine for short ones)."""
    anchored = pattern.endswith("$")
    body = ".*".join(re.escape(p) for p in (pattern[:-1] if anchored else pattern).split("*"))
    return re.compile(body + ("$" if anchored else ""), re.S)


_LONG_PIECES = st.lists(st.text(alphabet="ab", min_size=0, max_size=14), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(pieces=_LONG_PIECES, anchored=st.booleans(), target=st.text(alphabet="ab", max_size=60))
def test_long_pieces_match_as_the_regex_does(pieces: list[str], anchored: bool, target: str) -> None:
    # Pieces past 8 characters take the compiled-literal search: same answers as the regex.
    pattern = "*".join(pieces) + ("$" if anchored else "")
    assert compile_pattern(pattern).match(target) == bool(reference(pattern).match(target)), (pattern, target)


def test_long_pieces_match_as_the_regex_does_on_every_periodic_case() -> None:
    # Periodic pieces and targets: where a search's fallback table matters.
    pieces = ["a" * 9, "ab" * 5, "aab" * 3, "a" * 8 + "ba", "abaababaab"]
    for first, second in itertools.product(pieces, repeat=2):
        for anchored in (False, True):
            pattern = f"/*{first}*{second}" + ("$" if anchored else "")
            for n in range(0, 40, 3):
                for filler in ("a", "ab", "aab", "aba"):
                    target = "/" + (filler * 40)[:n] + first + (filler * 40)[:n] + second
                    for cut in (target, target[:-1], target + "a"):
                        assert compile_pattern(pattern).match(cut) == bool(reference(pattern).match(cut)), (
                            pattern,
                            cut,
                        )


def checker_for(robots_txt: str) -> OptOutChecker:
    async def fetch(url: URL) -> HostFile:
        if url.path == "/robots.txt":
            return HostFile("ok", text=robots_txt)
        return HostFile("absent", reason="HTTP 404")

    return OptOutChecker(OptOutPolicy(), AGENT, HostFileCache(), fetch)


def test_a_costly_decision_runs_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[threading.Thread] = []
    real = optout.robots_refusal

    def spy(*args: Any) -> str | None:
        threads.append(threading.current_thread())
        return real(*args)

    monkeypatch.setattr(optout, "robots_refusal", spy)

    async def decide(robots_txt: str, path: str) -> tuple[str | None, threading.Thread]:
        threads.clear()
        detail = await checker_for(robots_txt).before_request(URL("http://site.example" + path))
        (thread,) = threads
        return detail, thread

    async def main() -> None:
        loop_thread = threading.current_thread()
        # A few plain rules and a short path: decided on the loop (a thread hop would cost more than the matching).
        detail, thread = await decide("User-agent: *\nDisallow: /private/\n", "/private/a.jpg")
        assert detail == "robots.txt: Disallow /private/ for *" and thread is loop_thread
        # The rules with a Disallow, on its path: in a thread, and refused within the budget.
        detail, thread = await decide(allow_file("Disallow: /zzz\n"), LONG_PATH)
        assert detail is not None and "(refused: fail closed)" in detail and thread is not loop_thread
        # A long path against a few rules: normalising it is a Python loop, in a thread too.
        detail, thread = await decide("User-agent: *\nDisallow: /private/\n", "/" + "a" * 4_000)
        assert detail is None and thread is not loop_thread

    asyncio.run(main())


def test_each_redirect_hop_to_a_costly_path_is_refused_before_it_is_requested(tmp_path: Path) -> None:
    # What fetch-release does (through download_hits): 20 URLs of 8,150 characters against the rules and one
    # Disallow took 58 s (2.9 s a URL); a redirect can choose such a path at every hop.
    corpus = make_corpus(2, seed=3, min_kib=8, max_kib=12)
    with FakeImageHost(corpus=corpus, robots_txt=allow_file("Disallow: /zzz\n")) as host:
        t = tag()
        long = [f"/img/{i % 2}/{t}-{i}-" + "a" * (8150 - len(f"/img/{i % 2}/{t}-{i}-")) for i in range(4)]
        hits = [{"image_id": f"long-{i}", "url": host.url(path)} for i, path in enumerate(long)]
        hop = f"/img/1/{t}-hop"
        host.overrides[hop] = (302, {"Location": long[0] + "x"})  # a short URL, redirected to a costly path
        hits.append({"image_id": "hop", "url": host.url(hop)})
        hits.append({"image_id": "short", "url": host.url(f"/img/0/{t}-short")})
        blobs = BlobStore(Storage(str(tmp_path / "ws")), "blobs")
        rows = by_id(download_hits(hits, blobs, download_config(read_timeout_s=2.0)))
        for i, path in enumerate(long):
            row = rows[f"long-{i}"]
            assert row["error"] == "opted_out" and row["attempts"] == 0, row
            assert row["detail"].startswith("robots.txt: not matched, ") and "fail closed" in row["detail"]
            assert host.counts[path] == 0
        assert rows["hop"]["error"] == "opted_out"
        assert rows["hop"]["detail"].startswith("redirect hop 1: robots.txt: not matched, ")
        assert host.counts[hop] == 1 and host.counts[long[0] + "x"] == 0
        assert rows["short"]["status"] == "ok", rows["short"]  # the site's other URLs are decided as usual
        assert dict(host.meta_counts)["/robots.txt"] == 1


def test_a_hostile_robots_txt_of_distinct_long_pieces_is_parsed_once_in_bounded_time() -> None:
    # Each distinct piece past 8 characters is compiled once, only for rules a decision may try (before the last
    # Disallow); a 512 KiB file of them takes well under a second (in the loading thread, once per origin).
    lines = "".join(f"Allow: /*{i:06d}{PIECE[:92]}\n" for i in range(4_800))
    text = "User-agent: *\n" + lines + "Disallow: /zzz\n"
    assert len(text) <= MAX_FILE_BYTES
    start = time.process_time()
    robots = parse_robots(text)
    plan = robots.plan(AGENT)[1]
    assert len(plan.rules) == 4_801
    assert time.process_time() - start < 10  # generous: about 1 s on a slow machine
    assert robots_refusal(robots, AGENT, "/b000007" + PIECE[:92]) is None
    assert robots_refusal(robots, AGENT, "/zzz") == "robots.txt: Disallow /zzz for *"


# -- item 7: publish ---------------------------------------------------------------------------------------------

TOKEN = "hf_fake-round3-token-5b2e8a"
REPO = "culturebench/3xcm"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with serving(monkeypatch, TOKEN) as server:
        yield server


@pytest.fixture
def release(small_releases: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the small 3XCM release, to tamper with."""
    copy = tmp_path / "releases" / "3xcm" / "0.0.1"
    shutil.copytree(small_releases["3xcm"], copy)
    return copy


def publish(release: Path, *extra: str) -> Any:
    result = CliRunner().invoke(app, ["publish", str(release), "--repo-id", REPO, *extra])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def one_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


def assert_nothing_reached_the_hub(hub: FakeHub, output: str, tmp_path: Path) -> None:
    assert hub.calls == [] and hub.authorizations == [] and not hub.repos
    assert TOKEN not in output
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]


@pytest.fixture
def resolves_to_loopback(monkeypatch: pytest.MonkeyPatch) -> str:
    """`hub.example.org` resolves to 127.0.0.1 in this process: a plain-http Hub elsewhere, that the fake Hub can
    play (before the fix, it received `Authorization: Bearer hf_...` over it)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "hub.example.org" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return "hub.example.org"


@pytest.mark.parametrize("via", ["--endpoint", "HF_ENDPOINT"])
def test_publish_refuses_plain_http_to_another_host_before_any_call(
    hub: FakeHub, release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolves_to_loopback: str, via: str
) -> None:
    port = hub.endpoint.rsplit(":", 1)[1]
    clear = f"http://{resolves_to_loopback}:{port}"
    if via == "HF_ENDPOINT":
        monkeypatch.setenv("HF_ENDPOINT", clear)
        result = publish(release)
    else:
        result = publish(release, "--endpoint", clear)
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert line.startswith(f"{via} {clear}: plain http:// would send the Hub token in clear"), line
    assert_nothing_reached_the_hub(hub, result.output, tmp_path)


def test_publish_over_loopback_http_still_works(hub: FakeHub, release: Path) -> None:
    result = publish(release, "--endpoint", hub.endpoint + "/")
    assert result.exit_code == 0, result.output
    assert one_line(result.output).startswith(f"created: {REPO} tag 0.0.1")
    assert hub.authorizations and all(auth == f"Bearer {TOKEN}" for auth in hub.authorizations)


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://huggingface.co",
        "https://hub.example.org:8443/",
        "http://127.0.0.1:8080",
        "http://127.9.9.9",
        "http://[::1]:8080",
        "http://localhost:8080",
        "HTTP://LOCALHOST",
    ],
)
def test_endpoints_that_keep_the_token_off_the_wire_in_clear(endpoint: str) -> None:
    from data.publish.hub import check_endpoint

    assert check_endpoint(endpoint) == endpoint.rstrip("/")


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        (
            "http://hub.example.org",
            "--endpoint http://hub.example.org: plain http:// would send the Hub token in clear",
        ),
        ("http://10.0.0.5:8080", "--endpoint http://10.0.0.5:8080: plain http://"),
        ("http://[::ffff:127.0.0.1]", "--endpoint http://[::ffff:127.0.0.1]: plain http://"),  # mapped: not ::1
        ("http://2130706433", "--endpoint http://2130706433: plain http://"),  # a legacy spelling: not trusted
        ("http://localhost.example.org", "--endpoint http://localhost.example.org: plain http://"),
        ("https://user:hunter2@hub.example.org", "--endpoint https://hub.example.org: holds a user or password"),
        ("https://hub.example.org/?x=1", "--endpoint https://hub.example.org/: has a query or fragment"),
        ("ftp://hub.example.org", "--endpoint is not an http(s) URL with a host"),
        ("hub.example.org", "--endpoint is not an http(s) URL with a host"),
        ("https://hub.example.org:99999", "--endpoint is not a URL"),
    ],
)
def test_endpoints_refused_in_one_line(endpoint: str, message: str) -> None:
    from data.publish.hub import PublishInputError, check_endpoint

    with pytest.raises(PublishInputError) as refused:
        check_endpoint(endpoint)
    assert str(refused.value).startswith(message), str(refused.value)
    assert "hunter2" not in str(refused.value)


def add_file(release: Path, rel: str, data: bytes) -> None:
    """A file the manifest lists with its true sha256 and size: past the integrity check, as a forger would."""
    path = release / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    manifest = json.loads((release / "manifest.json").read_text())
    manifest["files"][rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (release / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))


def test_a_release_listing_gitattributes_is_refused_before_any_call(
    hub: FakeHub, release: Path, tmp_path: Path
) -> None:
    # Uploaded, it would replace the Hub's LFS rules: Parquet and tars committed as plain git blobs.
    add_file(release, ".gitattributes", b"*.parquet -filter -diff -merge text\n*.tar -filter -diff -merge text\n")
    result = publish(release)
    assert result.exit_code == 2, result.output
    assert one_line(result.output) == (
        f"{release / 'manifest.json'}: lists .gitattributes, the Hub's own file (its LFS rules); "
        "a release never replaces it"
    )
    assert_nothing_reached_the_hub(hub, result.output, tmp_path)


@pytest.mark.parametrize(
    "rel",
    [
        "notes.txt",
        ".huggingface.yaml",
        ".github/workflows/run.yml",
        "scripts/loader.py",
        "image_metadata/extra.parquet",
        "images/evil.tar",
        "figures/../../escape.png",
        "README.md.bak",
    ],
)
def test_a_release_listing_a_file_of_another_kind_is_refused_before_any_call(
    hub: FakeHub, release: Path, tmp_path: Path, rel: str
) -> None:
    if ".." in rel:
        # The manifest model refuses a path outside the release already (exit 2, naming the field).
        manifest = json.loads((release / "manifest.json").read_text())
        manifest["files"][rel] = {"sha256": "0" * 64, "bytes": 1}
        (release / "manifest.json").write_text(json.dumps(manifest))
    else:
        add_file(release, rel, b"print('hello')\n")
    result = publish(release)
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert "manifest.json" in line and (repr(rel) in line or "files[" in line), line
    assert_nothing_reached_the_hub(hub, result.output, tmp_path)


def test_every_file_a_release_writer_produces_is_of_a_release_kind(
    small_releases: dict[str, Path], tmp_path: Path
) -> None:
    from data.publish.hub import is_release_file

    folders = [*small_releases.values()]
    folders += [ROOT / "releases" / "3xcm" / "0.1.0-demo", ROOT / "releases" / "mixcube" / "0.1.0-demo"]
    # A takedown patch, written beside a copy of the small 3XCM release.
    copy = tmp_path / "releases" / "3xcm" / "0.0.1"
    shutil.copytree(small_releases["3xcm"], copy)
    import pyarrow.parquet as pq

    image_id = pq.read_table(next((copy / "image_metadata").glob("*.parquet")), columns=["image_id"])[0][0]
    taken = CliRunner().invoke(
        app, ["takedown", str(copy), "--image-id", str(image_id), "--reason", "asked", "--date", "2026-05-01"]
    )
    assert taken.exit_code == 0, taken.output
    folders.append(copy.parent / "0.0.2")
    for folder in folders:
        if not folder.is_dir():
            continue  # the demo releases, before `make demo`
        files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
        assert files and [rel for rel in files if not is_release_file(rel)] == [], folder
        assert any(rel.startswith("reference/") for rel in files), folder  # every release carries its pack
