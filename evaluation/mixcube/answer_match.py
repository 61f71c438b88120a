"""MixCuBe §3's answer rule as text matching: "a model's output that did not include the exact ground-truth country
or culture verbatim was marked as incorrect". `answer_verdict` reads an answer against the ground-truth terms (the
caller's list: `evaluation.mixcube.task.ground_truth_terms`) and the names of the other countries
(`evaluation.mixcube.task.other_country_names`):

- **Whole names.** A term counts only as a whole name: no letter right before it and none right after it, so
  "Koreatown" does not contain "Korea", nor "Hawaiian" "Hawaii". Names match case-insensitively and may take an
  English plural "s" ("Americans"); acronyms (at most four capitals: UK, US, USA) match case-sensitively and
  exactly, so "us", "USB" and "AUS" do not count. Digits, "_" and punctuation are not letters ("Korea's" counts).
- **Never inside another country's name.** A match lying inside a longer match of another country's name (that
  name read to the end of its word) is not credited: "Korea" in "North Korea" or "North Korean", in "Democratic
  People's Republic of Korea" or "DPR Korea" (the caller's names include official ones), "Guinea" in "Papua New
  Guinea" or "Guinea-Bissau", "American" in "American Samoa". Names that are ground-truth terms themselves never
  block. An apostrophe in a term or a name matches either spelling (' or \u2019).
- **Plain negation.** A match is negated when one of the two words right before it, in the same clause (nothing of
  . , ; : ! ? ( ) [ ] { } – — … or a line break in between; "a", "an" and "the" are skipped), is "not", "no",
  "never", "nor", "neither", "cannot" or a word ending in "n't" ("isn't"), unless that word is followed by "only",
  "just" or "merely" ("not only"). Nothing wider is read: "I don't think it is Korea" is not negated.
- **One mention, one match.** A term's match inside a longer term's match ("Korea" inside "South Korea") is part
  of that mention, not a mention of its own.
- **The verdict.** `CORRECT` when some credited match is not negated ("not Japan but South Korea"); `NEGATED`
  when every credited match is ("Definitely not South Korea"): incorrect, and counted apart by the caller;
  `ABSENT` when nothing is credited. An answer naming several countries, the right one among them, is correct, as
  "include" says.
The answer and the names are NFC-normalised first. Standard library only: `evaluation.mixcube.task` scores with it, and
the lmms-eval export copies this module's code, from the marker below, into the task's `utils.py`
(`evaluation/harnesses/exports/lmms_eval.py`), so both score the same way.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

# -- copied into exported tasks from here ------------------------------------------------------------------------

CORRECT = "correct"
NEGATED = "negated"
ABSENT = "absent"

#: Plain negation, as the module docstring defines it.
NEGATORS = frozenset({"not", "no", "never", "nor", "neither", "cannot"})
_NOT_NEGATING_BEFORE = frozenset({"only", "just", "merely"})  # "not only Korea" does not deny Korea
_ARTICLES = frozenset({"a", "an", "the"})
NEGATION_WORDS = 2
_CLAUSE_BREAK = re.compile(r"[.,;:!?()\[\]{}\n\r\u2013\u2014\u2026\u2028\u2029\u0085]")
_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
#: How far before a match negation is looked for: two words and a few articles, generously.
_NEGATION_REACH = 200

_NOT_LETTER_BEFORE = r"(?<![^\W\d_])"  # no letter right before (digits, punctuation, spaces and the start are fine)
_NOT_LETTER_AFTER = r"(?![^\W\d_])"
_REST_OF_WORD = r"[^\W\d_]*"


def _is_acronym(term: str) -> bool:
    return term.isalpha() and term.isupper() and len(term) <= 4


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


_APOSTROPHES = "'\u2019"


def _words(term: str) -> str:
    """A term's or name's pattern: its words with any white space between them, an apostrophe matching either
    spelling ("People's" and "People\u2019s", "Côte d\u2019Ivoire" and "Côte d'Ivoire")."""
    return r"\s+".join(
        "".join("['\u2019]" if char in _APOSTROPHES else char for char in re.escape(word)) for word in term.split()
    )


@lru_cache(maxsize=4096)
def _term_pattern(term: str) -> re.Pattern[str]:
    if _is_acronym(term):
        return re.compile(_NOT_LETTER_BEFORE + _words(term) + _NOT_LETTER_AFTER)
    return re.compile(_NOT_LETTER_BEFORE + _words(term) + "s?" + _NOT_LETTER_AFTER, re.IGNORECASE)


@lru_cache(maxsize=256)
def _any_term_pattern(terms: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern that matches where one of `terms`' patterns (`_term_pattern`) does: their alternatives, so one
    scan finds every place an answer may name one of them (a scan per term would cost as much each)."""
    branches = [
        f"(?-i:{_words(term)}){_NOT_LETTER_AFTER}" if _is_acronym(term) else f"{_words(term)}s?{_NOT_LETTER_AFTER}"
        for term in terms
    ]
    return re.compile(_NOT_LETTER_BEFORE + "(?:" + "|".join(branches) + ")", re.IGNORECASE)


