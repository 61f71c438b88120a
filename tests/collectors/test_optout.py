"""Opt-outs honoured at download (`collectors.optout`, `collectors.downloader`): X-Robots-Tag, TDMRep (header and
/.well-known/tdmrep.json) and robots.txt, first as pure parsers, then against the loopback fake host."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict
from pydantic import ValidationError
from yarl import URL

from collectors.downloader import DownloadJournal, HttpDownloadConfig, HttpFetcher, download_hits
from collectors.optout import (
    MAX_FILE_BYTES,
    MAX_JSON_DEPTH,
    MAX_PATTERN_CHARS,
    MAX_RULES,
    HostFile,
    HostFileCache,
    OptOutChecker,
    OptOutPolicy,
    PathPattern,
    RobotsTxt,
    compile_pattern,
    normalize_target,
    parse_robots,
    parse_tdmrep,
    product_token,
    robots_refusal,
    tdm_header_refusal,
    tdmrep_refusal,
    x_robots_refusal,
)
from data.provenance import redact
from data.workspace import BlobStore, Storage, Workspace
from tests.support.download_helpers import by_id, download_config, tag
from tests.support.fake_image_host import FakeImageHost, make_corpus
from tests.support.paths import REPO_ROOT

CORPUS = make_corpus(4, seed=5, min_kib=8, max_kib=16)
AGENT = "culturebench"
DIRECTIVES = ["noai", "noimageai", "none", "noindex"]
ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


# -- X-Robots-Tag ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "detail"),
    [
        (["noai"], "X-Robots-Tag: noai"),
        (["NoImageAI"], "X-Robots-Tag: noimageai"),
        (["nofollow, none"], "X-Robots-Tag: none"),
        (["noarchive", "noindex"], "X-Robots-Tag: noindex"),  # several headers
        (["culturebench: noimageai"], "X-Robots-Tag: culturebench: noimageai"),
        (["CultureBench: nofollow, noai"], "X-Robots-Tag: culturebench: noai"),  # the prefix holds for the list
        (["otherbot: noai", "culturebench: none"], "X-Robots-Tag: culturebench: none"),
        (["otherbot: nofollow, culturebench: noai"], "X-Robots-Tag: culturebench: noai"),
        (["*: noai"], "X-Robots-Tag: *: noai"),
        (["max-snippet: 20, noai"], "X-Robots-Tag: noai"),  # a directive with a value is no crawler name
        # unavailable_after's date holds a comma and colons: neither a crawler name nor a directive of ours.
        (["unavailable_after: Monday, 25-Jun-2040 15:00:00 GMT, noindex"], "X-Robots-Tag: noindex"),
    ],
)
def test_x_robots_tag_refuses(values: list[str], detail: str) -> None:
    assert x_robots_refusal(values, AGENT, DIRECTIVES) == detail


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["nofollow, noarchive"],
        ["otherbot: noai"],
        ["otherbot: noindex, noai"],  # both addressed to otherbot
        ["googlebot: noindex", "otherbot: none"],
        ["culturebenchx: noai", "bench: noai"],  # whole names, not substrings
        ["max-image-preview: none"],  # `none` is the value of another directive here
        ["unavailable_after: 25 Jun 2040 15:00:00 PST"],
    ],
)
def test_x_robots_tag_allows(values: list[str]) -> None:
    assert x_robots_refusal(values, AGENT, DIRECTIVES) is None


def test_x_robots_directives_are_configurable() -> None:
    assert x_robots_refusal(["noindex"], AGENT, ["noai"]) is None
    assert x_robots_refusal(["noindex, noai"], AGENT, ["noai"]) == "X-Robots-Tag: noai"
    assert OptOutPolicy(x_robots_directives=[" NoAI "]).x_robots_directives == ["noai"]
    with pytest.raises(ValidationError):
        OptOutPolicy(x_robots_directives=[])


def test_tdm_reservation_header() -> None:
    assert tdm_header_refusal(["1"]) == "tdm-reservation: 1 (header)"
    assert tdm_header_refusal([" 1 "], "https://example.com/p") == (
        "tdm-reservation: 1 (header), tdm-policy https://example.com/p"
    )
    # 0 is "not reserved"; any other value is a protocol error, read as unset.
    for values in ([], ["0"], ["2"], ["yes"], [""]):
        assert tdm_header_refusal(values) is None


# -- robots.txt --------------------------------------------------------------------------------------------------


def verdict(robots: str, path: str, agent: str = AGENT) -> str | None:
    return robots_refusal(parse_robots(robots), agent, path)


def test_robots_longest_match_wins_not_the_first() -> None:
    text = "User-agent: culturebench\nAllow: /\nDisallow: /private/\nAllow: /private/open/\n"
    assert verdict(text, "/private/a.jpg") == "robots.txt: Disallow /private/ for culturebench"
    assert verdict(text, "/private/open/a.jpg") is None
    assert verdict(text, "/public/a.jpg") is None
    # Of two rules as long, Allow.
    assert verdict("User-agent: *\nDisallow: /a\nAllow: /a\n", "/a.jpg") is None


def test_robots_wildcards() -> None:
    text = "User-agent: *\nDisallow: /*.jpg$\nDisallow: /tmp*/x\n"
    assert verdict(text, "/img/a.jpg") == "robots.txt: Disallow /*.jpg$ for *"
    assert verdict(text, "/img/a.jpg?size=2") is None  # `$` ends the path
    assert verdict(text, "/img/a.png") is None
    assert verdict(text, "/tmp123/x/y") == "robots.txt: Disallow /tmp*/x for *"
    # The query is part of what is matched.
    assert verdict("User-agent: *\nDisallow: /*?private\n", "/a.jpg?private=1") is not None


def test_robots_groups() -> None:
    text = (
        "# comment\nDisallow: /before-any-agent\n"
        "User-agent: *\nDisallow: /\n\n"
        "User-agent: otherbot\nUser-agent: CultureBench/2.0  # version and case ignored\nDisallow: /img/1/\n"
        "Sitemap: https://example.com/sitemap.xml\nDisallow: /img/2/\n\n"
        "User-agent: culturebench\nDisallow: /img/3/\n"
    )
    # Our groups (merged) replace the `*` group; the Sitemap line does not end a group.
    assert verdict(text, "/img/0/a") is None
    for n in (1, 2, 3):
        assert verdict(text, f"/img/{n}/a") == f"robots.txt: Disallow /img/{n}/ for culturebench"
    assert verdict(text, "/img/0/a", agent="somebot") == "robots.txt: Disallow / for *"
    # Whole product tokens, not substrings (urllib.robotparser would take `bench` for us).
    assert verdict("User-agent: bench\nDisallow: /\n", "/a") is None
    assert verdict("User-agent: otherbot\nDisallow: /\n", "/a") is None
    # An empty Disallow allows everything; no robots.txt has no rules.
    assert verdict("User-agent: *\nDisallow:\n", "/a") is None
    assert verdict("", "/a") is None
    assert verdict("<html><body>Not found</body></html>", "/a") is None


def test_robots_percent_encoding_is_normalised() -> None:
    assert verdict("User-agent: *\nDisallow: /caf%C3%A9/\n", "/café/a.jpg") is not None
    assert verdict("User-agent: *\nDisallow: /café/\n", "/caf%c3%a9/a.jpg") is not None
    assert verdict("User-agent: *\nDisallow: /%7Euser/\n", "/~user/a.jpg") is not None
    # A literal `$` in a URL is not the end-of-path mark of a pattern.
    assert verdict("User-agent: *\nDisallow: /a$\n", "/a%24") is None
    assert verdict("User-agent: *\nDisallow: /a%24\n", "/a$") is not None


# -- tdmrep.json -------------------------------------------------------------------------------------------------


def test_tdmrep_first_matching_rule_decides() -> None:
    rules = parse_tdmrep(
        json.dumps(
            [
                {"location": "/img/open/*", "tdm-reservation": 0},
                {"location": "/img/*", "tdm-reservation": 1, "tdm-policy": "https://example.com/policy.json"},
                {"location": "/*.jpg", "tdm-reservation": 1},
                {"location": "/docs/", "tdm-reservation": 7},  # a protocol error: unset
                {"location": "/docs/", "tdm-reservation": 1},  # never reached for /docs/
                {"tdm-reservation": 1},  # no location: not a rule
            ]
        )
    )
    assert tdmrep_refusal(rules, "/img/open/a.jpg") is None
    assert tdmrep_refusal(rules, "/img/a.png") == (
        "tdmrep.json: location /img/* reserved (tdm-policy https://example.com/policy.json)"
    )
    assert tdmrep_refusal(rules, "/photos/a.jpg") == "tdmrep.json: location /*.jpg reserved"
    assert tdmrep_refusal(rules, "/docs/a.png") is None
    assert tdmrep_refusal(rules, "/other") is None
    assert tdmrep_refusal(parse_tdmrep('[{"location": "/", "tdm-reservation": "1"}]'), "/x") is not None


def test_tdmrep_that_is_not_an_array_has_no_rules() -> None:
    for text in ("", "not json", '{"location": "/", "tdm-reservation": 1}', "<html></html>", "null"):
        assert parse_tdmrep(text) == ()
    # true is not 1
    assert tdmrep_refusal(parse_tdmrep('[{"location": "/", "tdm-reservation": true}]'), "/x") is None


# -- hostile site files (issue 27): bounded work, never an exception -------------------------------------------------

# 14 wildcards before a `Z` the path lacks: a backtracking regex (`.*a.*a...Z`) tries every way of placing the `a`s,
# some C(n, 14) of them. The regex this matcher replaced took 1.5 s for 8 wildcards and 22.5 s for 10 on a 40-character
# path, about 15x per two more wildcards: 14 on 60 characters extrapolates to hours. The linear matcher takes
# microseconds.
PATHOLOGICAL = "/" + "*a" * 14 + "*Z"
ROOT = REPO_ROOT


def reference(pattern: str) -> re.Pattern[str]:
    """The backtracking translation the linear matcher replaced (right, but exponential on some patterns)."""
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    return re.compile(".*".join(re.escape(part) for part in body.split("*")) + (r"\Z" if anchored else ""), re.S)


def test_pathological_wildcards_are_decided_at_once_for_robots_and_tdmrep() -> None:
    # In a fresh interpreter: a regex stuck in a backtracking search cannot be interrupted from another thread of
    # ours (it holds the GIL), only killed with its process. 60 s covers a slow interpreter start many times over.
    script = f"""
