"""Opt-out signals the HTTP downloader honours: X-Robots-Tag, TDMRep and robots.txt.

Pure parsers and matchers, plus a small per-host cache of the two site-wide files, so that `collectors.downloader`
only asks two questions: may this URL be requested (`OptOutChecker.before_request`, robots.txt and
`/.well-known/tdmrep.json`, before any download slot is taken), and may this response's body be read
(`OptOutChecker.after_response`, the `X-Robots-Tag` and `tdm-reservation` headers, before a byte of it is read).

- **X-Robots-Tag** (the convention search engines document): a header value is a comma list of directives, global,
  or addressed to one crawler by a `name:` prefix that holds for the rest of that header value. Several headers may
  come. A directive of `x_robots_directives` refuses the image when it is global or addressed to our agent (or to
  `*`); a directive addressed to another crawler is ignored. Directives with a value (`max-snippet: 20`,
  `unavailable_after: <date>`) are not taken for crawler names.
- **TDMRep** (W3C Community Group final report): the `tdm-reservation: 1` response header, and the origin's
  `/.well-known/tdmrep.json`, a JSON array of `{"location", "tdm-reservation", "tdm-policy"}` rules whose `location`
  is a path pattern matched like a robots.txt path (`*`, a final `$`); the first matching rule decides ("the most
  specific match is the first in sequence"). Values other than 0 and 1 are protocol errors, read as unset. A
  missing, non-JSON or non-array file means the origin does not use the protocol. The spec lets a response header
  overrule the file; we decide from the file before requesting the image, so `tdm-reservation: 0` on a response
  never overrules a reserved location (the conservative reading).
- **robots.txt** (RFC 9309): groups by product token (case-insensitive, the whole token, not a substring), every
  group naming our agent merged, the `*` groups otherwise; `*` and `$` in paths; the longest matching rule wins and
  `Allow` wins a tie; percent-encoding normalised on both sides. A 4xx robots.txt (404 included) means no rules; a
  5xx, 429 or a network failure means "unreachable", decided by `unreachable_policy`. Not `urllib.robotparser`:
  it applies the first matching rule rather than the longest, has no `*`/`$` wildcards, matches agent names as
  substrings and treats 401/403 as "disallow everything".

Both site files are hostile input, parsed in bounded time and memory and never raising. A robots.txt is read to its
last whole line within `MAX_FILE_BYTES` (RFC 9309 lets crawlers ignore the rest); a tdmrep.json longer than that, or
nested deeper than `MAX_JSON_DEPTH`, is not parsed at all (no rules, like any other non-JSON file). Either keeps its
first `MAX_RULES` rules and ignores any rule whose pattern is longer than `MAX_PATTERN_CHARS`: "no rules" for what is
ignored, as for a missing file. Patterns are matched by `PathPattern` in linear time, never by a backtracking regex
(with one, `Disallow: /*a*a*a*a*a*a*a*a*a*a*Z` took 22 s to decide a 40-character path, about 15x more for every two
more wildcards), nor by `str.find` for a long piece (CPython's search is O(path x piece) for a piece under 100
characters: 4,809 rules `Allow: /*aaa...abaa` took 2 to 6 s to decide one 8,150-character path).

Deciding a URL has a budget, since a site chooses both its rules and, through its redirects, the paths we ask it
about: at most `MAX_MATCH_WORK` characters compared per file (counted as the worst case: each rule tried costs its
pattern's length, and a rule with a `*` the path's length too), and, where a rule has a `*`, a path of at most
`MAX_TARGET_CHARS` (rules without one compare at most their own length). Past either, the URL is refused as opted
out, with a detail saying so (`robots.txt: not matched, ... (refused: fail closed)`): what we cannot read of a site's
opt-out we read as the most restrictive answer, as for an unreachable file under `unreachable_policy: closed`. A
decision whose worst case is above `INLINE_MATCH_WORK` (or whose path is long) runs in a thread, off the download
event loop. Rules after the last one that would refuse are never tried (`MatchPlan`): they cannot change the answer.

Both files are fetched once per origin per run (`HostFileCache`, one fetch in flight per origin whatever the thread
or event loop), through their own aiohttp session, so that waiting for them never holds a download slot.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import string
import threading
import zlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, field_validator
from yarl import URL

from collectors.ssrf import MAX_URL_CHARS, AddressPolicy, UrlRefused, check_url

T = TypeVar("T")

OPTED_OUT = "opted_out"  # the `error` of every refusal
DEFAULT_AGENT = "culturebench"
ROBOTS_PATH = "/robots.txt"
TDMREP_PATH = "/.well-known/tdmrep.json"
#: Bytes of robots.txt or tdmrep.json read; the rest is ignored (RFC 9309 asks crawlers to parse at least 500 KiB).
MAX_FILE_BYTES = 512 * 1024
#: Rules kept per robots.txt (Allow/Disallow lines with a path, all groups together) or tdmrep.json (array items with
#: a location); later ones are ignored. A bound on the work of every URL's decision (each is matched against at most
#: this many patterns), far above what sites write by hand.
MAX_RULES = 10_000
#: Characters of a normalised pattern: a longer rule is ignored. Google's robots.txt parser truncates lines at
#: 2083 * 8 bytes (`kMaxLineLen` in google/robotstxt robots.cc: eight times the longest URL browsers accept); we drop
#: such a rule instead of truncating it, since a truncated Allow would allow more than it says.
MAX_PATTERN_CHARS = 2083 * 8
#: Nesting depth of a tdmrep.json (a valid one is 2: an array of flat objects); deeper is not parsed (no rules).
MAX_JSON_DEPTH = 32
#: Characters a URL's decision may compare, per file, counted as the worst case: each rule tried costs its pattern's
#: length, plus the path's when it has a `*` (a search through the path). Past it the URL is refused (fail closed).
#: About 20 ms of matching at most; 10,000 wildcard rules of 20 characters against a 390-character path fit.
MAX_MATCH_WORK = 1 << 22
#: Characters of a URL's normalised path and query that are matched against rules with a `*` (the downloader's URLs
#: are at most 8,192 characters, but normalising escapes `*` and `$`, three characters each); a longer one is refused
#: (fail closed) where a rule with a `*` applies, and matched as usual against rules without one.
MAX_TARGET_CHARS = MAX_URL_CHARS
#: A decision whose worst case is at most this many characters runs on the event loop (well under a millisecond);
#: a costlier one runs in a thread, so that one site's rules never stall the other downloads.
INLINE_MATCH_WORK = 1 << 16
#: ... and whose path is at most this long (normalising it is a Python loop, a few hundred microseconds at this length).
INLINE_PATH_CHARS = 1024
#: Pieces up to this long are searched with `str.find` (at worst `_SHORT_PIECE` comparisons per path character);
#: longer ones with a compiled literal (see `_searcher`).
_SHORT_PIECE = 8
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_UNREACHABLE = "unreachable (fail closed)"


class OptOutPolicy(BaseModel):
    """Which opt-out signals refuse an image (`error: opted_out`), and what an unreachable robots.txt means."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    x_robots_tag: bool = Field(default=True, description="Refuse a response whose X-Robots-Tag forbids us.")
    x_robots_directives: list[str] = Field(
        default_factory=lambda: ["noai", "noimageai", "none", "noindex"],
        min_length=1,
        description="X-Robots-Tag directives that refuse an image (case-insensitive).",
    )
    tdm_reservation: bool = Field(default=True, description="Refuse a response with the `tdm-reservation: 1` header.")
    tdmrep_json: bool = Field(
        default=True, description="Refuse URLs reserved by the origin's /.well-known/tdmrep.json (TDMRep)."
    )
    robots_txt: bool = Field(default=True, description="Refuse URLs the origin's robots.txt disallows for our agent.")
    unreachable_policy: Literal["open", "closed"] = Field(
        default="open",
        description=(
            "When robots.txt or tdmrep.json cannot be fetched (network error, 5xx, 429): 'open' downloads anyway, "
            "'closed' refuses every URL of that origin (RFC 9309's reading of a 5xx). A 4xx (404) means no rules."
        ),
    )
    agent_name: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_-]+$",
        description=(
            "Our product token, matched against robots.txt User-agent lines and X-Robots-Tag prefixes; by default "
            "the first token of the downloader's user_agent."
        ),
    )

    @field_validator("x_robots_directives")
    @classmethod
    def _lower(cls, value: list[str]) -> list[str]:
        directives = [d.strip().lower() for d in value]
        if not all(directives):
            raise ValueError("empty directive")
        return directives

    @property
    def fetches_host_files(self) -> bool:
        return self.robots_txt or self.tdmrep_json


