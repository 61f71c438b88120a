"""The shipped reference data: complete, consistent, and matching the papers and the authors' release."""

from __future__ import annotations

import re
import string

import pytest

from data import reference
from data.reference import default_pack

# The authors' exact country names and the country-to-language map (3XCM paper Table 9).
AUTHORS_COUNTRIES = {
    "Argentina", "Australia", "Brazil", "China", "France", "Germany", "India", "Japan",
    "Kenya", "Nigeria", "Portugal", "Saudi Arabia", "Spain", "Thailand", "UK", "USA",
}  # fmt: skip
LANGUAGE_MAP = {
    "en": {"USA", "UK", "Australia"},
    "es": {"Spain", "Argentina"},
    "pt": {"Portugal", "Brazil"},
    "de": {"Germany"},
    "zh": {"China"},
    "ja": {"Japan"},
    "fr": {"France"},
    "ar": {"Saudi Arabia"},
    "th": {"Thailand"},
    "hi": {"India"},
    "sw": {"Kenya"},
    "yo": {"Nigeria"},
}


def test_countries_follow_the_design_brief() -> None:
    countries = default_pack().countries
    assert {c.name for c in countries} == AUTHORS_COUNTRIES
    by_language: dict[str, set[str]] = {}
    for country in countries:
        by_language.setdefault(country.language_code, set()).add(country.name)
        assert country.language_group == country.language_code
        assert re.fullmatch(r"[a-z]{2}-[a-z]{2,3}", country.ddg_region)
    assert by_language == LANGUAGE_MAP
    assert len({c.iso2 for c in countries}) == len({c.slug for c in countries}) == 16


def test_resolve_country_accepts_names_slugs_and_codes() -> None:
    assert default_pack().resolve_country("saudi arabia").name == "Saudi Arabia"  # the slug, as in the authors' ids
    assert default_pack().resolve_country("saudi_arabia").name == "Saudi Arabia"  # the slug before that
    assert default_pack().resolve_country("Saudi Arabia").slug == "saudi arabia"
    assert default_pack().resolve_country("gb").name == "UK"
    assert default_pack().resolve_country("usa").iso2 == "US"
    with pytest.raises(KeyError, match="Atlantis"):
        default_pack().resolve_country("Atlantis")


def test_concepts_have_the_authors_ids_and_table_10_counts() -> None:
    """Ids and names are the authors' (tests/data/test_reference_fidelity.py checks them against their file)."""
    concepts = default_pack().concepts
    ids = [c.concept_id for c in concepts]
    names = [c.concept for c in concepts]
    assert ids == list(range(len(concepts)))
    assert len(set(names)) == len(names)
    # 137 rows survive in our copy of Table 10 (see data/reference/README.md), summing to 11,723 images; the other
    # two concepts of the authors' release have no Table 10 count.
    table_10 = [c.paper_image_count for c in concepts if c.paper_image_count is not None]
    assert len(table_10) == 137 and sum(table_10) == 11_723
    assert all(c.release_image_count for c in concepts)


@pytest.mark.parametrize("code", [c for c in default_pack().language_codes if c != "en"])
def test_translations_are_complete_and_render_descriptors(code: str) -> None:
    pack = default_pack().language_pack(code)
    concepts = default_pack().concepts
    assert set(pack.concepts) == {c.concept_id for c in concepts}
    texts = [pack.concepts[c.concept_id].text for c in concepts]
    assert len(set(texts)) == len(texts), "two concepts share a translation"
    for concept in concepts:
        entry = pack.concepts[concept.concept_id]
        assert entry.review_status == reference.REVIEW_AWAITING
        assert entry.concept == concept.concept
        assert entry.text not in string.whitespace
    assert set(pack.countries) == AUTHORS_COUNTRIES
    for country in AUTHORS_COUNTRIES:
        for concept in concepts:
            descriptor = pack.descriptor(concept.concept_id, country)
            assert pack.concepts[concept.concept_id].text in descriptor
            assert pack.countries[country].descriptor_country in descriptor
            assert "{" not in descriptor


def test_english_pack_is_the_source() -> None:
    pack = default_pack().language_pack("en")
    train = next(c for c in default_pack().concepts if c.concept == "train")
    assert pack.descriptor(train.concept_id, "Japan") == "train of Japan"  # 3XCM paper §3.2.3
    assert all(entry.review_status == "source" for entry in pack.concepts.values())


def test_mixcube_reference() -> None:
    mix = default_pack().mixcube()
    assert [c.name for c in mix.cultures] == ["Azerbaijan", "South Korea", "Myanmar", "United Kingdom", "United States"]
    assert mix.categories == ["Food", "Festival", "Clothes"]
    assert [e.label for e in mix.ethnicities] == ["African", "Caucasian", "EastAsian", "SouthAsian"]
    assert mix.originals_per_culture_category * len(mix.cultures) * len(mix.categories) * 5 == 2475  # App. A.2
    prompts = {mix.inpainting_prompts[c].format(ethnicity="East Asian") for c in mix.categories}
    assert "East Asian person(s) with food" in prompts  # App. B.1
    azerbaijan = mix.cultures[0]
    assert azerbaijan.adjective == "Azerbaijani" and "Azeri" in azerbaijan.label_aliases  # App. A.5