import json
from collectors.optout import parse_robots, parse_tdmrep, robots_refusal, tdmrep_refusal
robots = parse_robots("User-agent: *\\nDisallow: " + {PATHOLOGICAL!r} + "\\n")
rules = parse_tdmrep(json.dumps([{{"location": {PATHOLOGICAL!r}, "tdm-reservation": 1}}]))
for n in (40, 50, 60):
    for path in ("/" + "a" * n, "/" + "a" * n + "Z"):
        print(json.dumps([robots_refusal(robots, "culturebench", path), tdmrep_refusal(rules, path)]))
"""
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a robots.txt/tdmrep.json pattern with 14 wildcards took over 60 s to match (backtracking)")
    assert done.returncode == 0, done.stderr
    no_z = [None, None]
    with_z = [f"robots.txt: Disallow {PATHOLOGICAL} for *", f"tdmrep.json: location {PATHOLOGICAL} reserved"]
    assert [json.loads(line) for line in done.stdout.splitlines()] == [no_z, with_z] * 3


def test_robots_and_tdmrep_share_the_linear_matcher() -> None:
    robots = parse_robots(f"User-agent: *\nDisallow: {PATHOLOGICAL}\n")
    tdm = parse_tdmrep(json.dumps([{"location": PATHOLOGICAL, "tdm-reservation": 1}]))
    matchers = [rule.matcher for rule in robots.rules_for("*") or ()] + [rule.matcher for rule in tdm]
    assert len(matchers) == 2 and all(type(m) is PathPattern for m in matchers)
    assert matchers[0] == matchers[1] == compile_pattern(PATHOLOGICAL)


def test_linear_matcher_agrees_with_the_regex_on_every_small_case() -> None:
    # Every pattern of up to 5 characters over `a`, `b`, `*`, `$` (a `$` inside is a literal) against every target of
    # up to 4 over `a`, `b`, `$`: empty pieces, `**`, a final `$` after a `*`, a pattern longer than its target.
    patterns = ["".join(p) for n in range(6) for p in itertools.product("ab*$", repeat=n)]
    targets = ["".join(t) for n in range(5) for t in itertools.product("ab$", repeat=n)]
    for pattern in patterns:
        linear, regex = compile_pattern(pattern), reference(pattern)
        for target in targets:
            assert linear.match(target) == bool(regex.match(target)), (pattern, target)


_PIECES = st.lists(st.text(alphabet="ab/$%", max_size=4), min_size=1, max_size=5)  # at most 4 `*`s: the regex is fast


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=_PIECES, anchored=st.booleans(), target=st.text(alphabet="ab/$%", max_size=24))
def test_linear_matcher_agrees_with_the_regex(pieces: list[str], anchored: bool, target: str) -> None:
    pattern = "*".join(pieces) + ("$" if anchored else "")
    assert compile_pattern(pattern).match(target) == bool(reference(pattern).match(target)), (pattern, target)


def reference_refusal(robots: RobotsTxt, agent: str, path_qs: str) -> str | None:
    """robots_refusal as it was: every group naming us (or else `*`), every rule by the regex, the longest wins."""
    label, groups = agent, [g for g in robots.groups if agent in g.agents]
    if not groups:
        label, groups = "*", [g for g in robots.groups if "*" in g.agents]
    target = normalize_target(path_qs)
    best = None
    for rule in (r for g in groups for r in g.rules):
        if reference(rule.pattern).match(target) and (
            best is None or (len(rule.pattern), rule.allow) > (len(best.pattern), best.allow)
        ):
            best = rule
    return None if best is None or best.allow else f"robots.txt: Disallow {best.pattern} for {label}"


_RULE = st.tuples(st.sampled_from(["Allow", "Disallow"]), _PIECES.map(lambda p: "/" + "*".join(p)), st.booleans())
_GROUP = st.tuples(st.lists(st.sampled_from(["*", AGENT, "otherbot"]), min_size=1, max_size=2), st.lists(_RULE))


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=st.lists(_GROUP, max_size=4), paths=st.lists(st.text(alphabet="ab/$%", max_size=16), min_size=1))
def test_robots_decisions_agree_with_the_regex_implementation(
    groups: list[tuple[list[str], list[tuple[str, str, bool]]]], paths: list[str]
) -> None:
    text = "".join(
        "".join(f"User-agent: {a}\n" for a in agents)
        + "".join(f"{k}: {p}{'$' if end else ''}\n" for k, p, end in rules)
        for agents, rules in groups
    )
    robots = parse_robots(text)
    for path in paths:
        for agent in (AGENT, "somebot"):
            assert robots_refusal(robots, agent, "/" + path) == reference_refusal(robots, agent, "/" + path), text


def test_robots_rules_past_the_cap_are_ignored() -> None:
    text = (
        "User-agent: *\n"
        + "".join(f"Disallow: /r{i}/\n" for i in range(MAX_RULES - 1))
        + "Disallow: /last/\nDisallow:\nDisallow: /over/\n"  # an empty Disallow is no rule: not counted
        + "User-agent: culturebench\nDisallow: /ours/\n"  # a group past the cap keeps its agents, not its rules
    )
    robots = parse_robots(text)
    assert len(robots.rules_for("*") or ()) == MAX_RULES
    assert verdict(text, "/last/a", agent="somebot") == "robots.txt: Disallow /last/ for *"
    assert verdict(text, "/over/a", agent="somebot") is None
    assert robots.rules_for(AGENT) == () and verdict(text, "/ours/a") is None


def test_robots_patterns_past_the_length_cap_are_ignored() -> None:
    at_cap, over = "/" + "a" * (MAX_PATTERN_CHARS - 1), "/" + "b" * MAX_PATTERN_CHARS
    # The cap is on the normalised pattern: each `é` is six characters once percent-encoded.
    encoded = "/" + "é" * (MAX_PATTERN_CHARS // 6 + 1)  # 2,780 characters as written
    text = f"User-agent: *\nDisallow: {at_cap}\nDisallow: {over}\nDisallow: {encoded}\n"
    assert verdict(text, at_cap) == f"robots.txt: Disallow {at_cap} for *"
    assert verdict(text, over) is None
    assert verdict(text, encoded) is None


def test_robots_text_past_the_size_cap_is_ignored_by_whole_lines() -> None:
    head = "User-agent: *\nDisallow: /early/\n"
    cut = "Disallow: /late"  # where MAX_FILE_BYTES falls: read as `/late`, it would refuse /latex too
    pad = "#" * (MAX_FILE_BYTES - len(head) - len(cut) - 1) + "\n"
    text = head + pad + cut + "/and/long\nDisallow: /after/\n"
    assert verdict(text, "/early/a") == "robots.txt: Disallow /early/ for *"
    for path in ("/latex", "/late/and/long", "/after/a"):
        assert verdict(text, path) is None
    # A line running past the cap is not read at all.
    assert parse_robots("User-agent: *\nDisallow: /" + "a" * MAX_FILE_BYTES).rules_for("*") == ()


@pytest.mark.parametrize(
    "text",
    [
        "User-agent: *\x00\nDisallow: /a\x00/\n\x00\x00\x00\n",  # NUL bytes
        b"User-agent: *\nDisallow: /\xff\xfe\xc3/\n".decode("utf-8-sig", "replace"),  # not UTF-8, as fetched
        "User-agent: *\nDisallow: /\ud800/\n",  # a lone surrogate
        "User-agent: *\nDisallow: /" + "a" * 400_000 + "\n",  # a very long line
        "User-agent: *\n" + "Disallow: /x\n" * 100_000,  # over the size cap
        "\r".join(["User-agent: *", "Disallow: /c\x1c/"]),  # old Mac line ends, a separator character
    ],
    ids=["nul", "not-utf8", "surrogate", "long-line", "huge", "odd-line-ends"],
)
def test_hostile_robots_txt_never_raises(text: str) -> None:
    robots = parse_robots(text)
    assert robots_refusal(robots, AGENT, "/other/page") is None


def test_robots_txt_byte_order_mark_is_skipped() -> None:
    assert verdict("\ufeffUser-agent: *\nDisallow: /a\n", "/a") == "robots.txt: Disallow /a for *"


def test_tdmrep_rules_past_the_caps_are_ignored() -> None:
    items: list[dict[str, object]] = [{"location": f"/r{i}/"} for i in range(MAX_RULES - 1)]
    items += [{"location": "/last/", "tdm-reservation": 1}, {"location": "/over/", "tdm-reservation": 1}]
    rules = parse_tdmrep(json.dumps(items, separators=(",", ":")))
    assert len(rules) == MAX_RULES
    assert tdmrep_refusal(rules, "/last/a") == "tdmrep.json: location /last/ reserved"
    assert tdmrep_refusal(rules, "/over/a") is None
    # A location over the length cap is no rule: the next one decides.
    long = "/img/" + "a" * MAX_PATTERN_CHARS
    rules = parse_tdmrep(
        json.dumps([{"location": long, "tdm-reservation": 0}, {"location": "/img/", "tdm-reservation": 1}])
    )
    assert [r.location for r in rules] == ["/img/"]
    # A file over the size cap is not read at all.
    small = json.dumps([{"location": "/", "tdm-reservation": 1}])
    assert parse_tdmrep(small + " " * (MAX_FILE_BYTES - len(small))) != ()
    assert parse_tdmrep(small + " " * (MAX_FILE_BYTES - len(small) + 1)) == ()


def nested(depth: int) -> str:
    """A valid tdmrep.json reserving everything, with an extra member nested to `depth` in all."""
    inner = "[" * (depth - 2) + "]" * (depth - 2)
    return '[{"location": "/", "tdm-reservation": 1, "extension": ' + inner + "}]"


def test_tdmrep_nesting_is_capped() -> None:
    assert len(parse_tdmrep(nested(MAX_JSON_DEPTH))) == 1
    assert parse_tdmrep(nested(MAX_JSON_DEPTH + 1)) == ()
    # Brackets inside strings are no nesting, escaped quotes do not end a string.
    deep_string = json.dumps([{"location": "/[{" * 2000 + '\\"]' * 100, "tdm-reservation": 1}])
    assert len(parse_tdmrep(deep_string)) == 1


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        '{"a":' * 5000,
        "[" * 5000 + "]" * 5000,  # deeply nested, and valid
        nested(1000),  # a valid rule list, nested deep inside
        '"' + '\\"' * 100_000,  # a string that never ends
        '"[' * 50_000,
        "]" * 100 + "[" * 100,
        "1" * 100_000,  # past the interpreter's limit on int digits
        b"\xff\xfe[\x00\x80{]".decode("utf-8-sig", "replace"),  # not UTF-8, as fetched
        '[{"location": "/a\x00", "tdm-reservation": 1}]',  # a raw control character in a string
        json.dumps([{"location": "/", "tdm-reservation": 1}]) + " " * MAX_FILE_BYTES,  # a huge body
    ],
    ids=[
        "brackets",
        "objects",
        "nested-valid",
        "nested-in-rules",
        "unterminated",
        "quotes",
        "unbalanced",
        "digits",
        "not-utf8",
        "control",
        "huge",
    ],
)
def test_hostile_tdmrep_json_has_no_rules(text: str) -> None:
    assert parse_tdmrep(text) == ()


def test_tdmrep_lone_surrogate_is_a_location_like_any_other() -> None:
    # `\ud800` is valid JSON, and json.loads makes it a lone surrogate, which UTF-8 cannot encode.
    rules = parse_tdmrep(
        '[{"location": "/\\ud800", "tdm-reservation": 1}, {"location": "/img/", "tdm-reservation": 1}]'
    )
    assert len(rules) == 2
    assert tdmrep_refusal(rules, "/img/a") == "tdmrep.json: location /img/ reserved"


_FUZZ = st.lists(
    st.sampled_from([*'[]{}":,\\ #\n\r\x00a/*$%é\ud800\ufeff', "User-agent:", "Disallow:", "Allow:", "\\u"])
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=_FUZZ | st.text(), path=st.text(max_size=20))
def test_site_file_parsers_never_raise(text: str, path: str) -> None:
    robots_refusal(parse_robots(text), AGENT, "/" + path)
    robots_refusal(parse_robots("User-agent: *\nDisallow: " + text), AGENT, "/" + path)
    tdmrep_refusal(parse_tdmrep(text), "/" + path)
    tdmrep_refusal(parse_tdmrep('[{"location": ' + json.dumps(text) + ', "tdm-reservation": 1}]'), "/" + path)


# -- the policy in the config and the manifest ------------------------------------------------------------------


def test_agent_name_comes_from_the_user_agent_and_is_recorded() -> None:
    assert product_token("culturebench/0.1 (+research dataset builder)") == "culturebench"
    assert HttpDownloadConfig().opt_out.agent_name == "culturebench"
    assert HttpDownloadConfig(user_agent="MyBot/2.0").opt_out.agent_name == "mybot"
    assert HttpDownloadConfig(user_agent="MyBot/2.0", opt_out={"agent_name": "other"}).opt_out.agent_name == "other"
    with pytest.raises(ValidationError):
        OptOutPolicy(agent_name="bad name/1")


def test_the_policy_lands_unredacted_in_the_released_config() -> None:
    from flows.engine.config import build_config
    from flows.xcm.config import Build3XCMConfig

    config = build_config(
        {"download": {"backend": "http", "opt_out": {"unreachable_policy": "closed"}}}, model=Build3XCMConfig
    )
    released = config.released_config()["download"]["opt_out"]
    assert released == {
        "x_robots_tag": True,
        "x_robots_directives": DIRECTIVES,
        "tdm_reservation": True,
        "tdmrep_json": True,
        "robots_txt": True,
        "unreachable_policy": "closed",
        "agent_name": "culturebench",
    }
    assert redact({"opt_out": released}) == {"opt_out": released}  # no field name looks like a secret


# -- the per-origin cache ----------------------------------------------------------------------------------------


def test_cache_loads_once_per_key_across_tasks_and_loops() -> None:
    cache = HostFileCache()
    calls: list[str] = []

    async def load(key: str) -> str:
        calls.append(key)
        await asyncio.sleep(0.2)
        return key.upper()

    async def many(key: str) -> list[str]:
        return await asyncio.gather(*(cache.get(key, lambda: load(key)) for _ in range(20)))

    results: list[list[str]] = []
    threads = [threading.Thread(target=lambda: results.append(asyncio.run(many("a")))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [["A"] * 20] * 3
    assert asyncio.run(many("b")) == ["B"] * 20
    assert calls == ["a", "b"]


def test_cache_hands_the_load_over_when_its_owner_is_cancelled() -> None:
    cache = HostFileCache()
    calls = 0

    async def load() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.2)
        return "rules"

    async def scenario() -> str:
        owner = asyncio.create_task(cache.get("k", load))
        await asyncio.sleep(0.05)
        waiter = asyncio.create_task(cache.get("k", load))
        await asyncio.sleep(0.05)
        owner.cancel()
        return await waiter

    assert asyncio.run(scenario()) == "rules"
    assert calls == 2


def test_checker_decisions_without_a_network() -> None:
    files = {
        "/robots.txt": HostFile("ok", "User-agent: culturebench\nDisallow: /private/\n"),
        "/.well-known/tdmrep.json": HostFile("ok", '[{"location": "/reserved/", "tdm-reservation": 1}]'),
    }
    asked: list[str] = []

    async def fetch(url: URL) -> HostFile:
        asked.append(str(url))
        return files[url.path]

    async def decide(policy: OptOutPolicy, path: str) -> str | None:
        checker = OptOutChecker(policy, AGENT, HostFileCache(), fetch)
        return await checker.before_request(URL(f"http://example.com{path}"))

    assert asyncio.run(decide(OptOutPolicy(), "/private/a.jpg")) == "robots.txt: Disallow /private/ for culturebench"
    assert asyncio.run(decide(OptOutPolicy(), "/reserved/a.jpg")) == "tdmrep.json: location /reserved/ reserved"
    assert asyncio.run(decide(OptOutPolicy(robots_txt=False, tdmrep_json=False), "/private/a.jpg")) is None
    asked.clear()
    assert asyncio.run(decide(OptOutPolicy(robots_txt=False), "/private/a.jpg")) is None
    assert asked == ["http://example.com/.well-known/tdmrep.json"]
    checker = OptOutChecker(OptOutPolicy(tdm_reservation=False), AGENT, HostFileCache(), fetch)
    assert checker.after_response(CIMultiDict({"tdm-reservation": "1"})) is None
    assert checker.after_response(CIMultiDict({"X-Robots-Tag": "noai"})) == "X-Robots-Tag: noai"


# -- against the fake host ---------------------------------------------------------------------------------------


def config(**overrides: object) -> HttpDownloadConfig:
    return download_config(**{"read_timeout_s": 2.0, **overrides})


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage(str(tmp_path / "ws"))


@pytest.fixture
def blobs(storage: Storage) -> BlobStore:
    return BlobStore(storage, "blobs")


def stored(tmp_path: Path) -> set[str]:
    """Every blob in the workspace's store, by name."""
    return {p.name for p in (tmp_path / "ws" / "blobs").rglob("*") if p.is_file()}