def product_token(user_agent: str) -> str:
    """`culturebench/0.1 (+...)` -> `culturebench`: the name robots.txt and X-Robots-Tag address us by."""
    match = re.match(r"[A-Za-z_-]+", user_agent.strip())
    return match.group(0).lower() if match else DEFAULT_AGENT


def is_unreachable_refusal(detail: str | None) -> bool:
    """A refusal because a site file could not be fetched under fail-closed (worth deciding again later)."""
    return detail is not None and _UNREACHABLE in detail


# -- X-Robots-Tag and the TDMRep header ------------------------------------------------------------------------------

# Directives that carry a value after a colon: never crawler names.
_VALUED_DIRECTIVES = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
_ADDRESSED = re.compile(r"^([A-Za-z0-9_.*-]+)\s*:\s*(.*)$", re.S)


def x_robots_refusal(values: Iterable[str], agent: str, directives: Iterable[str]) -> str | None:
    """The refusing directive of these X-Robots-Tag header values, as a row detail, or None."""
    refusing = {d.lower() for d in directives}
    me = agent.lower()
    for value in values:
        addressee: str | None = None  # None: every crawler; a `name:` prefix holds for the rest of this value
        for item in value.split(","):
            item = item.strip()
            addressed = _ADDRESSED.match(item)
            if addressed and addressed.group(1).lower() not in _VALUED_DIRECTIVES:
                addressee, item = addressed.group(1).lower(), addressed.group(2).strip()
            directive = item.split(":", 1)[0].strip().lower()
            if directive not in refusing or addressee not in (None, me, "*"):
                continue
            return f"X-Robots-Tag: {directive}" if addressee is None else f"X-Robots-Tag: {addressee}: {directive}"
    return None


