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