def assert_refused(row: dict, detail: str) -> None:
    assert row["status"] == "failed" and row["error"] == "opted_out", row
    assert row["detail"] == detail, row["detail"]
    assert row["transient"] is False
    assert row["sha256"] is None and row["num_bytes"] is None and row["width"] is None


ROBOTS = (
    "User-agent: *\nDisallow: /\n\n"  # other crawlers: nothing
    "User-agent: culturebench\nDisallow: /img/1/\nDisallow: /*?private\n\n"
    "User-agent: otherbot\nDisallow: /img/0/\n"  # addressed to someone else
)
TDMREP = json.dumps(
    [
        {"location": "/img/2/*", "tdm-reservation": 1, "tdm-policy": "https://example.com/tdm-policy.json"},
        {"location": "/img/*", "tdm-reservation": 0},
    ]
)


@pytest.fixture
def host() -> Iterator[FakeImageHost]:
    with FakeImageHost(corpus=CORPUS, robots_txt=ROBOTS, tdmrep_json=TDMREP) as server:
        yield server


def test_headers_refuse_before_the_body_is_read(host: FakeImageHost, blobs: BlobStore, tmp_path: Path) -> None:
    t = tag()
    refused = {
        "noai": ("?unique=1&X-Robots-Tag=noai", "X-Robots-Tag: noai"),
        "addressed": ("?unique=1&X-Robots-Tag=culturebench:+noimageai", "X-Robots-Tag: culturebench: noimageai"),
        "list": ("?unique=1&X-Robots-Tag=nofollow,+noindex", "X-Robots-Tag: noindex"),
        "several": (
            "?unique=1&X-Robots-Tag=otherbot:+noai&X-Robots-Tag=CULTUREBENCH:+none",
            "X-Robots-Tag: culturebench: none",
        ),
        "tdm": ("?unique=1&tdm-reservation=1", "tdm-reservation: 1 (header)"),
        # A body over max_bytes: refused for its headers, before its Content-Length is even looked at.
        "big": ("?kib=1024&X-Robots-Tag=noai", "X-Robots-Tag: noai"),
    }
    allowed = {
        "plain": "",
        "other-agent": "?X-Robots-Tag=otherbot:+noai",
        "other-directives": "?X-Robots-Tag=nofollow,+noarchive",
        "tdm-0": "?tdm-reservation=0",
    }
    paths = {name: f"/xheaders/{3 if name in refused else 0}/{name}-{t}" for name in [*refused, *allowed]}
    queries = {**{k: q for k, (q, _) in refused.items()}, **allowed}
    hits = [{"image_id": name, "url": host.url(paths[name] + queries[name])} for name in paths]
    before = datetime.now(UTC).isoformat()
    rows = by_id(download_hits(hits, blobs, config()))
    after = datetime.now(UTC).isoformat()

    for name, (_, detail) in refused.items():
        assert_refused(rows[name], detail)
        assert rows[name]["http_status"] == 200 and rows[name]["attempts"] == 1
        assert ISO_Z.match(rows[name]["retrieved_at"])  # a response was received
        assert host.counts[paths[name]] == 1  # not retried
    for name in allowed:
        assert rows[name]["status"] == "ok", rows[name]
        assert ISO_Z.match(rows[name]["retrieved_at"])
        assert before[:19] <= rows[name]["retrieved_at"][:19] <= after[:19]
    # Only the allowed image was stored: none of the refused (distinct, `unique=1`) bodies.
    assert stored(tmp_path) == {rows["plain"]["sha256"]}