def tdm_header_refusal(values: Iterable[str], policy: str | None = None) -> str | None:
    """`tdm-reservation: 1` among these header values, as a row detail, or None (0, absent or invalid: unset)."""
    if any(v.strip() == "1" for v in values):
        return "tdm-reservation: 1 (header)" + (f", tdm-policy {policy.strip()}" if policy else "")
    return None


# -- paths and patterns (robots.txt, TDMRep locations) -----------------------------------------------------------

_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_KEEP = "!#$&'()*+,/:;=?@[]~%"  # reserved characters and existing escapes stay as they are


def _unescape_unreserved(value: str) -> str:
    def fix(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    return _ESCAPE.sub(fix, value)


def _quote(value: str, safe: str) -> str:
    out = []
    for char in value:
        if char in safe or char in _UNRESERVED:
            out.append(char)
        else:
            # surrogatepass: a lone surrogate (a JSON "\\ud800" escape) is encoded, not a UnicodeEncodeError.
            out.extend(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))
    return "".join(out)


def normalize_pattern(pattern: str) -> str:
    """A rule's path pattern in canonical percent-encoding; `*` and `$` stay special."""
    return _unescape_unreserved(_quote(pattern.strip(), _KEEP))


def normalize_target(path_qs: str) -> str:
    """A URL's path (and query) in the same encoding; a literal `*` or `$` is escaped so a pattern cannot misread it."""
    return _unescape_unreserved(_quote(path_qs or "/", _KEEP.replace("*", "").replace("$", "")))


_Search = Callable[[str, int], int]  # (target, start) -> the leftmost index of a piece at or after start, or -1


def _searcher(piece: str) -> _Search:
    """A linear-time search for `piece`. `str.find` is O(target x piece) at worst for a piece under 100 characters
    (CPython's fastsearch falls back to its two-way algorithm only for longer ones), so it is kept for short pieces
    (at most `_SHORT_PIECE` comparisons per character). A longer piece is a compiled literal: `re` searches a
    pattern that is one literal by its prefix table (Knuth-Morris-Pratt), linear whatever the piece and target."""
    if len(piece) <= _SHORT_PIECE:
        return lambda target, start: target.find(piece, start)
    literal = re.compile(re.escape(piece))

    def search(target: str, start: int) -> int:
        found = literal.search(target, start)
        return -1 if found is None else found.start()

    return search


