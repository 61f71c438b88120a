"""MixCuBe Country Identification as an lmms-eval task: the `utils.py` its YAML names (`!function utils....`).

Exported by culturebench (`culturebench export RELEASE --harness lmms-eval`): this module is the template, and the
export writes it with the data block below filled in from the release and culturebench's reference data. It imports
neither culturebench nor lmms_eval, so the harness runs it as it is.

Every image is asked its category's question (MixCuBe App. B.2, `COUNTRY_PROMPTS`). An answer is correct when it
contains the ground-truth country or culture (§3), as `culturebench evaluate mixcube` scores it (`verdict`, with
`evaluation/mixcube/answer_match.py`'s matching copied in at export):

- the paper's terms (`GROUND_TRUTH_TERMS`): the culture's country name and App. A.5's labels (none for South Korea
  and Myanmar); `OUR_ALIASES` adds ours (Korea, Korean, Burma, Burmese) for the second, labelled accuracy;
- whole names only: names case-insensitively (an English plural "s" allowed), acronyms (UK, US, USA) exactly, so
  "Koreatown", "us", "USB" and "AUS" do not count;
- never a term inside another country's name (`COUNTRY_NAMES`, less the ground truth's own): "North Korea" is not
  South Korea;
- a term plainly negated ("not", "no", "never", "nor", "neither", "cannot", "...n't" within the two words before
  it, in its clause) is not credited; an answer whose every credited mention is negated is incorrect, and counted
  in `mixcube_negated_answers`;
- an answer that names several countries, the right one among them, counts as correct.

Aggregations: accuracy overall (the paper's terms; `accuracy_with_our_aliases`: ours), per ethnicity (`original`
and each swap), per country (both) and per category, the negated answers, the drop from the originals to each swap
ethnicity (original - swap; positive = the swap lost accuracy), and the same drop per country x category x swap
(`swap_drops`, keyed "country/category/ethnicity").
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from functools import lru_cache
from typing import Any, Literal, NotRequired, TypedDict, TypeVar

# The export inlines evaluation/mixcube/answer_match.py's code here: the task imports no culturebench.
from evaluation.mixcube.answer_match import CORRECT, NEGATED, answer_verdict  # culturebench: inline

# -- data (written at export time) ---------------------------------------------------------------------------------
RELEASE: dict[str, str] = {}
ORIGINAL = "original"
#: App. B.2, verbatim, per category.
COUNTRY_PROMPTS: dict[str, str] = {}
#: Per culture (its adjective, as the release's `country` column spells it): the names an answer may contain, by
#: the paper's rule (the country name and App. A.5's labels).
GROUND_TRUTH_TERMS: dict[str, list[str]] = {}
#: Per culture: our aliases, accepted for `accuracy_with_our_aliases` only (ours, not the paper's).
OUR_ALIASES: dict[str, list[str]] = {}
#: The lowercased adjective, country name and ISO code of each culture -> its adjective.
CULTURE_KEYS: dict[str, str] = {}
#: Per culture: its ISO code, whose names in COUNTRY_NAMES are its own.
CULTURE_CODES: dict[str, str] = {}
#: Every country's names by ISO code (English CLDR names and the pack's culture names).
COUNTRY_NAMES: dict[str, list[str]] = {}
#: The order the tables list countries, categories and ethnicities in (others follow, in first-seen order).
ORDER: dict[str, list[str]] = {}
# -- end of data ---------------------------------------------------------------------------------------------------

METRICS = (
    "mixcube_accuracy",
    "mixcube_accuracy_with_our_aliases",
    "mixcube_negated_answers",
    "mixcube_accuracy_by_ethnicity",
    "mixcube_accuracy_by_country",
    "mixcube_accuracy_with_our_aliases_by_country",
    "mixcube_accuracy_by_category",
    "mixcube_drop_by_ethnicity",
    "mixcube_swap_drops",
)


# -- scoring (evaluation.mixcube.task) -------------------------------------------------------------------------------
def ground_truth_terms(country: str, ours: bool = False) -> tuple[str, ...]:
    """The names an answer may contain for `country`: its culture's (the paper's; ours after them with `ours`); an
    unknown culture gives just its own name."""
    name = " ".join(country.split())
    adjective = CULTURE_KEYS.get(name.lower())
    if adjective is None:
        return (name,)
    terms = [*GROUND_TRUTH_TERMS[adjective], *(OUR_ALIASES[adjective] if ours else ())]
    return tuple(dict.fromkeys(terms))


@lru_cache(maxsize=1024)  # a few cultures, each asked about for every image
def other_country_names(country: str) -> tuple[str, ...]:
    """The names of the countries other than `country`'s, without any of its terms (ours included)."""
    name = " ".join(country.split())
    adjective = CULTURE_KEYS.get(name.lower())
    own_code = CULTURE_CODES[adjective] if adjective is not None else None
    own = {t.casefold() for t in (name, *ground_truth_terms(name, ours=True))}
    return tuple(
        dict.fromkeys(
            other
            for code, names in COUNTRY_NAMES.items()
            if code != own_code
            for other in names
            if other.casefold() not in own
        )
    )


def verdict(answer: str, country: str, ours: bool = False) -> str:
    """The answer's verdict: CORRECT, NEGATED or ABSENT (`answer_verdict`)."""
    return answer_verdict(answer, ground_truth_terms(country, ours), other_country_names(country))


def is_correct(answer: str, country: str, ours: bool = False) -> bool:
    """§3's rule: correct only if the answer names the ground-truth country or culture."""
    return verdict(answer, country, ours) == CORRECT