def test_robots_and_tdmrep_refuse_before_any_request(host: FakeImageHost, blobs: BlobStore, tmp_path: Path) -> None:
    t = tag()
    paths = {
        "ok": "/img/0/{}",  # robots.txt disallows it to otherbot only, tdmrep.json does not reserve it
        "robots": "/img/1/{}",
        "robots-query": "/img/3/{}?private=1",
        "tdm": "/img/2/{}",
        "redirect": "/redirect/1/1/r{}",  # allowed itself, its target is disallowed
    }
    hits = [
        {"image_id": f"{name}-{i}", "url": host.url(path.format(f"{t}-{i}"))}
        for i in range(5)
        for name, path in paths.items()
    ]
    rows = by_id(download_hits(hits, blobs, config(concurrency=8, per_host_concurrency=4)))

    for i in range(5):
        assert rows[f"ok-{i}"]["status"] == "ok"
        assert_refused(rows[f"robots-{i}"], "robots.txt: Disallow /img/1/ for culturebench")
        assert_refused(rows[f"robots-query-{i}"], "robots.txt: Disallow /*?private for culturebench")
        assert_refused(
            rows[f"tdm-{i}"], "tdmrep.json: location /img/2/* reserved (tdm-policy https://example.com/tdm-policy.json)"
        )
        assert_refused(rows[f"redirect-{i}"], "redirect hop 1: robots.txt: Disallow /img/1/ for culturebench")
        for name in ("robots", "robots-query", "tdm"):
            row = rows[f"{name}-{i}"]
            assert row["attempts"] == 0 and row["http_status"] is None and row["retrieved_at"] is None
        for n in (1, 2, 3):
            assert host.counts[f"/img/{n}/{t}-{i}"] == 0  # never requested
        assert host.counts[f"/img/1/r{t}-{i}"] == 0  # nor the redirect's target
        assert host.counts[f"/redirect/1/1/r{t}-{i}"] == 1  # the hop itself was allowed
    # Each site file once for 25 URLs, with our User-Agent.
    assert dict(host.meta_counts) == {"/robots.txt": 1, "/.well-known/tdmrep.json": 1}
    assert host.request_headers["/robots.txt"][0]["User-Agent"] == config().user_agent
    assert stored(tmp_path) == {rows["ok-0"]["sha256"]}


