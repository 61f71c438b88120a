"""MixCuBe §3's answer rule as text matching: "a model's output that did not include the exact ground-truth country
or culture verbatim was marked as incorrect". `answer_verdict` reads an answer against the ground-truth terms (the
caller's list: `evaluation.mixcube.ground_truth_terms`) and the names of the other countries
(`evaluation.mixcube.other_country_names`):

- **Whole names.** A term counts only as a whole name: no letter right before it and none right after it, so
  "Koreatown" does not contain "Korea", nor "Hawaiian" "Hawaii". Names match case-insensitively and may take an
  English plural "s" ("Americans"); acronyms (at most four capitals: UK, US, USA) match case-sensitively and
  exactly, so "us", "USB" and "AUS" do not count. Digits, "_" and punctuation are not letters ("Korea's" counts).
- **Never inside another country's name.** A match lying inside a longer match of another country's name (that
  name read to the end of its word) is not credited: "Korea" in "North Korea" or "North Korean", "Guinea" in
  "Papua New Guinea" or "Guinea-Bissau", "American" in "American Samoa". Names that are ground-truth terms
  themselves never block.
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

The answer and the names are NFC-normalised first. Standard library only: `evaluation.mixcube` scores with it, and
the lmms-eval export copies this module's code, from the marker below, into the task's `utils.py`
(`evaluation/exports/lmms_eval.py`), so both score the same way.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterable
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


def _words(term: str) -> str:
    return r"\s+".join(re.escape(word) for word in term.split())


@lru_cache(maxsize=4096)
def _term_pattern(term: str) -> re.Pattern[str]:
    if _is_acronym(term):
        return re.compile(_NOT_LETTER_BEFORE + _words(term) + _NOT_LETTER_AFTER)
    return re.compile(_NOT_LETTER_BEFORE + _words(term) + "s?" + _NOT_LETTER_AFTER, re.IGNORECASE)


def _may_hold(name: str, term: str) -> bool:
    """Whether a match of `name`, read to the end of its word, could hold a match of `term`: `term` lies inside
    `name`, or starts inside it and runs on into the rest of the word ("North Korea" + "n" holds "Korean")."""
    name, term = " ".join(name.casefold().split()), " ".join(term.casefold().split())
    return term in name or any(name.endswith(term[:k]) for k in range(1, len(term)))


@lru_cache(maxsize=256)
def _blocker_pattern(terms: tuple[str, ...], others: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern for the other countries' names that could hold a term (longest first, so that at a position the
    longest name wins), each read to the end of its word; None when no name could."""
    own = {term.casefold() for term in terms}
    others = tuple(_nfc(name) for name in others)
    names = [n for n in others if n.strip() and n.casefold() not in own and any(_may_hold(n, t) for t in terms)]
    if not names:
        return None
    branches = [
        f"(?-i:{_words(name)})" if _is_acronym(name) else _words(name)
        for name in sorted(dict.fromkeys(names), key=lambda n: (-len(n), n))
    ]
    return re.compile(_NOT_LETTER_BEFORE + "(?:" + "|".join(branches) + ")" + _REST_OF_WORD, re.IGNORECASE)


def _spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    """Every match of `pattern`, overlapping ones included (one per start)."""
    spans = []
    position = 0
    while (found := pattern.search(text, position)) is not None:
        spans.append(found.span())
        position = found.start() + 1
    return spans


class _Blocks:
    """The other countries' names found in an answer: which of them holds a span."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        spans = sorted(spans)
        self.starts = [start for start, _ in spans]
        self.reach: list[int] = []  # the furthest end among the spans up to each one
        for _, end in spans:
            self.reach.append(max(end, self.reach[-1]) if self.reach else end)

    def _reach(self, count: int) -> int:
        return self.reach[count - 1] if count else -1

    def hold(self, start: int, end: int) -> bool:
        """Whether a span other than (start, end) itself holds it: one starting before it and ending at or after its
        end, or one starting with it and ending after it."""
        before = bisect.bisect_left(self.starts, start)
        at_or_before = bisect.bisect_right(self.starts, start)
        return self._reach(before) >= end or self._reach(at_or_before) > end


def _negated(text: str, start: int) -> bool:
    """Whether the match at `start` is plainly negated (the module docstring's definition)."""
    before = text[max(0, start - _NEGATION_REACH) : start]
    breaks = [found.end() for found in _CLAUSE_BREAK.finditer(before)]
    clause = before[breaks[-1] :] if breaks else before
    words = [w.casefold() for w in _WORD.findall(clause) if w.casefold() not in _ARTICLES][-NEGATION_WORDS:]
    for index, word in enumerate(words):
        negator = word in NEGATORS or word.endswith(("n't", "n\u2019t"))
        following = words[index + 1] if index + 1 < len(words) else None
        if negator and following not in _NOT_NEGATING_BEFORE:
            return True
    return False


def answer_verdict(answer: str, terms: Iterable[str], others: Iterable[str] = ()) -> str:
    """`CORRECT`, `NEGATED` or `ABSENT`: whether `answer` names one of `terms`, not inside one of `others` (other
    countries' names) and not plainly negated, as the module docstring says."""
    text = _nfc(answer or "")
    wanted = tuple(dict.fromkeys(_nfc(t) for t in terms if t and t.strip()))
    found = {span for term in wanted for span in (m.span() for m in _term_pattern(term).finditer(text))}
    if not found:
        return ABSENT
    # one mention, one match: "Korea" inside "South Korea" is that mention, read (and negated) as a whole
    matches, reach = [], -1
    for start, end in sorted(found, key=lambda span: (span[0], -span[1])):
        if end > reach:
            matches.append((start, end))
            reach = end
    blocker = _blocker_pattern(wanted, tuple(others))
    blocks = _Blocks(_spans(blocker, text) if blocker is not None else [])
    negated = False
    for start, end in matches:
        if blocks.hold(start, end):
            continue  # part of another country's name
        if not _negated(text, start):
            return CORRECT
        negated = True
    return NEGATED if negated else ABSENT


def contains_term(answer: str, terms: Iterable[str], others: Iterable[str] = ()) -> bool:
    """Whether `answer_verdict` is `CORRECT`."""
    return answer_verdict(answer, terms, others) == CORRECT