# -- lmms-eval hooks -----------------------------------------------------------------------------------------------
class Doc(TypedDict):
    """A row of the release's `default` table, as lmms-eval hands it over: the columns the hooks read."""

    sample_id: str
    country: str
    category: str
    ethnicity: str
    image: NotRequired[Any]  # a PIL image, as `datasets` decodes the Image column


class PromptKwargs(TypedDict, total=False):
    """A model config's `lmms_eval_specific_kwargs` for this task."""

    pre_prompt: str
    post_prompt: str


class Record(TypedDict):
    """`process_results`' record of one image, the same for every metric."""

    sample_id: str
    country: str
    category: str
    ethnicity: str
    answer: str
    correct: bool
    correct_with_our_aliases: bool  # ours, not the paper's
    negated: bool


Group = Literal["country", "category", "ethnicity"]
Credited = Literal["correct", "correct_with_our_aliases"]
Key = TypeVar("Key", bound=Hashable)


def doc_to_visual(doc: Doc) -> list[Any]:
    """The row's image (a PIL image, as `datasets` decodes the release's Image column), in RGB."""
    image = doc.get("image")
    return [] if image is None else [image.convert("RGB")]


def doc_to_text(doc: Doc, lmms_eval_specific_kwargs: PromptKwargs | None = None) -> str:
    """The category's App. B.2 question, verbatim (a model's pre_prompt/post_prompt, if its config sets any)."""
    kwargs = lmms_eval_specific_kwargs or {}
    return f"{kwargs.get('pre_prompt', '')}{COUNTRY_PROMPTS[doc['category']]}{kwargs.get('post_prompt', '')}"


def process_results(doc: Doc, results: list[object]) -> dict[str, Record]:
    """One record per image, the same for every metric: which image, its group, the answer and its verdict."""
    answer = results[0] if results else ""
    answer = answer if isinstance(answer, str) else str(answer)
    paper, ours = verdict(answer, doc["country"]), verdict(answer, doc["country"], ours=True)
    record: Record = {
        "sample_id": doc["sample_id"],
        "country": doc["country"],
        "category": doc["category"],
        "ethnicity": doc["ethnicity"],
        "answer": answer,
        "correct": paper == CORRECT,
        "correct_with_our_aliases": ours == CORRECT,  # ours, not the paper's
        "negated": paper == NEGATED,
    }
    return {metric: record for metric in METRICS}


# -- aggregations --------------------------------------------------------------------------------------------------
def _ordered(values: Iterable[str], kind: str) -> list[str]:
    seen = list(dict.fromkeys(values))
    preferred = ORDER.get(kind, [])
    return [v for v in preferred if v in seen] + [v for v in seen if v not in preferred]


def _rate(items: list[Record], column: Credited = "correct") -> float | None:
    return sum(bool(item[column]) for item in items) / len(items) if items else None


def _by(items: list[Record], key: Callable[[Record], Key]) -> dict[Key, list[Record]]:
    groups: dict[Key, list[Record]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def _accuracy_by(items: list[Record], column: Group) -> dict[str, float | None]:
    groups = _by(items, lambda item: item[column])
    return {value: _rate(groups[value]) for value in _ordered(groups, column)}


def accuracy(items: list[Record]) -> float | None:
    """Correct / images, over every image (the paper's terms)."""
    return _rate(items)


def accuracy_with_our_aliases(items: list[Record]) -> float | None:
    """The same with our aliases accepted too (ours, not the paper's)."""
    return _rate(items, "correct_with_our_aliases")


def negated_answers(items: list[Record]) -> int:
    """Answers scored incorrect because every mention of the ground truth was plainly negated."""
    return sum(bool(item["negated"]) for item in items)


def accuracy_by_ethnicity(items: list[Record]) -> dict[str, float | None]:
    return _accuracy_by(items, "ethnicity")


def accuracy_by_country(items: list[Record]) -> dict[str, float | None]:
    return _accuracy_by(items, "country")


def accuracy_with_our_aliases_by_country(items: list[Record]) -> dict[str, float | None]:
    groups = _by(items, lambda item: item["country"])
    return {value: _rate(groups[value], "correct_with_our_aliases") for value in _ordered(groups, "country")}


def accuracy_by_category(items: list[Record]) -> dict[str, float | None]:
    return _accuracy_by(items, "category")


def drop_by_ethnicity(items: list[Record]) -> dict[str, float]:
    """Each swap ethnicity: the originals' accuracy minus the swap's (all countries and categories together)."""
    by_ethnicity = accuracy_by_ethnicity(items)
    original = by_ethnicity.get(ORIGINAL)
    return {
        ethnicity: original - value
        for ethnicity, value in by_ethnicity.items()
        if ethnicity != ORIGINAL and original is not None and value is not None
    }


def swap_drops(items: list[Record]) -> dict[str, float]:
    """Per country x category x swap ethnicity ("country/category/ethnicity"): the originals' accuracy of that
    country and category minus the swap's; groups without originals are left out."""
    groups = _by(items, lambda item: (item["country"], item["category"], item["ethnicity"]))
    countries = _ordered((key[0] for key in groups), "country")
    categories = _ordered((key[1] for key in groups), "category")
    ethnicities = _ordered((key[2] for key in groups), "ethnicity")
    out: dict[str, float] = {}
    for country in countries:
        for category in categories:
            original = _rate(groups.get((country, category, ORIGINAL), []))
            for ethnicity in ethnicities:
                swap = _rate(groups.get((country, category, ethnicity), []))
                if ethnicity != ORIGINAL and original is not None and swap is not None:
                    out[f"{country}/{category}/{ethnicity}"] = original - swap
    return out