def test_the_site_files_are_fetched_once_per_run_across_shards(
    host: FakeImageHost, tmp_path: Path, storage: Storage
) -> None:
    fetcher = HttpFetcher(config(), Workspace(str(tmp_path / "ws"), "b"))
    blobs = BlobStore(storage, "blobs")
    for shard in range(3):  # one download call per shard, each on its own event loop
        rows = fetcher.fetch([{"image_id": "a", "url": host.url(f"/img/0/{shard}-{tag()}")}], blobs)
        assert rows["status"][0].as_py() == "ok"
    assert dict(host.meta_counts) == {"/robots.txt": 1, "/.well-known/tdmrep.json": 1}


def test_every_check_can_be_turned_off(host: FakeImageHost, blobs: BlobStore) -> None:
    t = tag()
    off = {"x_robots_tag": False, "tdm_reservation": False, "tdmrep_json": False, "robots_txt": False}
    hits = [
        {"image_id": "robots", "url": host.url(f"/img/1/{t}")},
        {"image_id": "tdm", "url": host.url(f"/img/2/{t}")},
        {"image_id": "x", "url": host.url(f"/xheaders/0/{t}?X-Robots-Tag=noai&tdm-reservation=1")},
    ]
    rows = by_id(download_hits(hits, blobs, config(opt_out=off)))
    assert {r["status"] for r in rows.values()} == {"ok"}
    assert not host.meta_counts  # neither file was fetched


