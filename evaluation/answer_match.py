"""MixCuBe §3's answer rule as text matching: an answer is correct when it contains one of the ground-truth terms
(names case-insensitively at the start of a word, so "Korea" counts inside "Korean"; acronyms such as UK, US and
USA case-sensitively as whole words, so "us", "USB" and "AUS" do not count).

Standard library only: `evaluation.mixcube` scores with it, and the lmms-eval export copies this module's code,
from the marker below, into the task's `utils.py` (`evaluation/exports/lmms_eval.py`), so both score the same way.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

# -- copied into exported tasks from here ------------------------------------------------------------------------


def _is_acronym(term: str) -> bool:
    return term.isalpha() and term.isupper() and len(term) <= 4


_NOT_LETTER_BEFORE = r"(?<![^\W\d_])"  # no letter right before (digits, punctuation, spaces and the start are fine)
_NOT_LETTER_AFTER = r"(?![^\W\d_])"


def _term_pattern(term: str) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(word) for word in term.split())
    if _is_acronym(term):
        return re.compile(_NOT_LETTER_BEFORE + words + _NOT_LETTER_AFTER)
    return re.compile(_NOT_LETTER_BEFORE + words, re.IGNORECASE)


def contains_term(answer: str, terms: Iterable[str]) -> bool:
    """Whether `answer` (NFC-normalised) contains one of `terms`, as the module docstring says."""
    text = unicodedata.normalize("NFC", answer or "")
    return any(_term_pattern(term).search(text) for term in terms)