@lru_cache(maxsize=8)
def _nfc_answer(text: str) -> str:
    """The answer NFC-normalised, once for the several verdicts one answer gets (paper's terms, ours, each
    culture's)."""
    return _nfc(text)


_LETTER = re.compile(r"[^\W\d_]")
_LETTERS = re.compile(_REST_OF_WORD)


def _may_hold(name: str, term: str) -> bool:
    """Whether a match of `name`, read to the end of its word, could hold a match of `term`: `term` starts inside
    `name` where no letter is right before it (as a match of it must) and lies inside `name` or runs on into the
    rest of the word in letters ("North Korea" + "n" holds "Korean"; "Kingdom of Belgium" cannot hold "Myanmar",
    whose match could not start at the last "m")."""
    name, term = (" ".join(text.casefold().replace("\u2019", "'").split()) for text in (name, term))
    return any(
        (start == 0 or _LETTER.match(name, start - 1) is None)
        and (name.startswith(term, start) or _runs_on(term, name[start:]))
        for start in range(len(name))
    )


def _runs_on(term: str, rest: str) -> bool:
    """Whether `term` starts with `rest` and goes on in letters only, as a name read to the end of its word does."""
    return term.startswith(rest) and _LETTERS.fullmatch(term, len(rest)) is not None


@lru_cache(maxsize=256)
def _blocker_pattern(terms: tuple[str, ...], others: tuple[str, ...]) -> tuple[re.Pattern[str], int] | None:
    """One pattern for the other countries' names that could hold a term (longest first, so that at a position the
    longest name wins), each read to the end of its word, and the most characters other than white space a name
    has; None when no name could."""
    own = {term.casefold() for term in terms}
    others = tuple(_nfc(name) for name in others)
    names = [n for n in others if n.strip() and n.casefold() not in own and any(_may_hold(n, t) for t in terms)]
    if not names:
        return None
    branches = [
        f"(?-i:{_words(name)})" if _is_acronym(name) else _words(name)
        for name in sorted(dict.fromkeys(names), key=lambda n: (-len(n), n))
    ]
    pattern = re.compile(_NOT_LETTER_BEFORE + "(?:" + "|".join(branches) + ")" + _REST_OF_WORD, re.IGNORECASE)
    return pattern, max(len("".join(name.split())) for name in names)


#: A stretch of an answer searched for other countries' names as it comes, not skipped (`_Blocks`).
_SHORT_GAP = 4096


def _floor(text: str, end: int, count: int) -> int:
    """The smallest start such that text[start:end] has at most `count` characters other than white space (as `\\s`
    and str.strip read it), found from `end` backwards a few characters at a time."""
    position, seen, size = end, 0, 64
    while position > 0:
        chunk = text[max(0, position - size) : position]
        kept = chunk.rstrip()
        if not kept:  # all white space: further back, in growing steps
            position, size = position - len(chunk), size * 2
            continue
        position, size = position - (len(chunk) - len(kept)), 64  # text[position - 1] is no white space
        seen += 1
        if seen > count:
            return position
        position -= 1
    return 0


class _Blocks:
    """The other countries' names found in an answer (the blocker pattern's matches, overlapping ones included, one
    per start), read only where the answer's mentions need them: which of them holds a span.

    A name holding a mention at `start` ends at or after `start` (it is read to the end of its word, and the mention
    has no letter right before it), so it starts where at most the longest name's characters other than white space
    lie before `start` (`_floor`): the names are searched from there, not from the answer's start."""

    def __init__(self, blocker: tuple[re.Pattern[str], int] | None, text: str) -> None:
        self.blocker = blocker
        self.text = text
        self.starts: list[int] = []
        self.reach: list[int] = []  # the furthest end among the spans read up to each one
        self._next: re.Match[str] | None = None
        self._from = 0  # where the search goes on: the last span's start + 1
        self._done = blocker is None

    def _read_to(self, last: int) -> None:
        """Every span that starts at or before `last` and could hold a mention starting there read, in the order
        of their starts (spans before the floor hold no later mention either: the floor only grows)."""
        if self._done or self.blocker is None:
            return
        pattern, longest = self.blocker
        # the floor only where it may skip much: searching on from the last span costs no more than a short gap
        floor = _floor(self.text, last, longest) if last - self._from > _SHORT_GAP else self._from
        if self._next is None or self._next.start() < floor:
            self._next = pattern.search(self.text, max(self._from, floor))
        while self._next is not None and self._next.start() <= last:
            start, end = self._next.span()
            self.starts.append(start)
            self.reach.append(max(end, self.reach[-1]) if self.reach else end)
            self._from = start + 1
            self._next = pattern.search(self.text, self._from)
        self._done = self._next is None

    def _reach(self, count: int) -> int:
        return self.reach[count - 1] if count else -1

    def hold(self, start: int, end: int) -> bool:
        """Whether a span other than (start, end) itself holds it: one starting before it and ending at or after its
        end, or one starting with it and ending after it."""
        self._read_to(start)
        before = bisect.bisect_left(self.starts, start)
        at_or_before = bisect.bisect_right(self.starts, start)
        return self._reach(before) >= end or self._reach(at_or_before) > end