def test_a_refused_address_fetches_no_site_file(host: FakeImageHost, blobs: BlobStore) -> None:
    rows = by_id(
        download_hits([{"image_id": "a", "url": host.url("/img/0/x")}], blobs, config(allow_private_addresses=False))
    )
    assert rows["a"]["error"] == "blocked_address"
    assert not host.meta_counts and not host.counts


@pytest.mark.parametrize("failing", ["robots", "tdmrep"])
def test_unreachable_site_files_fail_open_or_closed(failing: str, blobs: BlobStore) -> None:
    status = {"robots_status": 500} if failing == "robots" else {"tdmrep_status": 503}
    name = "robots.txt" if failing == "robots" else "tdmrep.json"
    with FakeImageHost(corpus=CORPUS, **status) as server:
        hits = [{"image_id": str(i), "url": server.url(f"/img/{i}/{tag()}")} for i in range(3)]
        opened = by_id(download_hits(hits, blobs, config(opt_out={"unreachable_policy": "open"})))
        assert {r["status"] for r in opened.values()} == {"ok"}
        closed = by_id(download_hits(hits, blobs, config(opt_out={"unreachable_policy": "closed"})))
        code = 500 if failing == "robots" else 503
        for row in closed.values():
            assert_refused(row, f"{name} unreachable (fail closed): HTTP {code}")
            assert row["attempts"] == 0
        # Requested once by the open run, never by the closed one (its rows were decided before any request).
        assert all(server.counts[URL(h["url"]).path] == 1 for h in hits)
        path = "/robots.txt" if failing == "robots" else "/.well-known/tdmrep.json"
        assert server.meta_counts[path] == 2  # once per run, not once per URL


