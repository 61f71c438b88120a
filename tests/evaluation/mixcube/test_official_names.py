"""Other countries' official names block a term too (issue 59 item 7): "Korea" (our alias for South Korea) inside
"Democratic People's Republic of Korea" or "DPR Korea" names North Korea, not South Korea. The names are CLDR's
(Babel), ISO 3166-1's other English names, official ones included (`_ISO_3166_NAMES`, from Debian's iso-codes), and
a few of ours (`_OUR_OTHER_NAMES`)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from data.reference import default_pack
from evaluation.mixcube import answer_match as am
from evaluation.mixcube import task as m

MIX = default_pack().mixcube()
ISO_CODES_JSON = Path("/usr/share/iso-codes/json/iso_3166-1.json")

DPRK_ANSWERS = [
    "Democratic People's Republic of Korea",
    "Democratic People\u2019s Republic of Korea",  # either apostrophe
    "This is from the Democratic People's Republic of Korea.",
    "DPR Korea",
    "Typical of DPR Korea, I would say.",
    "Korea, Democratic People's Republic of",  # ISO 3166-1's short name
    "DEMOCRATIC PEOPLE'S REPUBLIC OF KOREA",
    "Democratic  People's\nRepublic of Korea",  # any white space between the words
    "A DPR Korean dish",  # the other name read to the end of its word
]

STILL_CORRECT_WITH_OURS = [
    "Republic of Korea",  # South Korea's own official name holds our alias
    "the Republic of Korea's kimchi",
    "South Korea",
    "Korea",
    "Korean food",
    "Not DPR Korea: Korea.",
    "Democratic People's Republic of Korea or the Republic of Korea",  # the right one among others
]


@pytest.mark.parametrize("answer", DPRK_ANSWERS)
def test_north_koreas_official_names_are_no_answer_for_south_korea(answer: str) -> None:
    assert not m.is_correct(answer, "Korean", MIX, ours=True)
    assert not m.is_correct(answer, "Korean", MIX)
    assert m.verdict(answer, "Korean", MIX, ours=True) == am.ABSENT


@pytest.mark.parametrize("answer", STILL_CORRECT_WITH_OURS)
def test_south_korea_is_still_named_with_our_aliases(answer: str) -> None:
    assert m.is_correct(answer, "Korean", MIX, ours=True)


def test_the_official_names_of_the_other_countries_are_blockers() -> None:
    korea = m.other_country_names("Korean", MIX)
    assert {"Democratic People's Republic of Korea", "DPR Korea", "North Korea"} <= set(korea)
    # South Korea's own names never block its terms
    assert not {"Korea, Republic of", "South Korea"} & set(korea)
    assert "United States of America" not in m.other_country_names("American", MIX)
    assert "Republic of Myanmar" not in m.other_country_names("Myanmar", MIX)


def test_the_other_territories_official_names_block_the_papers_terms_too() -> None:
    """The rule is one for every term: an official name of another territory holding a term of the paper's blocks it
    as CLDR's names do ("U.S. Virgin Islands" is CLDR's; "Virgin Islands of the United States" ISO's)."""
    assert not m.is_correct("Virgin Islands of the United States", "American", MIX)
    assert not m.is_correct("United States Minor Outlying Islands", "American", MIX)
    assert not m.is_correct("Virgin Islands, British", "British", MIX)
    assert m.is_correct("the United States", "American", MIX)
    assert m.is_correct("The Virgin Islands of the United States, or the United States itself", "American", MIX)


@pytest.mark.skipif(not ISO_CODES_JSON.exists(), reason="Debian's iso-codes is not installed")
def test_the_copied_names_are_iso_codes_names() -> None:
    """Every English name iso-codes gives a code (short, official, common) is one of that code's names here."""
    names = m.country_names(MIX)
    for entry in json.loads(ISO_CODES_JSON.read_text(encoding="utf-8"))["3166-1"]:
        known = {n.casefold() for n in names[entry["alpha_2"]]}
        for key in ("name", "official_name", "common_name"):
            if key in entry:
                assert entry[key].casefold() in known, (entry["alpha_2"], entry[key])


