"""The one normal form of a concept name, so that names written differently compare equal.

Concept dedup (`curation/concept_dedup.py`) compares normalised names, and concept generation
(`collectors/concept_generation.py`) keys its candidates and their match to a shipped concept by them: both must
normalise alike, or a candidate would be new to one and a duplicate to the other.
"""

from __future__ import annotations

import re
import unicodedata


def normalize(name: str) -> str:
    """Lower case, NFKC, punctuation and '_'/'-' as spaces, one space between words, a plural 's' dropped."""
    text = unicodedata.normalize("NFKC", name).lower()
    text = re.sub(r"[\W_]+", " ", text).strip()
    words = [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in text.split()]
    return " ".join(words)


#: What a concept name may be: letters, marks and digits (any script), spaces and the punctuation names use
#: (apostrophe, hyphen, ampersand, slash, period, comma, parentheses), at most 100 characters, starting with a letter
#: or digit; so no name is a spreadsheet formula (`=`, `+`, `-`, `@`) or holds a control character.
NAME_PUNCTUATION = frozenset(" '’&/().,-")
MAX_LENGTH = 100


def invalid_name(name: object) -> str | None:
    """Why `name` is not a concept name, or None when it is one."""
    if not isinstance(name, str):
        return f"not text ({type(name).__name__})"
    if len(name) > MAX_LENGTH:
        return f"longer than {MAX_LENGTH} characters"

    def word(c: str) -> bool:
        return unicodedata.category(c)[0] in "LMN"

    if (
        not name
        or unicodedata.category(name[0])[0] not in "LN"
        or not all(word(c) or c in NAME_PUNCTUATION for c in name)
    ):
        return "not a concept name: letters and digits, spaces and ' - & / . , ( ), starting with a letter or digit"
    return None