def test_hostile_site_files_neither_abort_nor_stall_the_download(blobs: BlobStore) -> None:
    # One origin whose tdmrep.json nests 100,000 arrays (a RecursionError once) and whose robots.txt holds NUL bytes
    # and a wildcard pattern that backtracks for seconds; another whose tdmrep.json has a lone surrogate (a
    # UnicodeEncodeError once). Each is "no rules" where unreadable, and the rest of its rules still hold.
    robots = "\x00\x00\nUser-agent: *  # \x00\nDisallow: /" + "*a" * 10 + "*Z\nDisallow: /img/1/\n"
    surrogate = '[{"location": "/\\ud800", "tdm-reservation": 1}, {"location": "/img/2/", "tdm-reservation": 1}]'
    with (
        FakeImageHost(corpus=CORPUS, robots_txt=robots, tdmrep_json="[" * 100_000) as nested,
        FakeImageHost(corpus=CORPUS, tdmrep_json=surrogate) as odd,
    ):
        t = tag()
        hits = [
            {"image_id": "ok", "url": nested.url(f"/img/0/{'a' * 40}{t}")},
            {"image_id": "robots", "url": nested.url(f"/img/1/{t}")},
            {"image_id": "odd-ok", "url": odd.url(f"/img/0/{t}")},
            {"image_id": "tdm", "url": odd.url(f"/img/2/{t}")},
        ]
        rows = by_id(download_hits(hits, blobs, config(opt_out={"unreachable_policy": "closed"})))
    assert rows["ok"]["status"] == "ok" and rows["odd-ok"]["status"] == "ok"
    assert_refused(rows["robots"], "robots.txt: Disallow /img/1/ for *")
    assert_refused(rows["tdm"], "tdmrep.json: location /img/2/ reserved")


