"""MixCuBe's answer rule, case by case (issue 40, part 4): each answer with the verdict the rule gives it, by the
paper's terms (§3: the ground-truth country or culture, i.e. the country name and the culture's label as
the release spells it, and App. A.5's labels) and with our aliases added. The verdicts are written
from the rule (evaluation/mixcube/answer_match.py's docstring), not taken from the code:

- CORRECT: a ground-truth term as a whole name, not inside another country's name, not plainly negated;
- NEGATED: every such mention is plainly negated (incorrect, counted apart in `negated_answers`);
- ABSENT: no credited mention (incorrect).

The exported lmms-eval task copies the same code; tests/evaluation/harnesses/exports/test_lmms_eval.py checks it on
these answers too."""

from __future__ import annotations

import pytest

from data.reference import default_pack
from evaluation.mixcube import task as m
from evaluation.mixcube.answer_match import ABSENT, CORRECT, NEGATED, answer_verdict

MIX = default_pack().mixcube()

#: (answer, culture as the release spells it, verdict with the paper's terms, verdict with our aliases too)
CASES: list[tuple[str, str, str, str]] = [
    # South Korea: the paper's terms are the country (South Korea) and the culture (Korean); Korea is ours
    ("South Korea", "Korean", CORRECT, CORRECT),
    ("Korea", "Korean", ABSENT, CORRECT),
    ("Korean food", "Korean", CORRECT, CORRECT),  # the culture, as the release spells it
    ("South Korean cuisine", "Korean", CORRECT, CORRECT),  # no whole "South Korea", but a whole "Korean"
    ("Not Korean food", "Korean", NEGATED, NEGATED),
    ("Korea's kimchi", "Korean", ABSENT, CORRECT),  # an apostrophe ends the name
    ("South Korea's kimchi", "Korean", CORRECT, CORRECT),
    ("SOUTH KOREA", "Korean", CORRECT, CORRECT),  # names: any case
    ("south korea", "Korean", CORRECT, CORRECT),
    ("South\nKorea", "Korean", CORRECT, CORRECT),  # any white space between a name's words
    ("Koreans love it", "Korean", CORRECT, CORRECT),  # an English plural
    # part of another country's name
    ("North Korea", "Korean", ABSENT, ABSENT),
    ("North Korean cuisine", "Korean", ABSENT, ABSENT),  # the other name read to the end of its word
    ("Not North Korea, South Korea", "Korean", CORRECT, CORRECT),
    ("North and South Korea", "Korean", CORRECT, CORRECT),  # "North and South Korea" is no other country's name
    # whole names
    ("Koreatown", "Korean", ABSENT, ABSENT),
    ("Koreanness", "Korean", ABSENT, ABSENT),
    # plain negation
    ("Definitely not Korea", "Korean", ABSENT, NEGATED),
    ("Definitely not South Korea", "Korean", NEGATED, NEGATED),
    ("It isn't South Korea.", "Korean", NEGATED, NEGATED),
    ("It is not from South Korea.", "Korean", NEGATED, NEGATED),  # two words before: "not from"
    ("Neither Japan nor South Korea.", "Korean", NEGATED, NEGATED),
    ("Never South Korea.", "Korean", NEGATED, NEGATED),
    ("not Japan but South Korea", "Korean", CORRECT, CORRECT),
    ("Not Japan. South Korea.", "Korean", CORRECT, CORRECT),
    ("South Korea, not Japan", "Korean", CORRECT, CORRECT),  # a negation after the name denies nothing
    ("Not South Korea... it is South Korea after all", "Korean", CORRECT, CORRECT),  # one mention stands
    ("Not only South Korea but also Japan", "Korean", CORRECT, CORRECT),  # "not only" is no negation
    ("No, it is South Korea.", "Korean", CORRECT, CORRECT),  # the comma ends the clause
    ("I don't think it is South Korea", "Korean", CORRECT, CORRECT),  # "don't" is three words away: not read
    # Myanmar: the country name; Burma and Burmese are ours
    ("Myanmar", "Myanmar", CORRECT, CORRECT),
    ("Myanmar (Burma)", "Myanmar", CORRECT, CORRECT),  # CLDR's own name for Myanmar never blocks
    ("Burma", "Myanmar", ABSENT, CORRECT),
    ("Burmese", "Myanmar", ABSENT, CORRECT),
    ("Not Burmese", "Myanmar", ABSENT, NEGATED),
    # Azerbaijan: App. A.5's labels
    ("Azeri plov", "Azerbaijani", CORRECT, CORRECT),
    ("Azerbaijani", "Azerbaijani", CORRECT, CORRECT),
    ("Azerbaijan", "Azerbaijani", CORRECT, CORRECT),
    ("AZ", "Azerbaijani", ABSENT, ABSENT),  # an ISO code is no label
    # the UK: App. A.5's labels; acronyms case-sensitive, whole
    ("UK", "British", CORRECT, CORRECT),
    ("uk", "British", ABSENT, ABSENT),
    ("UKRAINE", "British", ABSENT, ABSENT),
    ("A British festival", "British", CORRECT, CORRECT),
    ("Scottish kilt", "British", ABSENT, ABSENT),  # "Scottish" is not among App. A.5's labels
    ("British Virgin Islands", "British", ABSENT, ABSENT),  # another place's name
    ("England, maybe Wales", "British", CORRECT, CORRECT),
    ("Not the UK", "British", NEGATED, NEGATED),  # "the" is skipped
    # the US
    ("US", "American", CORRECT, CORRECT),
    ("From the US.", "American", CORRECT, CORRECT),
    ("us", "American", ABSENT, ABSENT),
    ("Let us see", "American", ABSENT, ABSENT),
    ("USB cable", "American", ABSENT, ABSENT),
    ("AUS or NZ", "American", ABSENT, ABSENT),
    ("the U.S.", "American", ABSENT, ABSENT),  # not among App. A.5's labels
    ("USA", "American", CORRECT, CORRECT),
    ("the United States", "American", CORRECT, CORRECT),
    ("The United States of America", "American", CORRECT, CORRECT),
    ("United States", "American", CORRECT, CORRECT),  # the country name itself
    ("Hawaii", "American", CORRECT, CORRECT),
    ("Hawaiian shirt", "American", ABSENT, ABSENT),  # whole names
    ("Americans", "American", CORRECT, CORRECT),
    ("American Samoa", "American", ABSENT, ABSENT),  # another ISO country's name
    ("Latin American street food", "American", CORRECT, CORRECT),  # verbatim, not semantic
    # several countries, the right one among them
    ("Japan, China or South Korea", "Korean", CORRECT, CORRECT),
    ("", "Korean", ABSENT, ABSENT),
]