@pytest.fixture
def without_added_names(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """A call that takes the names added to CLDR's away (the cached names read again), put back after the test."""

    def take_away() -> None:
        monkeypatch.setattr(m, "_ISO_3166_NAMES", {})
        monkeypatch.setattr(m, "_OUR_OTHER_NAMES", {})
        m._standard_country_names.cache_clear()

    yield take_away
    monkeypatch.undo()
    m._standard_country_names.cache_clear()


PIECES = [
    "Korea", "Korean", "South", "North", "Republic", "of", "Democratic", "People's", "People\u2019s", "DPR", "the",
    "not", "US", "United", "States", "Kingdom", "British", "American", "Samoa", "Myanmar", "Burma", "Azeri", "Viet",
    "Nam", "Belgium", "Guinea", ",", ".", "'", "\n",
]  # fmt: skip


#: The names added to CLDR's, read before a test takes them away.
ADDED = [
    " ".join(n.casefold().split()) for t in (m._ISO_3166_NAMES, m._OUR_OTHER_NAMES) for ns in t.values() for n in ns
]


def _added(answer: str) -> bool:
    """Whether the answer holds one of the names added to CLDR's (apostrophes and white space read loosely)."""
    flat = " ".join(answer.casefold().replace("\u2019", "'").split())
    return any(name in flat for name in ADDED)


def test_answers_without_the_added_names_keep_their_verdicts(without_added_names: Callable[[], None]) -> None:
    """Random answers: where none of the added names occurs, every culture's verdict (the paper's terms and ours)
    is what the CLDR names alone give; where one does, the verdict can only lose credit."""
    chance = random.Random(59)
    answers = [" ".join(chance.choice(PIECES) for _ in range(chance.randint(1, 12))) for _ in range(1500)]
    keys = [(c.adjective, ours) for c in MIX.cultures for ours in (False, True)]
    scorer = m._Scorer(MIX)
    now = {(a, k): scorer.verdict(a, k[0], ours=k[1]) for a in answers for k in keys}
    without_added_names()
    scorer = m._Scorer(MIX)
    changed = 0
    for (answer, (culture, ours)), verdict in now.items():
        before = scorer.verdict(answer, culture, ours=ours)
        if before != verdict:
            changed += 1
            assert _added(answer), (answer, culture, ours, before, verdict)
            # a blocker only takes credit away: a correct answer may lose it, a negated one its mention
            assert before != am.ABSENT and verdict != am.CORRECT, (answer, culture, ours, before, verdict)
    assert changed, "the random answers include some that the added names do change"


def test_the_blocker_keeps_only_names_that_could_hold_a_term(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_may_hold` leaves out the names that cannot hold a term's match; verdicts are those of a blocker holding
    every other country's name."""
    chance = random.Random(7)
    answers = [" ".join(chance.choice(PIECES) for _ in range(chance.randint(1, 12))) for _ in range(800)]
    cases = [(m.ground_truth_terms(c.adjective, MIX, ours=o), m.other_country_names(c.adjective, MIX))
             for c in MIX.cultures for o in (False, True)]  # fmt: skip
    pruned = {(a, i): am.answer_verdict(a, *case) for a in answers for i, case in enumerate(cases)}
    am._blocker_pattern.cache_clear()
    monkeypatch.setattr(am, "_may_hold", lambda name, term: True)
    try:
        for (answer, i), verdict in pruned.items():
            assert am.answer_verdict(answer, *cases[i]) == verdict, (answer, cases[i][0])
    finally:
        am._blocker_pattern.cache_clear()


def test_may_hold() -> None:
    assert am._may_hold("North Korea", "Korean")  # read on into the rest of the word
    assert am._may_hold("Democratic People's Republic of Korea", "Korea")
    assert am._may_hold("Democratic People\u2019s Republic of Korea", "People's Republic")
    assert am._may_hold("Korea", "Korean")
    assert not am._may_hold("Kingdom of Belgium", "Myanmar")  # a match of Myanmar cannot start after a letter
    assert not am._may_hold("Congo, The Democratic Republic of the", "the United States")  # " United" is no letter
    assert not am._may_hold("Republic of Korea", "North Korea")