def test_a_missing_site_file_means_no_rules_even_fail_closed(blobs: BlobStore) -> None:
    with FakeImageHost(corpus=CORPUS, robots_status=404, tdmrep_status=403) as server:
        hits = [{"image_id": "a", "url": server.url(f"/img/0/{tag()}")}]
        rows = by_id(download_hits(hits, blobs, config(opt_out={"unreachable_policy": "closed"})))
        assert rows["a"]["status"] == "ok"


def test_a_slow_robots_txt_holds_no_download_slot(blobs: BlobStore) -> None:
    delay = 1.5
    with (
        FakeImageHost(corpus=CORPUS, robots_delay_s=delay) as slow,
        FakeImageHost(corpus=CORPUS) as fast,
    ):
        a, b = f"/img/0/{tag()}", f"/img/1/{tag()}"
        hits = [{"image_id": "a", "url": slow.url(a)}, {"image_id": "b", "url": fast.url(b)}]
        # One slot in all: were it held while host A's robots.txt is awaited, B would wait for it too.
        rows = by_id(download_hits(hits, blobs, config(concurrency=1, per_host_concurrency=1)))
        assert {r["status"] for r in rows.values()} == {"ok"}
        robots_asked = slow.times["/robots.txt"][0]
        assert fast.times[b][0] < robots_asked + delay / 2  # B was served while A's robots.txt was pending
        assert slow.times[a][0] >= robots_asked + delay * 0.9  # A only once its robots.txt had come


def test_journaled_refusals_follow_the_policy(host: FakeImageHost, blobs: BlobStore, storage: Storage) -> None:
    t = tag()
    refused, ok = f"/xheaders/1/{t}", f"/img/0/{t}"
    hits = [
        {"image_id": "refused", "url": host.url(refused + "?X-Robots-Tag=noai")},
        {"image_id": "ok", "url": host.url(ok)},
    ]
    first = by_id(download_hits(hits, blobs, config(), journal=DownloadJournal(storage, "journal")))
    assert first["refused"]["error"] == "opted_out" and first["ok"]["status"] == "ok"
    # The same policy: both reused, nothing requested again (not even with retry_failed: a refusal is no failure
    # to try again).
    again = by_id(download_hits(hits, blobs, config(retry_failed=True), journal=DownloadJournal(storage, "journal")))
    assert again == first
    assert host.counts[refused] == 1 and host.counts[ok] == 1
    # Another policy: both decided again.
    relaxed = config(opt_out={"x_robots_tag": False})
    rows = by_id(download_hits(hits, blobs, relaxed, journal=DownloadJournal(storage, "journal")))
    assert rows["refused"]["status"] == "ok"
    assert host.counts[refused] == 2 and host.counts[ok] == 2


def test_retry_failed_asks_an_unreachable_robots_txt_again(blobs: BlobStore, storage: Storage) -> None:
    with FakeImageHost(corpus=CORPUS, robots_status=500) as server:
        closed = {"unreachable_policy": "closed"}
        hits = [{"image_id": "a", "url": server.url(f"/img/0/{tag()}")}]
        first = by_id(download_hits(hits, blobs, config(opt_out=closed), journal=DownloadJournal(storage, "j")))
        assert first["a"]["error"] == "opted_out"
        server.app.robots_status = 200  # robots.txt is back (a 404: no rules)
        reused = by_id(download_hits(hits, blobs, config(opt_out=closed), journal=DownloadJournal(storage, "j")))
        assert reused["a"]["error"] == "opted_out"  # a rerun reuses the refusal
        retried = config(opt_out=closed, retry_failed=True)
        rows = by_id(download_hits(hits, blobs, retried, journal=DownloadJournal(storage, "j")))
        assert rows["a"]["status"] == "ok"


def test_retrieved_at_is_when_the_response_came(host: FakeImageHost, blobs: BlobStore) -> None:
    start = time.time()
    rows = by_id(download_hits([{"image_id": "a", "url": host.url(f"/img/0/{tag()}")}], blobs, config()))
    stamp = datetime.strptime(rows["a"]["retrieved_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    assert int(start) <= stamp <= time.time()  # to the second
    dns = by_id(download_hits([{"image_id": "d", "url": "http://no-such-host.invalid/a.jpg"}], blobs, config()))
    assert dns["d"]["error"] == "dns" and dns["d"]["retrieved_at"] is None  # no response ever came