@dataclass(frozen=True, slots=True)
class PathPattern:
    """A normalised robots.txt/TDMRep pattern, matched as a prefix of a normalised target in linear time.

    `*` is any run of characters and a final `$` the end of the target, nothing else is special. Such a pattern is
    its literal pieces (between the `*`s) in order: the first must be a prefix of the target, every other one found
    after the one before it. Taking the leftmost occurrence of each is always optimal (it leaves the most room for the
    rest), so there is no backtracking: one linear search per piece (`_searcher`). With `$`, the last piece must also
    end the target, after what the others consumed.
    """

    pieces: tuple[str, ...]  # at least one; every piece but the first and the last non-empty
    anchored: bool
    _chars: int = field(init=False, repr=False, compare=False)
    # Built at the first use (`prepare`): compiling a long piece costs about 1 us a character, so a rule that no
    # decision tries (`MatchPlan` leaves some out) costs nothing.
    _searches: tuple[_Search, ...] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_chars", sum(map(len, self.pieces)))

    def prepare(self) -> tuple[_Search, ...]:
        """One search per piece after the first, but an anchored last one (checked with endswith). Two threads may
        build them at once: they build the same."""
        searches = self._searches
        if searches is None:
            searched = self.pieces[1:-1] if self.anchored else self.pieces[1:]
            searches = tuple(_searcher(piece) for piece in searched)
            object.__setattr__(self, "_searches", searches)
        return searches

    def work(self, target_chars: int) -> int:
        """The most characters `match` compares for a target this long (up to the searches' constant factor)."""
        return self._chars + (target_chars if len(self.pieces) > 1 else 0)

    def match(self, target: str) -> bool:
        pieces = self.pieces
        first = pieces[0]
        if len(pieces) == 1:
            return target == first if self.anchored else target.startswith(first)
        if not target.startswith(first):
            return False
        pos = len(first)
        # Not strict: an anchored last piece has no search (it is checked below).
        for search, piece in zip(self.prepare(), pieces[1:], strict=False):
            found = search(target, pos)
            if found < 0:
                return False
            pos = found + len(piece)
        if self.anchored:
            last = pieces[-1]
            return len(target) - pos >= len(last) and target.endswith(last)
        return True


class _Matched(Protocol):
    @property
    def matcher(self) -> PathPattern: ...


R = TypeVar("R", bound=_Matched)


@dataclass(frozen=True, slots=True)
class MatchPlan(Generic[R]):
    """The rules a URL's decision tries, in order, and what trying them may cost (`PathPattern.work` summed).

    The first matching rule decides, so the rules after the last one that would refuse are left out: if none before
    matches, the answer is "allowed" whatever they say. A file of Allow rules only costs nothing to decide."""

    rules: tuple[R, ...]
    total: int  # the rules that apply, those left out included (for a refusal's detail)
    searching: int  # tried rules with a `*`: each may scan the whole path
    chars: int  # the characters of the tried rules' patterns

    @classmethod
    def of(cls, rules: Sequence[R], refuses: Callable[[R], bool]) -> MatchPlan[R]:
        last = max((i for i, rule in enumerate(rules) if refuses(rule)), default=-1)
        tried = tuple(rules[: last + 1])
        matchers = [rule.matcher for rule in tried]
        for matcher in matchers:
            matcher.prepare()  # here (in a thread, for the downloader) rather than at a URL's decision
        return cls(tried, len(rules), sum(len(m.pieces) > 1 for m in matchers), sum(m.work(0) for m in matchers))

    def bound(self, target_chars: int) -> int:
        """The most characters deciding a path this long may compare (up to the searches' constant factor)."""
        return self.searching * target_chars + self.chars

    def first_match(self, path_qs: str, what: str, whose: str = "") -> tuple[R | None, str | None]:
        """The first rule matching `path_qs` (normalised here), or None; or a refusal (fail closed, `what` naming
        the file and `whose` its rules) when the path is too long for rules with a `*`, or when `MAX_MATCH_WORK` ran
        out before a rule matched."""
        if not self.rules:
            return None, None
        # An absurdly long path is not even normalised.
        target = path_qs if self.searching and len(path_qs) > MAX_TARGET_CHARS else normalize_target(path_qs)
        if self.searching and len(target) > MAX_TARGET_CHARS:
            return None, (
                f"{what}: not matched, the path has {len(target):,} characters, more than the {MAX_TARGET_CHARS:,} "
                f"matched against rules{whose} with a `*` (refused: fail closed)"
            )
        left = MAX_MATCH_WORK
        chars = len(target)
        for rule in self.rules:
            left -= rule.matcher.work(chars)
            if left < 0:
                return None, (
                    f"{what}: not matched, {self.total:,} rules{whose} against a path of {chars:,} characters cost "
                    f"more than the {MAX_MATCH_WORK:,} characters of matching allowed per URL (refused: fail closed)"
                )
            if rule.matcher.match(target):
                return rule, None
        return None, None