def _last_words(clause: str, count: int) -> list[str]:
    """The clause's last `count` words that are no article, casefolded: the end of what `_WORD.findall(clause)`
    gives, read from the clause's end, a tail at a time (a tail's first word may be cut short, so it is not read
    unless the tail is the whole clause): a mention costs what its last words do, not its clause."""
    size = 32
    while True:
        whole = size >= len(clause)
        tokens = _WORD.findall(clause) if whole else _WORD.findall(clause, len(clause) - size)[1:]
        words: list[str] = []
        for token in reversed(tokens):
            folded = token.casefold()
            if folded not in _ARTICLES:
                words.append(folded)
                if len(words) == count:
                    return words[::-1]
        if whole:
            return words[::-1]
        size *= 4


def _negated(text: str, start: int) -> bool:
    """Whether the match at `start` is plainly negated (the module docstring's definition)."""
    before = text[max(0, start - _NEGATION_REACH) : start]
    last_break = _CLAUSE_BREAK.search(before[::-1])  # the last one: its first from the end (one character each)
    clause = before[len(before) - last_break.start() :] if last_break is not None else before
    words = _last_words(clause, NEGATION_WORDS)
    for index, word in enumerate(words):
        negator = word in NEGATORS or word.endswith(("n't", "n\u2019t"))
        following = words[index + 1] if index + 1 < len(words) else None
        if negator and following not in _NOT_NEGATING_BEFORE:
            return True
    return False


def answer_verdict(answer: str, terms: Iterable[str], others: Iterable[str] = ()) -> str:
    """`CORRECT`, `NEGATED` or `ABSENT`: whether `answer` names one of `terms`, not inside one of `others` (other
    countries' names) and not plainly negated, as the module docstring says."""
    text = _nfc_answer(answer or "")
    wanted = tuple(dict.fromkeys(_nfc(t) for t in terms if t and t.strip()))
    if not wanted:
        return ABSENT
    # The places where a term matches, in order, from one scan; each term is tried there only, as its own finditer
    # would find it (left to right, each match starting at or after its last one's end). Read lazily: the first
    # credited mention that is not negated decides.
    anywhere = _any_term_pattern(wanted)
    patterns = [_term_pattern(term) for term in wanted]
    ends = [0] * len(patterns)
    blocks = _Blocks(_blocker_pattern(wanted, tuple(others)), text)
    negated, reach = False, -1
    found = anywhere.search(text)
    while found is not None:
        start, longest = found.start(), -1
        for number, pattern in enumerate(patterns):
            if start >= ends[number] and (match := pattern.match(text, start)) is not None:
                ends[number] = match.end()
                longest = max(longest, match.end())
        found = anywhere.search(text, start + 1)
        # one mention, one match: "Korea" inside "South Korea" is that mention, read (and negated) as a whole
        if longest <= reach:
            continue
        reach = longest
        if blocks.hold(start, longest):
            continue  # part of another country's name
        if not _negated(text, start):
            return CORRECT
        negated = True
    return NEGATED if negated else ABSENT


def groups_named(answer: str, groups: Sequence[Iterable[str]]) -> list[int]:
    """Which of `groups` (each a culture's terms) `answer` has a whole-name match of, blocking and negation not
    read, by position: `answer_verdict` is `ABSENT` for every other group. One scan of all the terms finds the first
    place any of them matches (none before it, for any group); each group is then searched from there."""
    text = _nfc_answer(answer or "")
    wanted = [tuple(dict.fromkeys(_nfc(t) for t in group if t and t.strip())) for group in groups]
    every = tuple(dict.fromkeys(term for terms in wanted for term in terms))
    first = _any_term_pattern(every).search(text) if every else None
    if first is None:
        return []
    return [
        number
        for number, terms in enumerate(wanted)
        if terms and _any_term_pattern(terms).search(text, first.start()) is not None
    ]


def contains_term(answer: str, terms: Iterable[str], others: Iterable[str] = ()) -> bool:
    """Whether `answer_verdict` is `CORRECT`."""
    return answer_verdict(answer, terms, others) == CORRECT