@pytest.mark.parametrize(("answer", "country", "paper", "ours"), CASES)
def test_the_rule(answer: str, country: str, paper: str, ours: str) -> None:
    assert m.verdict(answer, country, MIX) == paper
    assert m.verdict(answer, country, MIX, ours=True) == ours
    assert m.is_correct(answer, country, MIX) is (paper == CORRECT)
    assert m.is_correct(answer, country, MIX, ours=True) is (ours == CORRECT)


#: A culture outside the pack: its own name is its one term, and every other country's name can block it.
CONTAINED: list[tuple[str, str, str]] = [
    ("Guinea", "Guinea", CORRECT),
    ("Papua New Guinea", "Guinea", ABSENT),
    ("Equatorial Guinea", "Guinea", ABSENT),
    ("Guinea-Bissau", "Guinea", ABSENT),
    ("Guinea, not Papua New Guinea", "Guinea", CORRECT),
    ("Sudan", "Sudan", CORRECT),
    ("South Sudan", "Sudan", ABSENT),
    ("Niger", "Niger", CORRECT),
    ("Nigeria", "Niger", ABSENT),  # whole names
    ("Dominican Republic", "Dominica", ABSENT),
    ("American Samoa", "Samoa", ABSENT),
    ("Samoa", "Samoa", CORRECT),
]


@pytest.mark.parametrize(("answer", "country", "expected"), CONTAINED)
def test_a_name_inside_another_countrys_name(answer: str, country: str, expected: str) -> None:
    assert m.verdict(answer, country, MIX) == expected


@pytest.mark.parametrize(
    ("answer", "term", "expected"),
    [
        ("T\u00fcrkiye", "T\u00fcrkiye", CORRECT),  # composed
        ("Tu\u0308rkiye", "T\u00fcrkiye", CORRECT),  # decomposed answer: NFC first
        ("T\u00fcrkiye", "Tu\u0308rkiye", CORRECT),  # decomposed term
        ("T\u00dcRKIYE", "T\u00fcrkiye", CORRECT),
        ("Turkiye", "T\u00fcrkiye", ABSENT),  # no accent folding
        ("\ud55c\uad6d", "South Korea", ABSENT),  # another script names nothing here
    ],
)
def test_case_and_normal_forms(answer: str, term: str, expected: str) -> None:
    assert answer_verdict(answer, [term]) == expected


def test_the_matcher_alone() -> None:
    """Without other countries' names nothing blocks; with them, a ground-truth term never blocks itself."""
    assert answer_verdict("North Korea", ["Korea"]) == CORRECT
    assert answer_verdict("North Korea", ["Korea"], ["North Korea"]) == ABSENT
    assert answer_verdict("North Korea", ["Korea", "North Korea"], ["North Korea"]) == CORRECT
    assert answer_verdict("never Korea", ["Korea"]) == NEGATED
    assert answer_verdict("never, Korea", ["Korea"]) == CORRECT
    assert answer_verdict("Korea", ["", "  "]) == ABSENT  # blank terms name nothing
    long = "not Korea, " * 20_000 + "Korea"  # many negated mentions, then one that stands: still quick
    assert answer_verdict(long, ["Korea"], ["North Korea"]) == CORRECT