def compile_pattern(pattern: str) -> PathPattern:
    """A normalised pattern as a prefix matcher: `*` any run of characters, a final `$` the end of the path."""
    anchored = pattern.endswith("$")
    pieces = (pattern[:-1] if anchored else pattern).split("*")
    if len(pieces) > 2:  # `**` is `*`: empty middle pieces match anywhere
        pieces = [pieces[0], *(p for p in pieces[1:-1] if p), pieces[-1]]
    return PathPattern(tuple(pieces), anchored)


def _bounded_text(text: str) -> str:
    """The first `MAX_FILE_BYTES` characters of a site file, cut after its last whole line (as RFC 9309's 500 KiB
    minimum allows); a leading byte-order mark dropped."""
    text = text.removeprefix("\ufeff")
    if len(text) <= MAX_FILE_BYTES:
        return text
    text = text[:MAX_FILE_BYTES]
    cut = max(text.rfind("\n"), text.rfind("\r"))
    return text[: cut + 1] if cut >= 0 else ""


# -- robots.txt (RFC 9309) ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RobotsRule:
    allow: bool
    pattern: str  # normalised
    matcher: PathPattern


@dataclass(frozen=True)
class RobotsGroup:
    agents: tuple[str, ...]  # lower-case product tokens, or "*"
    rules: tuple[RobotsRule, ...]


@dataclass(frozen=True)
class RobotsTxt:
    groups: tuple[RobotsGroup, ...] = ()
    _rules: dict[str, tuple[tuple[RobotsRule, ...] | None, MatchPlan[RobotsRule]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def rules_for(self, agent: str) -> tuple[RobotsRule, ...] | None:
        """The rules of every group naming `agent` (a lower-case token or `*`), the best first (longest pattern, Allow
        before Disallow, then in file order), or None when no group names it. Worked out once per agent, so that a
        URL's decision neither scans every group nor sorts; not for every agent at parse time, since a file of many
        User-agent lines over many rules would make that agents x rules."""
        return self._for(agent)[0]

    def _for(self, agent: str) -> tuple[tuple[RobotsRule, ...] | None, MatchPlan[RobotsRule]]:
        # Several threads may fill the same entry at once: they compute the same value.
        if agent not in self._rules:
            groups = [g for g in self.groups if agent in g.agents]
            rules = [r for g in groups for r in g.rules]
            ordered = tuple(sorted(rules, key=lambda r: (-len(r.pattern), not r.allow))) if groups else None
            self._rules[agent] = (ordered, MatchPlan.of(ordered or (), lambda r: not r.allow))
        return self._rules[agent]

    def plan(self, agent: str) -> tuple[str, MatchPlan[RobotsRule]]:
        """How to decide for `agent` (the rules of the groups naming it, else of `*`), with the label a refusal names
        them by."""
        me = agent.lower()
        rules, plan = self._for(me)
        if rules is not None:
            return me, plan
        return "*", self._for("*")[1]


def _agent_of(value: str) -> str:
    """`Googlebot/2.1` -> `googlebot`: the product token of a User-agent line."""
    token = value.strip().split("/", 1)[0].strip().split()
    return token[0].lower() if token else ""


def parse_robots(text: str) -> RobotsTxt:
    """The groups of a robots.txt; never raises. Lines it cannot read are ignored (RFC 9309 2.2), and so are the text
    past `MAX_FILE_BYTES`, the rules past the `MAX_RULES`th and those longer than `MAX_PATTERN_CHARS`."""
    groups: list[RobotsGroup] = []
    agents: list[str] = []
    rules: list[RobotsRule] = []
    kept = 0
    in_rules = False  # a rule line was seen since the last User-agent line: the next one starts a group
    for raw in _bounded_text(text).splitlines():
        line = raw.split("#", 1)[0].strip()
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key in ("user-agent", "useragent", "user agent"):
            if in_rules:
                groups.append(RobotsGroup(tuple(agents), tuple(rules)))
                agents, rules, in_rules = [], [], False
            if _agent_of(value):
                agents.append(_agent_of(value))
        elif key in ("allow", "disallow"):
            if not agents:
                continue  # a rule before any User-agent line belongs to no group
            in_rules = True
            if value and kept < MAX_RULES:  # an empty Disallow (or Allow) matches nothing
                pattern = normalize_pattern(value)
                if len(pattern) <= MAX_PATTERN_CHARS:
                    rules.append(RobotsRule(key == "allow", pattern, compile_pattern(pattern)))
                    kept += 1
        # Sitemap, Crawl-delay and unknown lines neither end a group nor matter here.
    if agents:
        groups.append(RobotsGroup(tuple(agents), tuple(rules)))
    return RobotsTxt(tuple(groups))


def robots_refusal(robots: RobotsTxt, agent: str, path_qs: str) -> str | None:
    """The Disallow rule that refuses `path_qs` (a URL's raw path and query) to `agent`, as a row detail, or None.
    A path too long, or rules too costly to match against it, refuse it (see `MAX_MATCH_WORK`)."""
    label, plan = robots.plan(agent)
    # The longest pattern wins; of two as long, Allow (`rules_for` has them best first).
    best, refusal = plan.first_match(path_qs, "robots.txt", f" for {label}")
    if refusal is not None:
        return refusal
    if best is None or best.allow:
        return None
    return f"robots.txt: Disallow {best.pattern} for {label}"


# -- /.well-known/tdmrep.json ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TdmRule:
    location: str  # as written
    reservation: int | None  # 0, 1, or None for a protocol error (unset)
    policy: str | None
    matcher: PathPattern


_JSON_MARK = re.compile(r'[\[\]{}"]')
_JSON_STRING_REST = re.compile(r'(?:[^"\\]|\\.)*+"', re.S)  # possessive: one pass, no backtracking


def _json_depth_within(text: str, limit: int) -> bool:
    """Whether no array or object of this JSON text is nested deeper than `limit` (brackets inside strings do not
    count); False also for an unterminated string, which is no JSON. One pass, no recursion: `json.loads` recurses
    once per level, and a file of `[[[[...` would exhaust the stack."""
    depth = 0
    pos = 0
    while mark := _JSON_MARK.search(text, pos):
        pos = mark.end()
        char = mark.group()
        if char == '"':
            rest = _JSON_STRING_REST.match(text, pos)
            if rest is None:
                return False
            pos = rest.end()
        elif char in "[{":
            depth += 1
            if depth > limit:
                return False
        else:
            depth -= 1
            if depth < 0:
                return False  # a `]` or `}` closing nothing: no JSON either
    return True


def parse_tdmrep(text: str) -> tuple[TdmRule, ...]:
    """The rules of a tdmrep.json; none when it is not a JSON array (the origin does not use TDMRep), nor when it is
    longer than `MAX_FILE_BYTES` characters or nested deeper than `MAX_JSON_DEPTH`. Never raises. Keeps the first
    `MAX_RULES` rules, ignoring those whose location is longer than `MAX_PATTERN_CHARS`."""
    text = text.removeprefix("\ufeff")
    if len(text) > MAX_FILE_BYTES or not _json_depth_within(text, MAX_JSON_DEPTH):
        return ()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: a backstop, MAX_JSON_DEPTH is far below the stack's limit
        return ()
    if not isinstance(data, list):
        return ()
    rules: list[TdmRule] = []
    for item in data:
        if len(rules) >= MAX_RULES:
            break
        if not isinstance(item, dict) or not isinstance(item.get("location"), str):
            continue
        location = item["location"].strip()
        path = location.split("://", 1)[1].partition("/")[2] if "://" in location else location
        pattern = normalize_pattern(path if path.startswith(("/", "*")) else "/" + path)
        if len(pattern) > MAX_PATTERN_CHARS:
            continue
        value = item.get("tdm-reservation")
        reservation = None
        if value is not None and not isinstance(value, bool) and value in (0, 1, "0", "1"):
            reservation = int(value)
        policy = item.get("tdm-policy") if isinstance(item.get("tdm-policy"), str) else None
        rules.append(TdmRule(location, reservation, policy, compile_pattern(pattern)))
    return tuple(rules)


def tdmrep_plan(rules: Sequence[TdmRule]) -> MatchPlan[TdmRule]:
    return MatchPlan.of(rules, lambda rule: rule.reservation == 1)


def tdmrep_refusal(rules: Sequence[TdmRule] | MatchPlan[TdmRule], path_qs: str) -> str | None:
    """The reserved location that refuses `path_qs`, as a row detail, or None: the first matching rule decides. A path
    too long, or rules too costly to match against it, refuse it (see `MAX_MATCH_WORK`). `rules` may be their
    `tdmrep_plan`, kept by a caller that decides many URLs (making one is a pass over every rule)."""
    plan = rules if isinstance(rules, MatchPlan) else tdmrep_plan(rules)
    rule, refusal = plan.first_match(path_qs, "tdmrep.json")
    if refusal is not None:
        return refusal
    if rule is None or rule.reservation != 1:
        return None
    policy = f" (tdm-policy {rule.policy})" if rule.policy else ""
    return f"tdmrep.json: location {rule.location} reserved{policy}"


# -- fetching the site files -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostFile:
    """A robots.txt or tdmrep.json as fetched: `ok` with its text, `absent` (4xx, too many redirects: no rules),
    or `unreachable` (network error, 5xx, 429: decided by `unreachable_policy`)."""

    status: Literal["ok", "absent", "unreachable"]
    text: str = ""
    reason: str = ""


async def fetch_host_file(
    session: aiohttp.ClientSession,
    url: URL,
    policy: AddressPolicy,
    max_redirects: int,
    timeout_s: float,
    max_bytes: int = MAX_FILE_BYTES,
) -> HostFile:
    """GET one site file, every hop through the SSRF guard; never raises for a network failure."""
    current = url
    try:
        async with asyncio.timeout(timeout_s):
            for _ in range(max_redirects + 1):
                current = check_url(current, policy)
                async with session.get(current, allow_redirects=False) as resp:
                    status = resp.status
                    if status in _REDIRECTS and resp.headers.get("Location"):
                        current = current.join(URL(resp.headers["Location"]))
                        continue
                    if status == 429 or status >= 500:
                        return HostFile("unreachable", reason=f"HTTP {status}")
                    if 400 <= status < 500:
                        return HostFile("absent", reason=f"HTTP {status}")
                    if not 200 <= status < 300:
                        return HostFile("unreachable", reason=f"HTTP {status}")
                    body = await _read_capped(resp, max_bytes)
                    return HostFile("ok", text=body.decode("utf-8-sig", "replace"))
            return HostFile("absent", reason=f"more than {max_redirects} redirects")
    except UrlRefused as exc:
        return HostFile("unreachable", reason=f"{exc.error}: {exc.detail}")
    except TimeoutError:
        return HostFile("unreachable", reason=f"timed out after {timeout_s:g} s")
    except aiohttp.ClientConnectorError as exc:
        return HostFile("unreachable", reason=f"cannot connect to {current.host}: {exc.os_error}")
    except (aiohttp.ClientError, OSError, ValueError, zlib.error) as exc:
        return HostFile("unreachable", reason=f"{type(exc).__name__}: {str(exc)[:200]}")


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """At most `max_bytes` of the body (the rest is ignored), inflated by hand when the server compressed it."""
    raw = bytearray()
    async for chunk in resp.content.iter_chunked(64 * 1024):
        raw += chunk
        if len(raw) >= max_bytes:
            resp.close()
            break
    encoding = resp.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return bytes(raw[:max_bytes])
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise ValueError(f"Content-Encoding {encoding!r} (we asked for identity)")
    wbits = 32 + zlib.MAX_WBITS if encoding != "deflate" or (raw and raw[0] & 0x0F == 8) else -zlib.MAX_WBITS
    return zlib.decompressobj(wbits).decompress(bytes(raw), max_bytes)


class HostFileCache:
    """Loaded site files by key (`robots.txt http://host:port`), one load in flight per key.

    Shared by every download call of a run, which may run on several event loops in several threads (shards): the
    first caller loads, the others wait on a `concurrent.futures.Future`. An owner cancelled mid-load hands the
    key back (a None result) and a waiter loads it instead.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, concurrent.futures.Future[Any]] = {}

    async def get(self, key: str, load: Callable[[], Awaitable[T]]) -> T:
        while True:
            with self._lock:
                future = self._entries.get(key)
                owner = future is None
                if owner:
                    future = self._entries[key] = concurrent.futures.Future()
            assert future is not None
            if not owner:
                result = await asyncio.shield(asyncio.wrap_future(future))
                if result is None:
                    continue  # its owner was cancelled: try again
                loaded: T = result[0]
                return loaded
            try:
                value = await load()
            except BaseException:
                with self._lock:
                    del self._entries[key]
                future.set_result(None)
                raise
            future.set_result((value,))
            return value


@dataclass(frozen=True)
class _Loaded:
    value: Any  # RobotsTxt | MatchPlan[TdmRule]
    unreachable: str | None = None  # the reason, when the file could not be fetched


def _parse_tdmrep_plan(text: str) -> MatchPlan[TdmRule]:
    """A tdmrep.json as the plan of its decisions, made once per file rather than at every URL."""
    return tdmrep_plan(parse_tdmrep(text))


class _Headers(Protocol):
    """What `after_response` reads of a response's headers (aiohttp's multidict)."""

    def getall(self, key: str, default: list[str], /) -> list[str]: ...

    def get(self, key: str, /) -> str | None: ...


class OptOutChecker:
    """The opt-out decisions of one download call; `fetch` GETs a site file (see `fetch_host_file`)."""

    def __init__(
        self,
        policy: OptOutPolicy,
        agent: str,
        cache: HostFileCache,
        fetch: Callable[[URL], Awaitable[HostFile]] | None,
    ) -> None:
        self.policy = policy
        self.agent = agent
        self.cache = cache
        self.fetch = fetch

    async def before_request(self, url: URL) -> str | None:
        """Why robots.txt or tdmrep.json refuses `url` (a row detail), or None; loads them at the first URL of an
        origin. Call it holding no download slot."""
        policy = self.policy
        if not policy.fetches_host_files or self.fetch is None:
            return None
        origin = url.origin()
        target = url.raw_path_qs
        if policy.robots_txt:
            robots = await self._load(origin, ROBOTS_PATH, self._parse_robots)
            if robots.unreachable is not None:
                if policy.unreachable_policy == "closed":
                    return f"robots.txt {_UNREACHABLE}: {robots.unreachable}"
            else:
                plan = robots.value.plan(self.agent)[1]
                if refusal := await _decide(plan, target, robots_refusal, robots.value, self.agent, target):
                    return refusal
        if policy.tdmrep_json:
            tdm = await self._load(origin, TDMREP_PATH, _parse_tdmrep_plan)
            if tdm.unreachable is not None:
                if policy.unreachable_policy == "closed":
                    return f"tdmrep.json {_UNREACHABLE}: {tdm.unreachable}"
            elif refusal := await _decide(tdm.value, target, tdmrep_refusal, tdm.value, target):
                return refusal
        return None

    def after_response(self, headers: _Headers) -> str | None:
        """Why the response's headers refuse the image (a row detail), or None; before its body is read."""
        policy = self.policy
        if policy.x_robots_tag:
            refusal = x_robots_refusal(headers.getall("X-Robots-Tag", []), self.agent, policy.x_robots_directives)
            if refusal:
                return refusal
        if policy.tdm_reservation:
            return tdm_header_refusal(headers.getall("tdm-reservation", []), headers.get("tdm-policy"))
        return None

    def _parse_robots(self, text: str) -> RobotsTxt:
        robots = parse_robots(text)
        robots.plan(self.agent)  # sorted and prepared in the loading thread, not at the first URL's decision
        return robots

    async def _load(self, origin: URL, path: str, parse: Callable[[str], Any]) -> _Loaded:
        fetch = self.fetch
        assert fetch is not None

        async def load() -> _Loaded:
            got = await fetch(origin.with_path(path))
            if got.status == "unreachable":
                return _Loaded(parse(""), got.reason)
            # Bounded (under a second for a file at every cap, most of it compiling long wildcard pieces: see
            # `_searcher`), but off the event loop all the same.
            return _Loaded(await asyncio.to_thread(parse, got.text))  # absent: no rules

        return await self.cache.get(f"{path} {origin}", load)


async def _decide(plan: MatchPlan[Any], path_qs: str, refusal: Callable[..., str | None], *args: Any) -> str | None:
    """`refusal(*args)`, on the event loop when its worst case is cheap, else in a thread: a site's rules and the paths
    its redirects choose can cost up to `MAX_MATCH_WORK` per URL, which must not stall every other download."""
    # Normalising a path costs about 0.3 us a character (a Python loop), so a long path goes to a thread whatever
    # the rules; 3x: normalising can escape a character of the raw path into three.
    cheap = len(path_qs) <= INLINE_PATH_CHARS and plan.bound(3 * len(path_qs)) <= INLINE_MATCH_WORK
    return refusal(*args) if cheap else await asyncio.to_thread(refusal, *args)
