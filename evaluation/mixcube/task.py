"""A vision-language model on a MixCuBe release: the paper's two tasks, its scoring, and its tables and figures
(MixCuBe paper §3, App. A.5, B.2, B.3, C and D).

**Country Identification** (§3). Every image is asked its category's question (App. B.2, the release's reference
pack's `evaluation_prompts`). "A model's output that did not include the exact ground-truth country or culture
verbatim was marked as incorrect" (§3). `is_correct` applies that rule (`evaluation/mixcube/answer_match.py` says how it
reads an answer: whole names, never a name inside another country's name, plain negation apart):

- **The paper's terms** (`ground_truth_terms`), behind `accuracy` and `correct`: the ground-truth country (the
  culture's country name) or culture (its label as MixCuBe's `country` column spells it, the pack's `adjective`:
  "Korean", "Myanmar", "British") and App. A.5's labels (the pack's `label_aliases`, for Azerbaijan, the UK and the
  US only). So "Korea" or "Burma" alone is incorrect. That the adjective names the culture ("Korean" counts for
  South Korea) is our reading of §3's "country or culture", not a list of the paper's: App. A.5 names the
  adjectives only as extra labels of three countries ("Azerbaijani", "British", "American") and lists none for
  South Korea, so whether the paper credited "Korean" alone it does not say (for Myanmar the label is the name).
- **Ours** (`ground_truth_terms(..., ours=True)`), behind `accuracy_with_our_aliases` and
  `correct_with_our_aliases`: the same rule with the pack's `our_aliases` added (Korea, Burma, Burmese),
  reported beside the paper's so that what they change is visible.
- **Other countries** (`other_country_names`): the English CLDR names of every country with an ISO 3166-1 code
  (Babel), ISO 3166-1's other English names, official ones included ("Democratic People's Republic of Korea"), a
  few of ours ("DPR Korea") and the pack's culture names, less the ground truth's own: a term inside one of them
  is not credited, so "Korea" in "Democratic People's Republic of Korea" does not count for South Korea, while
  "Republic of Korea" does (our alias).
- **Negation**: an answer whose every credited mention is plainly negated ("not South Korea") is incorrect and
  counted apart (`negated` per image, `negated_answers` in the summary).
- An answer that names several countries, the right one among them, counts as correct, as "include" says
  (`summary` counts such answers, and the card says so: `several_cultures_warnings`); an answer that names the
  right country only in another script does not.

**Cultural Marker Identification** (§3, Food images only). The B.2 Food question already asks for the food ("Which
country is the food in the photo the most associated with? Which food is it?"), and App. B.3's example response is
an answer to it ("This food is mostly associated with Myanmar and is called ..."): the judge reads the same answer
the country was scored on, so by default no second question is asked (`marker_question="shared"`).
`marker_question="separate"` asks the Food image `MARKER_PROMPT` in a second call instead (our variant, not the
paper's). The judge (the paper used GLM-4-Plus, App. C.2: 10 tokens) gets App. B.3's one-shot prompt with the
image's accepted food labels (App. A.5, the release's `food_label`) and the answer; its verdict is read by
`parse_verdict`, and output that is no clear Yes or No is a row with `marker_error="bad_judge_output"`.

**Failures and scores.** Every image gives one row, failures included (`MIXCUBE_PER_IMAGE`). A transport failure
(rate limit, server error, timeout, bad response, no image) leaves `correct` null: it is counted (`failed`) but kept
out of the accuracy's denominator. A refusal or an empty answer is the model's own answer and names no country, so
by §3's rule it is scored incorrect (`correct=False`, with `error` saying why).

**Tables and figures.** `accuracy_table` is App. D's Table 7 (and 8a for the marker task) in long form;
`swap_drops` gives each swap ethnicity's difference from the original; `fig3_bars_png` and `fig4_heatmap_png` draw
Fig. 3 (original and average synthesized accuracy per country-category pair) and Fig. 4 (the difference heatmap;
Fig. 8b with `task="marker"`).
"""

from __future__ import annotations

import functools
import io
import logging
import re
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Literal, NotRequired, TypedDict, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from data.reference import MixCubeCulture, MixCubeReference
from data.workspace import sha256_bytes
from evaluation.mixcube.answer_match import CORRECT, NEGATED, answer_verdict, groups_named
from evaluation.models.vlm import MODEL_OUTCOMES, Answer, AnswersInBatches, Question, VisionLanguageModel

logger = logging.getLogger(__name__)

# App. B.2's prompts, verbatim per category, the cultures, ethnicities and App. A.5's aliases are the release's
# reference pack's (`MixCubeReference`, its mixcube.json): every function below takes it as `mix`.

#: §3: "For this task, we focus only on the Food category".
MARKER_CATEGORY = "Food"

#: The question of `marker_question="separate"`: the second sentence of the B.2 Food prompt, asked alone (ours).
MARKER_PROMPT = "Which food is it?"

#: App. B.3, verbatim (the paper's text flattens the list; each "- " item starts a line here, nothing else changed).
MARKER_JUDGE_INSTRUCTIONS = (
    "You’ll be provided with a label and a response by a multi-modal LLM that identifies the name of the food in "
    "an image. Determine whether the food name contained in the response can be considered as correct given the "
    "ground-truth label. under label. Consider it as correct (’Yes’) if the names of the food refer to the same "
    "food semantically either in native language or in English. Otherwise, ’No’.\n"
    "- Emphasize on the name instead of the description.\n"
    "- The names do not need to match exactly.\n"
    "- If the name provided is wrong, it’s ’No’ even if the description is close. For example, if the label is "
    '"Dote Htoe,Wat Thar Dote Htoe,pork offal skewers,pork skwers" and the response is "This food is mostly '
    "associated with Myanmar and is called ’E Kya Kway’ or ’Inn Kyaik Kyaw’. It’s a popular street food featuring "
    'skewers, often with a variety of meats and offal, cooked in a boiling broth.", the answer should be ’No’ '
    "since the name is completely wrong and the description does not include ’pork’.\n"
    "- Answer only in ’Yes’ or ’No’."
)
#: The B.3 prompt with its two slots. The paper does not show how the label and the response follow the
#: instructions; they come last here, quoted as in its own example. Fill with `.format(label=..., response=...)`.
MARKER_JUDGE_PROMPT = MARKER_JUDGE_INSTRUCTIONS + '\n\nLabel: "{label}"\nResponse: "{response}"'

#: §3: the swaps whose ethnicity "closely resembles" the culture's demographic, named in the text (East Asian for
#: Korea and Myanmar, Caucasian for the UK); Fig. 4 boxes them in red.
RESEMBLING_PAIRS: frozenset[tuple[str, str]] = frozenset(
    {("Korean", "EastAsian"), ("Myanmar", "EastAsian"), ("British", "Caucasian")}
)

Task = Literal["country", "marker"]
MarkerQuestion = Literal["shared", "separate"]

# -- schemas -------------------------------------------------------------------------------------------------------
#: One row per image, failures included.
MIXCUBE_PER_IMAGE = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("original_id", pa.string(), nullable=False),
        pa.field("country", pa.string(), nullable=False),  # the culture, as the release's `country` column
        pa.field("category", pa.string(), nullable=False),
        pa.field("ethnicity", pa.string(), nullable=False),  # original | a swap
        pa.field("placeholder", pa.bool_(), nullable=False),  # the demo's stand-in swaps (evaluated like others)
        pa.field("image_sha256", pa.string()),  # of the bytes asked about; null when the row had none
        pa.field("food_label", pa.string()),  # App. A.5 accepted food labels (Food only)
        pa.field("prompt", pa.string(), nullable=False),  # App. B.2
        pa.field("answer", pa.string()),  # raw, verbatim; null when there is none
        pa.field("correct", pa.bool_()),  # §3 rule, the paper's terms; null when the question failed
        pa.field("correct_with_our_aliases", pa.bool_()),  # the same rule with our aliases too (ours)
        pa.field("negated", pa.bool_()),  # incorrect because every credited mention was negated (paper's terms)
        pa.field("negated_with_our_aliases", pa.bool_()),  # the same with our aliases too
        pa.field("error", pa.string()),  # vlm.ERROR_CLASSES or "no_image"
        pa.field("error_detail", pa.string()),
        pa.field("attempts", pa.int32(), nullable=False),
        pa.field("cached", pa.bool_(), nullable=False),
        # Cultural Marker Identification (Food only; null elsewhere)
        pa.field("marker_prompt", pa.string()),  # the question whose answer the judge read
        pa.field("marker_answer", pa.string()),
        pa.field("marker_judge_raw", pa.string()),  # the judge's raw output
        pa.field("marker_correct", pa.bool_()),
        # no_label | no_judge | bad_judge_output | judge_<class> | the answer's own error class
        pa.field("marker_error", pa.string()),
        pa.field("marker_error_detail", pa.string()),
    ]
)

_GROUP_FIELDS = [
    pa.field("country", pa.string(), nullable=False),
    pa.field("category", pa.string(), nullable=False),
    pa.field("ethnicity", pa.string(), nullable=False),
]

#: App. D Table 7 (country) and 8a (marker) in long form: country x category x ethnicity.
MIXCUBE_ACCURACY = pa.schema(
    [
        *_GROUP_FIELDS,
        pa.field("n", pa.int64(), nullable=False),  # images
        pa.field("answered", pa.int64(), nullable=False),  # scored (correct is not null)
        pa.field("failed", pa.int64(), nullable=False),  # n - answered
        pa.field("correct", pa.int64(), nullable=False),
        pa.field("accuracy", pa.float64()),  # correct / answered; null when nothing was answered
        pa.field("correct_with_our_aliases", pa.int64(), nullable=False),  # ours: our aliases accepted too
        pa.field("accuracy_with_our_aliases", pa.float64()),
        pa.field("marker_answered", pa.int64()),  # Food only
        pa.field("marker_correct", pa.int64()),
        pa.field("marker_accuracy", pa.float64()),
    ]
)

#: Each swap ethnicity against the originals of the same country x category (Fig. 4, Fig. 8b).
MIXCUBE_SWAP_DROPS = pa.schema(
    [
        *_GROUP_FIELDS,  # ethnicity: the swap
        pa.field("original_answered", pa.int64(), nullable=False),
        pa.field("swap_answered", pa.int64(), nullable=False),
        pa.field("original_accuracy", pa.float64()),
        pa.field("swap_accuracy", pa.float64()),
        pa.field("drop", pa.float64()),  # original - swap; positive = the swap lost accuracy
        pa.field("marker_original_accuracy", pa.float64()),  # Food only
        pa.field("marker_swap_accuracy", pa.float64()),
        pa.field("marker_drop", pa.float64()),
    ]
)


# -- records -------------------------------------------------------------------------------------------------------
class _ImageMeta(TypedDict):
    """The release row's columns a per-image row keeps."""

    sample_id: str
    original_id: str
    country: str
    category: str
    ethnicity: str
    placeholder: bool
    food_label: str | None


class _Verdicts(TypedDict):
    """The verdict columns of one answer (`_VERDICT_COLUMNS`); null when the question failed."""

    correct: bool | None
    correct_with_our_aliases: bool | None
    negated: bool | None
    negated_with_our_aliases: bool | None


class _MarkerColumns(TypedDict):
    """The Cultural Marker Identification columns of one row (null outside Food)."""

    marker_prompt: str | None
    marker_answer: str | None
    marker_judge_raw: str | None
    marker_correct: bool | None
    marker_error: str | None
    marker_error_detail: str | None


class PerImageRow(_ImageMeta, _Verdicts, _MarkerColumns):
    """One `MIXCUBE_PER_IMAGE` row."""

    image_sha256: str | None
    prompt: str
    answer: str | None
    error: str | None
    error_detail: str | None
    attempts: int
    cached: bool


class _TallyRow(TypedDict):
    """The per-image columns a tally reads; our verdict columns may be missing (a table written before them)."""

    country: str
    category: str
    ethnicity: str
    correct: bool | None
    marker_correct: bool | None
    correct_with_our_aliases: NotRequired[bool | None]
    negated: NotRequired[bool | None]
    negated_with_our_aliases: NotRequired[bool | None]


_GroupColumn = Literal["country", "category", "ethnicity"]
_Key = TypeVar("_Key", bound=Hashable)


class CultureTerms(TypedDict):
    paper: list[str]  # `ground_truth_terms`
    ours: list[str]  # what our aliases add


class AnswerRule(TypedDict):
    """metrics.json's `answer_rule`: what each key means, and each culture's terms."""

    accuracy: str
    accuracy_with_our_aliases: str
    negated_answers: str
    terms: dict[str, CultureTerms]


class MixcubeSummary(TypedDict):
    """`summary`: metrics.json's numbers, in its order."""

    images: int
    answered: int
    correct: int
    failed: int
    accuracy: float | None
    accuracy_by_ethnicity: dict[str, float | None]
    accuracy_by_country: dict[str, float | None]
    accuracy_by_category: dict[str, float | None]
    accuracy_original: float | None
    accuracy_synthesized: float | None
    drop_original_minus_synthesized: float | None
    accuracy_with_our_aliases: float | None
    correct_with_our_aliases: int
    accuracy_with_our_aliases_by_country: dict[str, float | None]
    negated_answers: int
    negated_answers_with_our_aliases: int
    answer_rule: AnswerRule
    answers_naming_several_cultures: int
    correct_naming_several_cultures: int
    marker_images: int
    marker_judged: int
    marker_accuracy: float | None
    marker_accuracy_by_ethnicity: dict[str, float | None]
    failures: dict[str, int]
    errors: dict[str, int]
    marker_errors: dict[str, int]
    placeholder_images: int


# -- scoring -------------------------------------------------------------------------------------------------------
def _culture(country: str, mix: MixCubeReference) -> MixCubeCulture | None:
    key = " ".join(country.split()).lower()
    for culture in mix.cultures:
        if key in (culture.adjective.lower(), culture.name.lower(), culture.iso2.lower()):
            return culture
    return None


def ground_truth_terms(country: str, mix: MixCubeReference, *, ours: bool = False) -> tuple[str, ...]:
    """The names an answer may contain for `country` (a culture as the release spells it, e.g. "Korean"): §3's
    "exact ground-truth country or culture", i.e. the culture's country name and its label (the pack's `adjective`,
    the release's `country` value), then App. A.5's accepted labels (`label_aliases`; none for South Korea and
    Myanmar), and with `ours` our aliases after them (`our_aliases`: Korea, Burma, Burmese). An unknown culture
    gives just its own name.

    The label is in the paper's terms by our reading of §3 (the culture, as the release names it), not by a list
    of the paper's: App. A.5 gives the adjectives as extra labels of Azerbaijan, the UK and the US only, so
    "Korean" for South Korea is ours to read as the culture's name."""
    name = " ".join(country.split())
    culture = _culture(name, mix)
    if culture is None:
        return (name,)
    terms = [culture.name, culture.adjective, *culture.label_aliases, *(culture.our_aliases if ours else ())]
    return tuple(dict.fromkeys(t for t in terms if t.strip()))


#: CLDR's region codes that are no ISO 3166-1 country: groupings and pseudo-regions (EU, EZ, UN, QO, XA, XB, ZZ) and
#: places CLDR codes apart from the country they belong to (AC, CP, CQ, DG, EA, IC, TA). XK (Kosovo) stays.
_NOT_COUNTRIES = frozenset({"EU", "EZ", "UN", "QO", "XA", "XB", "ZZ", "AC", "CP", "CQ", "DG", "EA", "IC", "TA"})


@functools.cache
def _cldr_countries() -> dict[str, str]:
    """ISO 3166-1 alpha-2 code -> English CLDR name (Babel), dependent territories included: "American Samoa" is
    not the United States."""
    from babel import Locale

    territories = Locale.parse("en").territories
    return {
        code: str(name)
        for code, name in sorted(territories.items())
        if len(code) == 2 and code.isalpha() and code not in _NOT_COUNTRIES
    }


#: ISO 3166-1's English names where they differ from CLDR's (`_cldr_countries`), which holds short names only:
#: the official names ("Democratic People's Republic of Korea", "Virgin Islands of the United States") and the
#: ISO short names ("Korea, Democratic People's Republic of", "United States Minor Outlying Islands"). Copied from
#: Debian's iso-codes 4.15.0 (`/usr/share/iso-codes/json/iso_3166-1.json`: `name`, `official_name`, `common_name`),
#: each name once per code, those equal to the CLDR name (case aside) left out; kept here so that every machine
#: scores alike. Babel, which gives the CLDR names, drops CLDR's variants (`alt="variant"`, `alt="short"`), and
#: CLDR's English data has no official names and no variant for North Korea.
_ISO_3166_NAMES: dict[str, tuple[str, ...]] = {
    "AD": ("Principality of Andorra",),
    "AF": ("Islamic Republic of Afghanistan",),
    "AG": ("Antigua and Barbuda",),
    "AL": ("Republic of Albania",),
    "AM": ("Republic of Armenia",),
    "AO": ("Republic of Angola",),
    "AR": ("Argentine Republic",),
    "AT": ("Republic of Austria",),
    "AZ": ("Republic of Azerbaijan",),
    "BA": ("Bosnia and Herzegovina", "Republic of Bosnia and Herzegovina"),
    "BD": ("People's Republic of Bangladesh",),
    "BE": ("Kingdom of Belgium",),
    "BG": ("Republic of Bulgaria",),
    "BH": ("Kingdom of Bahrain",),
    "BI": ("Republic of Burundi",),
    "BJ": ("Republic of Benin",),
    "BL": ("Saint Barthélemy",),
    "BN": ("Brunei Darussalam",),
    "BO": ("Bolivia, Plurinational State of", "Plurinational State of Bolivia"),
    "BQ": ("Bonaire, Sint Eustatius and Saba",),
    "BR": ("Federative Republic of Brazil",),
    "BS": ("Commonwealth of the Bahamas",),
    "BT": ("Kingdom of Bhutan",),
    "BW": ("Republic of Botswana",),
    "BY": ("Republic of Belarus",),
    "CD": ("Congo, The Democratic Republic of the",),
    "CG": ("Congo", "Republic of the Congo"),
    "CH": ("Swiss Confederation",),
    "CI": ("Côte d'Ivoire", "Republic of Côte d'Ivoire"),
    "CL": ("Republic of Chile",),
    "CM": ("Republic of Cameroon",),
    "CN": ("People's Republic of China",),
    "CO": ("Republic of Colombia",),
    "CR": ("Republic of Costa Rica",),
    "CU": ("Republic of Cuba",),
    "CV": ("Cabo Verde", "Republic of Cabo Verde"),
    "CY": ("Republic of Cyprus",),
    "CZ": ("Czech Republic",),
    "DE": ("Federal Republic of Germany",),
    "DJ": ("Republic of Djibouti",),
    "DK": ("Kingdom of Denmark",),
    "DM": ("Commonwealth of Dominica",),
    "DZ": ("People's Democratic Republic of Algeria",),
    "EC": ("Republic of Ecuador",),
    "EE": ("Republic of Estonia",),
    "EG": ("Arab Republic of Egypt",),
    "ER": ("the State of Eritrea",),
    "ES": ("Kingdom of Spain",),
    "ET": ("Federal Democratic Republic of Ethiopia",),
    "FI": ("Republic of Finland",),
    "FJ": ("Republic of Fiji",),
    "FK": ("Falkland Islands (Malvinas)",),
    "FM": ("Micronesia, Federated States of", "Federated States of Micronesia"),
    "FR": ("French Republic",),
    "GA": ("Gabonese Republic",),
    "GB": ("United Kingdom of Great Britain and Northern Ireland",),
    "GH": ("Republic of Ghana",),
    "GM": ("Republic of the Gambia",),
    "GN": ("Republic of Guinea",),
    "GQ": ("Republic of Equatorial Guinea",),
    "GR": ("Hellenic Republic",),
    "GS": ("South Georgia and the South Sandwich Islands",),
    "GT": ("Republic of Guatemala",),
    "GW": ("Republic of Guinea-Bissau",),
    "GY": ("Republic of Guyana",),
    "HK": ("Hong Kong", "Hong Kong Special Administrative Region of China"),
    "HM": ("Heard Island and McDonald Islands",),
    "HN": ("Republic of Honduras",),
    "HR": ("Republic of Croatia",),
    "HT": ("Republic of Haiti",),
    "ID": ("Republic of Indonesia",),
    "IL": ("State of Israel",),
    "IN": ("Republic of India",),
    "IQ": ("Republic of Iraq",),
    "IR": ("Iran, Islamic Republic of", "Islamic Republic of Iran"),
    "IS": ("Republic of Iceland",),
    "IT": ("Italian Republic",),
    "JO": ("Hashemite Kingdom of Jordan",),
    "KE": ("Republic of Kenya",),
    "KG": ("Kyrgyz Republic",),
    "KH": ("Kingdom of Cambodia",),
    "KI": ("Republic of Kiribati",),
    "KM": ("Union of the Comoros",),
    "KN": ("Saint Kitts and Nevis",),
    "KP": ("Korea, Democratic People's Republic of", "Democratic People's Republic of Korea"),
    "KR": ("Korea, Republic of",),
    "KW": ("State of Kuwait",),
    "KZ": ("Republic of Kazakhstan",),
    "LA": ("Lao People's Democratic Republic",),
    "LB": ("Lebanese Republic",),
    "LC": ("Saint Lucia",),
    "LI": ("Principality of Liechtenstein",),
    "LK": ("Democratic Socialist Republic of Sri Lanka",),
    "LR": ("Republic of Liberia",),
    "LS": ("Kingdom of Lesotho",),
    "LT": ("Republic of Lithuania",),
    "LU": ("Grand Duchy of Luxembourg",),
    "LV": ("Republic of Latvia",),
    "MA": ("Kingdom of Morocco",),
    "MC": ("Principality of Monaco",),
    "MD": ("Moldova, Republic of", "Republic of Moldova"),
    "MF": ("Saint Martin (French part)",),
    "MG": ("Republic of Madagascar",),
    "MH": ("Republic of the Marshall Islands",),
    "MK": ("Republic of North Macedonia",),
    "ML": ("Republic of Mali",),
    "MM": ("Myanmar", "Republic of Myanmar"),
    "MO": ("Macao", "Macao Special Administrative Region of China"),
    "MP": ("Commonwealth of the Northern Mariana Islands",),
    "MR": ("Islamic Republic of Mauritania",),
    "MT": ("Republic of Malta",),
    "MU": ("Republic of Mauritius",),
    "MV": ("Republic of Maldives",),
    "MW": ("Republic of Malawi",),
    "MX": ("United Mexican States",),
    "MZ": ("Republic of Mozambique",),
    "NA": ("Republic of Namibia",),
    "NE": ("Republic of the Niger",),
    "NG": ("Federal Republic of Nigeria",),
    "NI": ("Republic of Nicaragua",),
    "NL": ("Kingdom of the Netherlands",),
    "NO": ("Kingdom of Norway",),
    "NP": ("Federal Democratic Republic of Nepal",),
    "NR": ("Republic of Nauru",),
    "OM": ("Sultanate of Oman",),
    "PA": ("Republic of Panama",),
    "PE": ("Republic of Peru",),
    "PG": ("Independent State of Papua New Guinea",),
    "PH": ("Republic of the Philippines",),
    "PK": ("Islamic Republic of Pakistan",),
    "PL": ("Republic of Poland",),
    "PM": ("Saint Pierre and Miquelon",),
    "PN": ("Pitcairn",),
    "PS": ("Palestine, State of", "the State of Palestine"),
    "PT": ("Portuguese Republic",),
    "PW": ("Republic of Palau",),
    "PY": ("Republic of Paraguay",),
    "QA": ("State of Qatar",),
    "RS": ("Republic of Serbia",),
    "RU": ("Russian Federation",),
    "RW": ("Rwandese Republic",),
    "SA": ("Kingdom of Saudi Arabia",),
    "SC": ("Republic of Seychelles",),
    "SD": ("Republic of the Sudan",),
    "SE": ("Kingdom of Sweden",),
    "SG": ("Republic of Singapore",),
    "SH": ("Saint Helena, Ascension and Tristan da Cunha",),
    "SI": ("Republic of Slovenia",),
    "SJ": ("Svalbard and Jan Mayen",),
    "SK": ("Slovak Republic",),
    "SL": ("Republic of Sierra Leone",),
    "SM": ("Republic of San Marino",),
    "SN": ("Republic of Senegal",),
    "SO": ("Federal Republic of Somalia",),
    "SR": ("Republic of Suriname",),
    "SS": ("Republic of South Sudan",),
    "ST": ("Sao Tome and Principe", "Democratic Republic of Sao Tome and Principe"),
    "SV": ("Republic of El Salvador",),
    "SX": ("Sint Maarten (Dutch part)",),
    "SY": ("Syrian Arab Republic",),
    "SZ": ("Kingdom of Eswatini",),
    "TC": ("Turks and Caicos Islands",),
    "TD": ("Republic of Chad",),
    "TG": ("Togolese Republic",),
    "TH": ("Kingdom of Thailand",),
    "TJ": ("Republic of Tajikistan",),
    "TL": ("Democratic Republic of Timor-Leste",),
    "TN": ("Republic of Tunisia",),
    "TO": ("Kingdom of Tonga",),
    "TR": ("Republic of Türkiye",),
    "TT": ("Trinidad and Tobago", "Republic of Trinidad and Tobago"),
    "TW": ("Taiwan, Province of China",),
    "TZ": ("Tanzania, United Republic of", "United Republic of Tanzania"),
    "UG": ("Republic of Uganda",),
    "UM": ("United States Minor Outlying Islands",),
    "US": ("United States of America",),
    "UY": ("Eastern Republic of Uruguay",),
    "UZ": ("Republic of Uzbekistan",),
    "VA": ("Holy See (Vatican City State)",),
    "VC": ("Saint Vincent and the Grenadines",),
    "VE": ("Venezuela, Bolivarian Republic of", "Bolivarian Republic of Venezuela"),
    "VG": ("Virgin Islands, British",),
    "VI": ("Virgin Islands, U.S.", "Virgin Islands of the United States"),
    "VN": ("Viet Nam", "Socialist Republic of Viet Nam"),
    "VU": ("Republic of Vanuatu",),
    "WF": ("Wallis and Futuna",),
    "WS": ("Independent State of Samoa",),
    "YE": ("Republic of Yemen",),
    "ZA": ("Republic of South Africa",),
    "ZM": ("Republic of Zambia",),
    "ZW": ("Republic of Zimbabwe",),
}

#: Other countries' names that neither CLDR nor ISO 3166-1 lists (ours): "DPR Korea", the abbreviation of North
#: Korea's official name in common use (UN agencies' country pages write it so).
_OUR_OTHER_NAMES: dict[str, tuple[str, ...]] = {"KP": ("DPR Korea",)}


@functools.cache
def _standard_country_names() -> dict[str, tuple[str, ...]]:
    """ISO code -> CLDR's name, then ISO 3166-1's other names and ours, each name once (case aside)."""
    names = {code: [name] for code, name in _cldr_countries().items()}
    for extra in (_ISO_3166_NAMES, _OUR_OTHER_NAMES):
        for code, more in extra.items():
            known = names.setdefault(code, [])
            folded = {name.casefold() for name in known}
            for name in more:
                if name.casefold() not in folded:
                    known.append(name)
                    folded.add(name.casefold())
    return {code: tuple(known) for code, known in names.items()}


def country_names(mix: MixCubeReference) -> dict[str, list[str]]:
    """Every country's names by ISO code, for "never credit a name inside another country's name": the English
    CLDR name (Babel), ISO 3166-1's other English names, official ones included (`_ISO_3166_NAMES`), our few
    (`_OUR_OTHER_NAMES`: "DPR Korea") and, for the pack's cultures, the pack's own name when it differs. So an
    answer naming North Korea by its official name ("Democratic People's Republic of Korea") or "DPR Korea" does
    not name South Korea by our alias "Korea"."""
    names = {code: list(known) for code, known in _standard_country_names().items()}
    for culture in mix.cultures:
        known = names.setdefault(culture.iso2.upper(), [])
        if culture.name not in known:
            known.append(culture.name)
    return {code: names[code] for code in sorted(names)}


def other_country_names(country: str, mix: MixCubeReference) -> tuple[str, ...]:
    """The names of the countries other than `country`'s (`country_names` less its ISO code's), without any that
    is one of its terms, ours included: an answer's term lying inside one of them is not credited ("Korea" in "North
    Korea"). For an unknown culture, every name but its own."""
    name = " ".join(country.split())
    culture = _culture(name, mix)
    own_code = culture.iso2.upper() if culture is not None else None
    own = {t.casefold() for t in (name, *ground_truth_terms(name, mix, ours=True))}
    return tuple(
        dict.fromkeys(
            other
            for code, names in country_names(mix).items()
            if code != own_code
            for other in names
            if other.casefold() not in own
        )
    )


def verdict(answer: str, country: str, mix: MixCubeReference, *, ours: bool = False) -> str:
    """`answer_match.answer_verdict` of the answer for `country`: CORRECT, NEGATED or ABSENT."""
    return answer_verdict(answer, ground_truth_terms(country, mix, ours=ours), other_country_names(country, mix))


def is_correct(answer: str, country: str, mix: MixCubeReference, *, ours: bool = False) -> bool:
    """§3's rule: correct only if the answer names the ground-truth country or culture (`ground_truth_terms`, our
    aliases too with `ours`) as a whole name, outside another country's name and not plainly negated."""
    return verdict(answer, country, mix, ours=ours) == CORRECT


class _Scorer:
    """`verdict` for many answers against one pack: each culture's terms and other countries' names computed once."""

    def __init__(self, mix: MixCubeReference) -> None:
        self.mix = mix
        self._names: dict[tuple[str, bool], tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def verdict(self, answer: str, country: str, *, ours: bool = False) -> str:
        key = (country, ours)
        if key not in self._names:
            self._names[key] = (
                ground_truth_terms(country, self.mix, ours=ours),
                other_country_names(country, self.mix),
            )
        terms, others = self._names[key]
        return answer_verdict(answer, terms, others)


def cultures_named(
    answer: str,
    cultures: Sequence[str],
    mix: MixCubeReference,
    enough: int | None = None,
    *,
    scorer: _Scorer | None = None,
) -> int:
    """How many of `cultures` the answer names by §3's rule with the paper's terms (`is_correct` for each);
    counting stops at `enough`."""
    scorer = scorer or _Scorer(mix)
    named = 0
    for culture in cultures:
        if scorer.verdict(answer, culture) == CORRECT:
            named += 1
            if enough is not None and named >= enough:
                break
    return named


def _several_cultures(per_image: pa.Table, mix: MixCubeReference) -> tuple[int, int]:
    """Scored answers that name more than one culture (the reference's five and any other the rows hold), and how
    many of them were scored correct. §3's rule counts such an answer correct when the right one is among them, so
    an answer listing every culture is always right: the card says so when there are any."""
    countries = per_image.column("country").to_pylist()
    cultures = [c.adjective for c in mix.cultures]
    cultures += [c for c in dict.fromkeys(countries) if _culture(c, mix) is None]
    # the cultures an answer names at all, in one scan of all their terms: only they can be named by the rule, and
    # an answer naming one culture or none (most) needs no verdict here
    groups = [ground_truth_terms(culture, mix) for culture in cultures]
    scorer = _Scorer(mix)
    several = correct = 0
    for answer, error, right in zip(
        per_image.column("answer").to_pylist(),
        per_image.column("error").to_pylist(),
        per_image.column("correct").to_pylist(),
        strict=True,
    ):
        if error is not None or not answer:
            continue
        named = [cultures[number] for number in groups_named(answer, groups)]
        if len(named) >= 2 and cultures_named(answer, named, mix, enough=2, scorer=scorer) >= 2:
            several += 1
            correct += bool(right)
    return several, correct


def several_cultures_warnings(metrics: dict[str, Any]) -> list[str]:
    """The card's note on answers that name more than one culture (an empty list when none does)."""
    several = metrics.get("answers_naming_several_cultures") or 0
    if not several:
        return []
    correct = metrics.get("correct_naming_several_cultures") or 0
    return [
        f"{several} of {metrics['answered']} scored answers name more than one culture, and {correct} of them were "
        "scored correct: the paper's rule (§3) counts an answer correct when it contains the ground-truth culture, "
        "whatever else it names, so an answer listing every culture is always right. The accuracy counts them as the "
        "paper does; `answers_naming_several_cultures` and `correct_naming_several_cultures` in metrics.json say "
        "how much of it they make."
    ]


def answer_rule(mix: MixCubeReference) -> AnswerRule:
    """metrics.json's account of the rule: what each key means, whose it is, and each culture's terms."""
    return {
        "accuracy": "the paper's (MixCuBe §3, App. A.5): the answer names the culture's country, the culture "
        "(its label, as the release spells it) or one of App. A.5's labels as a whole name, not inside another "
        "country's name, not plainly negated",
        "accuracy_with_our_aliases": "ours: the same rule with our aliases accepted too (`terms.*.ours`)",
        "negated_answers": "scored answers whose every mention of a term is plainly negated ('not South Korea'): "
        "scored incorrect, and counted here",
        "terms": {
            c.adjective: {
                "paper": list(ground_truth_terms(c.adjective, mix)),
                "ours": [
                    t
                    for t in ground_truth_terms(c.adjective, mix, ours=True)
                    if t not in ground_truth_terms(c.adjective, mix)
                ],
            }
            for c in mix.cultures
        },
    }


def _our_aliases_named(rule: AnswerRule | None) -> list[str]:
    """Our aliases, as metrics.json's `answer_rule` lists them per culture."""
    terms = (rule.get("terms") if rule else None) or {}
    return list(dict.fromkeys(t for entry in terms.values() for t in entry.get("ours", [])))


def answer_rule_warnings(metrics: dict[str, Any]) -> list[str]:
    """The card's notes on the answer rule (an empty list when there is nothing to say): negated answers, and what
    our aliases change."""
    out = []
    negated = metrics.get("negated_answers") or 0
    if negated:
        out.append(
            f"{negated} of {metrics['answered']} scored answers name the ground truth only after a plain negation "
            '("not South Korea"): they are scored incorrect and counted in `negated_answers`.'
        )
    paper, ours = metrics.get("accuracy"), metrics.get("accuracy_with_our_aliases")
    if paper is not None and ours is not None and ours != paper:
        aliases = ", ".join(_our_aliases_named(metrics.get("answer_rule")))
        out.append(
            f"`accuracy_with_our_aliases` ({ours:.3f}) is ours, not the paper's: it also accepts our aliases "
            f"({aliases}); `accuracy` ({paper:.3f}) is the paper's rule (the "
            "country, the culture and App. A.5's labels)."
        )
    return out


def parse_verdict(text: str | None) -> bool | None:
    """The judge's Yes/No (App. B.3: "Answer only in 'Yes' or 'No'"), read robustly: case, quotes, markdown and
    punctuation are ignored; a first word of yes/no decides; otherwise exactly one of the two words must occur.
    None when the output says neither, or both without leading with one."""
    words = re.sub(r"[^a-z]+", " ", (text or "").lower()).split()
    if not words:
        return None
    if words[0] in ("yes", "no"):
        return words[0] == "yes"
    found = {word for word in words if word in ("yes", "no")}
    return found.pop() == "yes" if len(found) == 1 else None


_VERDICT_COLUMNS = ("correct", "correct_with_our_aliases", "negated", "negated_with_our_aliases")


def _score(answer: Answer, country: str, scorer: _Scorer) -> _Verdicts:
    """The verdict columns of one answer: `correct` and `negated` by the paper's terms, and the same with ours."""
    if answer.error is None:
        text = answer.text or ""
        paper, with_ours = scorer.verdict(text, country), scorer.verdict(text, country, ours=True)
        return {
            "correct": paper == CORRECT,
            "correct_with_our_aliases": with_ours == CORRECT,
            "negated": paper == NEGATED,
            "negated_with_our_aliases": with_ours == NEGATED,
        }
    if answer.error in MODEL_OUTCOMES:  # a refusal or an empty answer names no country: incorrect (§3)
        return {
            "correct": False,
            "correct_with_our_aliases": False,
            "negated": False,
            "negated_with_our_aliases": False,
        }
    # a transport failure is not scored
    return {"correct": None, "correct_with_our_aliases": None, "negated": None, "negated_with_our_aliases": None}


# -- evaluation ----------------------------------------------------------------------------------------------------
REQUIRED_COLUMNS = ("country", "category", "ethnicity", "sample_id", "original_id", "image")


def _image_bytes(rows: pa.Table) -> pa.ChunkedArray:
    """The encoded image bytes per row, from an HF Image struct {bytes, path} or a binary column."""
    column = rows.column("image")
    if pa.types.is_struct(column.type):
        if column.type.get_field_index("bytes") < 0:
            raise ValueError("the image column is a struct without a `bytes` field")
        index = column.type.get_field_index("bytes")
        # flatten(), unlike field(), gives a null struct (a row without an image) a null child value.
        return pa.chunked_array([chunk.flatten()[index] for chunk in column.chunks], type=column.type.field(index).type)
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column
    raise ValueError(f"the image column has type {column.type}; expected an HF Image struct or binary")


def _column(rows: pa.Table, name: str, default: Any) -> list[Any]:
    return rows.column(name).to_pylist() if name in rows.column_names else [default] * rows.num_rows


def evaluate_images(
    rows: pa.Table,
    vlm: VisionLanguageModel,
    judge: VisionLanguageModel | None,
    *,
    mix: MixCubeReference,
    progress: Callable[[int], None] | None = None,
    workers: int = 1,
    marker_question: MarkerQuestion = "shared",
) -> pa.Table:
    """Ask `vlm` about every image of a MixCuBe table (the release's `default` rows with their `image` column) and
    score the answers; one `MIXCUBE_PER_IMAGE` row per input row, in input order, failures included.

    Food images also get the Cultural Marker Identification verdict of `judge` (None: `marker_error="no_judge"`).
    `progress(n)` is called, from this thread, with the number of images just finished (an increment, 1 each).
    `workers` > 1 asks that many images at once (threads; remote backends). A model that answers in batches
    (`AnswersInBatches` with a `batch_size` above 1: a local model) is asked all its questions batch by batch instead,
    then the judge's, and `progress` gets the row count at the end. Raises only for input errors (missing columns, a
    category without a prompt) and the backends' config errors."""
    missing = [name for name in REQUIRED_COLUMNS if name not in rows.column_names]
    if missing:
        raise ValueError(f"MixCuBe rows lack the column(s) {missing}")
    prompts = mix.evaluation_prompts
    unknown = sorted(set(rows.column("category").to_pylist()) - set(prompts))
    if unknown:
        raise ValueError(f"categories without an App. B.2 prompt: {unknown}; known: {sorted(prompts)}")
    if workers < 1:
        raise ValueError("workers must be at least 1")
    images = _image_bytes(rows)
    scorer = _Scorer(mix)
    meta = [
        _ImageMeta(
            sample_id=sample_id,
            original_id=original_id,
            country=country,
            category=category,
            ethnicity=ethnicity,
            placeholder=bool(placeholder),
            food_label=food_label,
        )
        for sample_id, original_id, country, category, ethnicity, placeholder, food_label in zip(
            rows.column("sample_id").to_pylist(),
            rows.column("original_id").to_pylist(),
            rows.column("country").to_pylist(),
            rows.column("category").to_pylist(),
            rows.column("ethnicity").to_pylist(),
            _column(rows, "placeholder", False),
            _column(rows, "food_label", None),
            strict=True,
        )
    ]

    def one(index: int) -> PerImageRow:
        return _evaluate_row(meta[index], images[index].as_py(), vlm, judge, marker_question, mix, scorer)

    out: list[PerImageRow | None] = [None] * rows.num_rows
    if isinstance(vlm, AnswersInBatches) and vlm.batch_size > 1:
        out = _rows_asked_in_batches(meta, images, vlm, judge, marker_question, mix, scorer)
        if progress is not None:
            progress(rows.num_rows)
    elif workers == 1:
        for index in range(rows.num_rows):
            out[index] = one(index)
            if progress is not None:
                progress(1)
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mixcube-vlm") as pool:
            futures = {pool.submit(one, index): index for index in range(rows.num_rows)}
            try:
                for future in as_completed(futures):
                    out[futures[future]] = future.result()
                    if progress is not None:
                        progress(1)
            except BaseException:  # a config error: do not ask the remaining images
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    table = pa.Table.from_pylist(out, schema=MIXCUBE_PER_IMAGE)
    failed = sum(1 for row in out if row is not None and row["correct"] is None)
    logger.info("mixcube: %d image(s) asked, %d unscored", table.num_rows, failed)
    return table


class _Recorder:
    """Stands in for a model while `_evaluate_row` runs dry: it notes every question it is asked and answers from
    `known` (placeholder success until the real answer is known). So the rows say which questions they ask (one
    place), and a model that answers in batches is asked them together."""

    runs_locally = False

    def __init__(self, model: VisionLanguageModel) -> None:
        self.identity = model.identity
        self.known: dict[Question, Answer] = {}
        self.asked: dict[Question, None] = {}  # in first-asked order, each once

    def ask(self, prompt: str, image: bytes | None = None) -> Answer:
        known = self.known.get((prompt, image))
        if known is None:
            self.asked[(prompt, image)] = None
            return Answer("", None, None, 0, False)
        return known

    def answer_from(self, model: VisionLanguageModel) -> None:
        """Asks `model` what was noted (in batches when it answers in batches) and keeps the answers."""
        questions = list(self.asked)
        self.asked.clear()
        if isinstance(model, AnswersInBatches):
            self.known.update(zip(questions, model.ask_many(questions), strict=True))
        else:
            self.known.update((question, model.ask(*question)) for question in questions)


def _rows_asked_in_batches(
    rows: list[_ImageMeta],
    images: pa.ChunkedArray,
    vlm: VisionLanguageModel,
    judge: VisionLanguageModel | None,
    marker_question: MarkerQuestion,
    mix: MixCubeReference,
    scorer: _Scorer,
) -> list[PerImageRow | None]:
    """The rows of `evaluate_images` for a model that answers in batches, in three dry-then-real passes: the model's
    questions, then the judge's (they quote the model's answers), then the rows from the answers."""
    pictures = images.to_pylist()
    model = _Recorder(vlm)
    judged = _Recorder(judge) if judge is not None else None

    def dry_run(judge_stand_in: _Recorder | None) -> None:
        for row, image in zip(rows, pictures, strict=True):
            _evaluate_row(row, image, model, judge_stand_in, marker_question, mix, scorer)

    dry_run(None)
    model.answer_from(vlm)
    if judged is not None and judge is not None:
        dry_run(judged)
        judged.answer_from(judge)
    return [
        _evaluate_row(row, image, model, judged, marker_question, mix, scorer)
        for row, image in zip(rows, pictures, strict=True)
    ]


def _evaluate_row(
    row: _ImageMeta,
    image: bytes | None,
    vlm: VisionLanguageModel,
    judge: VisionLanguageModel | None,
    marker_question: MarkerQuestion,
    mix: MixCubeReference,
    scorer: _Scorer,
) -> PerImageRow:
    prompt = mix.evaluation_prompts[row["category"]]
    no_image = Answer(None, "no_image", "the row holds no image bytes", 0, False)
    answer = vlm.ask(prompt, image) if image is not None else no_image
    markers: _MarkerColumns = {
        "marker_prompt": None,
        "marker_answer": None,
        "marker_judge_raw": None,
        "marker_correct": None,
        "marker_error": None,
        "marker_error_detail": None,
    }
    if row["category"] == MARKER_CATEGORY:
        if marker_question == "separate":
            marker_prompt = MARKER_PROMPT
            marker = vlm.ask(MARKER_PROMPT, image) if image is not None else no_image
        else:
            marker_prompt, marker = prompt, answer
        markers = _marker(marker_prompt, marker, row["food_label"], judge)
    return {
        **row,
        "image_sha256": None if image is None else sha256_bytes(image),
        "prompt": prompt,
        "answer": answer.text,
        **_score(answer, row["country"], scorer),
        "error": answer.error,
        "error_detail": answer.detail,
        "attempts": answer.attempts,
        "cached": answer.cached,
        **markers,
    }


def _marker(prompt: str, answer: Answer, labels: str | None, judge: VisionLanguageModel | None) -> _MarkerColumns:
    """The marker columns of one Food image: the judge's verdict on `answer`, or why there is none."""
    out: _MarkerColumns = {
        "marker_prompt": prompt,
        "marker_answer": answer.text,
        "marker_judge_raw": None,
        "marker_correct": None,
        "marker_error": None,
        "marker_error_detail": None,
    }
    if answer.error in MODEL_OUTCOMES:  # no food named: incorrect, as for the country
        return {**out, "marker_correct": False, "marker_error": answer.error, "marker_error_detail": answer.detail}
    if answer.error is not None:
        return {**out, "marker_error": answer.error, "marker_error_detail": answer.detail}
    label = (labels or "").strip()
    if not label:
        return {**out, "marker_error": "no_label", "marker_error_detail": "the image has no food_label"}
    if judge is None:
        return {**out, "marker_error": "no_judge", "marker_error_detail": "no judge model was given"}
    verdict = judge.ask(MARKER_JUDGE_PROMPT.format(label=label, response=answer.text or ""))
    out["marker_judge_raw"] = verdict.text
    if verdict.error is not None:
        return {**out, "marker_error": f"judge_{verdict.error}", "marker_error_detail": verdict.detail}
    decided = parse_verdict(verdict.text)
    if decided is None:
        return {**out, "marker_error": "bad_judge_output", "marker_error_detail": "neither a clear Yes nor a clear No"}
    return {**out, "marker_correct": decided}


# -- tables --------------------------------------------------------------------------------------------------------
def _ordered(values: Iterable[str], preferred: Sequence[str]) -> list[str]:
    """Distinct `values`: those in `preferred` first, in its order, then the others in first-seen order."""
    seen = list(dict.fromkeys(values))
    return [v for v in preferred if v in seen] + [v for v in seen if v not in preferred]


def _countries(values: Iterable[str], mix: MixCubeReference) -> list[str]:
    return _ordered(values, [c.adjective for c in mix.cultures])


def _categories(values: Iterable[str], mix: MixCubeReference) -> list[str]:
    return _ordered(values, mix.categories)


def _ethnicities(values: Iterable[str], mix: MixCubeReference) -> list[str]:
    return _ordered(values, [mix.original_label, *(e.label for e in mix.ethnicities)])


def _rate(correct: int, answered: int) -> float | None:
    return correct / answered if answered else None


class _Tally:
    """Scored counts of a group of per-image rows."""

    def __init__(self) -> None:
        self.n = self.answered = self.correct = 0
        self.correct_with_our_aliases = self.negated = self.negated_with_our_aliases = 0
        self.marker_answered = self.marker_correct = 0
        self.food = False

    def add(self, row: _TallyRow) -> None:
        self.n += 1
        if row["correct"] is not None:
            self.answered += 1
            self.correct += bool(row["correct"])
            # a row without the column (written by hand, or before it existed) counts as not credited
            self.correct_with_our_aliases += bool(row.get("correct_with_our_aliases"))
            self.negated += bool(row.get("negated"))
            self.negated_with_our_aliases += bool(row.get("negated_with_our_aliases"))
        if row["category"] == MARKER_CATEGORY:
            self.food = True
            if row["marker_correct"] is not None:
                self.marker_answered += 1
                self.marker_correct += bool(row["marker_correct"])

    @property
    def accuracy(self) -> float | None:
        return _rate(self.correct, self.answered)

    @property
    def accuracy_with_our_aliases(self) -> float | None:
        return _rate(self.correct_with_our_aliases, self.answered)

    @property
    def marker_accuracy(self) -> float | None:
        return _rate(self.marker_correct, self.marker_answered) if self.food else None


def _tallies(per_image: pa.Table, key: Callable[[_TallyRow], _Key]) -> dict[_Key, _Tally]:
    tallies: dict[_Key, _Tally] = {}
    columns = ["country", "category", "ethnicity", "correct", "marker_correct", *_VERDICT_COLUMNS[1:]]
    rows: list[_TallyRow] = per_image.select([c for c in columns if c in per_image.column_names]).to_pylist()
    for row in rows:
        tallies.setdefault(key(row), _Tally()).add(row)
    return tallies


def _groups(per_image: pa.Table) -> dict[tuple[str, str, str], _Tally]:
    return _tallies(per_image, lambda r: (r["country"], r["category"], r["ethnicity"]))


def _sorted_keys(keys: Iterable[tuple[str, str, str]], mix: MixCubeReference) -> list[tuple[str, str, str]]:
    keys = list(keys)
    countries = _countries((k[0] for k in keys), mix)
    categories = _categories((k[1] for k in keys), mix)
    ethnicities = _ethnicities((k[2] for k in keys), mix)
    return sorted(keys, key=lambda k: (countries.index(k[0]), categories.index(k[1]), ethnicities.index(k[2])))


def accuracy_table(per_image: pa.Table, mix: MixCubeReference) -> pa.Table:
    """Accuracy per country x category x ethnicity (App. D Table 7; Table 8a in the marker columns, Food only).
    Unscored rows count in `n` and `failed`, never in the denominator `answered`."""
    groups = _groups(per_image)
    rows = []
    for key in _sorted_keys(groups, mix):
        tally = groups[key]
        food = tally.food
        rows.append(
            {
                "country": key[0],
                "category": key[1],
                "ethnicity": key[2],
                "n": tally.n,
                "answered": tally.answered,
                "failed": tally.n - tally.answered,
                "correct": tally.correct,
                "accuracy": tally.accuracy,
                "correct_with_our_aliases": tally.correct_with_our_aliases,
                "accuracy_with_our_aliases": tally.accuracy_with_our_aliases,
                "marker_answered": tally.marker_answered if food else None,
                "marker_correct": tally.marker_correct if food else None,
                "marker_accuracy": tally.marker_accuracy,
            }
        )
    return pa.Table.from_pylist(rows, schema=MIXCUBE_ACCURACY)


def _difference(original: float | None, swap: float | None) -> float | None:
    return None if original is None or swap is None else original - swap


def swap_drops(per_image: pa.Table, mix: MixCubeReference) -> pa.Table:
    """Per country x category x swap ethnicity: the originals' accuracy, the swap's, and the drop (original - swap;
    positive when the swap lost accuracy). Groups are compared as wholes, as App. D's tables do, not image by image;
    a group with nothing scored has a null accuracy and a null drop."""
    groups = _groups(per_image)
    rows = []
    for country, category, ethnicity in _sorted_keys(groups, mix):
        if ethnicity == mix.original_label:
            continue
        swap = groups[(country, category, ethnicity)]
        original = groups.get((country, category, mix.original_label), _Tally())
        food = category == MARKER_CATEGORY
        rows.append(
            {
                "country": country,
                "category": category,
                "ethnicity": ethnicity,
                "original_answered": original.answered,
                "swap_answered": swap.answered,
                "original_accuracy": original.accuracy,
                "swap_accuracy": swap.accuracy,
                "drop": _difference(original.accuracy, swap.accuracy),
                "marker_original_accuracy": original.marker_accuracy if food else None,
                "marker_swap_accuracy": swap.marker_accuracy if food else None,
                "marker_drop": _difference(original.marker_accuracy, swap.marker_accuracy) if food else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=MIXCUBE_SWAP_DROPS)


def _by(
    per_image: pa.Table,
    column: _GroupColumn,
    order: Callable[[Iterable[str], MixCubeReference], list[str]],
    mix: MixCubeReference,
) -> dict[str, _Tally]:
    tallies = _tallies(per_image, lambda r: r[column])
    return {value: tallies[value] for value in order(tallies, mix)}


def summary(per_image: pa.Table, mix: MixCubeReference) -> dict[str, Any]:
    """JSON-ready headline numbers: accuracy overall, by ethnicity, country and category, original vs synthesized
    (§3's comparison); the accuracy with our aliases (ours, overall and by country) and the negated answers, the
    rule's terms beside them (`answer_rule`); the marker accuracy on Food, the failures by error class, and the
    scored answers that name more than one culture (`several_cultures_warnings`)."""
    everything = _tallies(per_image, lambda r: "all").get("all", _Tally())
    kind = _tallies(per_image, lambda r: "original" if r["ethnicity"] == mix.original_label else "synthesized")
    original, synthesized = kind.get("original", _Tally()), kind.get("synthesized", _Tally())
    food = per_image.filter(pc.equal(per_image["category"], MARKER_CATEGORY))
    marker = _tallies(food, lambda r: "all").get("all", _Tally())
    errors = Counter(e for e in per_image.column("error").to_pylist() if e is not None)
    unscored = Counter(
        str(e)
        for e, c in zip(per_image["error"].to_pylist(), per_image["correct"].to_pylist(), strict=True)
        if c is None
    )
    several, several_correct = _several_cultures(per_image, mix)
    out: MixcubeSummary = {
        "images": everything.n,
        "answered": everything.answered,
        "correct": everything.correct,
        "failed": everything.n - everything.answered,
        "accuracy": everything.accuracy,
        "accuracy_by_ethnicity": {k: t.accuracy for k, t in _by(per_image, "ethnicity", _ethnicities, mix).items()},
        "accuracy_by_country": {k: t.accuracy for k, t in _by(per_image, "country", _countries, mix).items()},
        "accuracy_by_category": {k: t.accuracy for k, t in _by(per_image, "category", _categories, mix).items()},
        "accuracy_original": original.accuracy,
        "accuracy_synthesized": synthesized.accuracy,
        "drop_original_minus_synthesized": _difference(original.accuracy, synthesized.accuracy),
        # ours: the same rule with our aliases accepted too (Korea, Burma, Burmese)
        "accuracy_with_our_aliases": everything.accuracy_with_our_aliases,
        "correct_with_our_aliases": everything.correct_with_our_aliases,
        "accuracy_with_our_aliases_by_country": {
            k: t.accuracy_with_our_aliases for k, t in _by(per_image, "country", _countries, mix).items()
        },
        # scored answers incorrect because every mention of the ground truth was negated ("not South Korea")
        "negated_answers": everything.negated,
        "negated_answers_with_our_aliases": everything.negated_with_our_aliases,
        "answer_rule": answer_rule(mix),
        "answers_naming_several_cultures": several,  # scored answers naming more than one culture (§3 allows it)
        "correct_naming_several_cultures": several_correct,
        "marker_images": marker.n,
        "marker_judged": marker.marker_answered,
        "marker_accuracy": _rate(marker.marker_correct, marker.marker_answered),
        "marker_accuracy_by_ethnicity": {
            k: _rate(t.marker_correct, t.marker_answered) for k, t in _by(food, "ethnicity", _ethnicities, mix).items()
        },
        "failures": dict(sorted(unscored.items())),
        "errors": dict(sorted(errors.items())),
        "marker_errors": dict(sorted(Counter(e for e in food.column("marker_error").to_pylist() if e).items())),
        "placeholder_images": sum(bool(v) for v in per_image.column("placeholder").to_pylist()),
    }
    return dict(out)


# -- figures -------------------------------------------------------------------------------------------------------
#: App. A.1 Table 1: the paper's country codes (UK, not GB) and category abbreviations.
_CATEGORY_ABBREVIATIONS = {"Clothes": "Clot", "Festival": "Fest", "Food": "Food"}


def _country_code(country: str, mix: MixCubeReference) -> str:
    culture = _culture(country, mix)
    if culture is None:
        return country
    return "UK" if culture.iso2 == "GB" else culture.iso2


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(figure: Any) -> bytes:
    plt = _pyplot()
    buffer = io.BytesIO()
    # No Software entry: the PNG bytes do not change with the matplotlib version.
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def _empty_png(title: str) -> bytes:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(4, 2))
    axes.axis("off")
    axes.text(0.5, 0.5, "no scored images", ha="center", va="center")
    axes.set_title(title, fontsize=10)
    return _png(figure)


def _task_columns(task: Task) -> tuple[str, str]:
    return (
        ("accuracy", "Country Identification")
        if task == "country"
        else ("marker_accuracy", "Cultural Marker Identification")
    )


def fig3_bars_png(per_image: pa.Table, mix: MixCubeReference, task: Task = "country") -> bytes:
    """Fig. 3: for each country-category pair, the accuracy on the originals (solid) and on the synthesized images
    of the four ethnicities together (pale); a marker per swap ethnicity shows its own accuracy."""
    column, title = _task_columns(task)
    table = accuracy_table(per_image, mix)
    if task == "marker":
        table = table.filter(pc.equal(table["category"], MARKER_CATEGORY))
    rows = table.to_pylist()
    pairs = list(dict.fromkeys((r["country"], r["category"]) for r in rows))
    if not pairs:
        return _empty_png(f"{title} accuracy")
    plt = _pyplot()
    original_label = mix.original_label
    swaps = _ethnicities((r["ethnicity"] for r in rows if r["ethnicity"] != original_label), mix)
    swaps = [e for e in swaps if e != original_label]
    answered_key = "answered" if task == "country" else "marker_answered"
    correct_key = "correct" if task == "country" else "marker_correct"
    countries = _countries((p[0] for p in pairs), mix)
    colours = plt.get_cmap("tab10")
    markers = "o^sDvP*X"
    figure, axes = plt.subplots(figsize=(max(6.0, 0.6 * len(pairs) + 2.5), 3.8))
    width = 0.38
    for x, (country, category) in enumerate(pairs):
        group = [r for r in rows if r["country"] == country and r["category"] == category]
        colour = colours(countries.index(country) % 10)
        original = next((r[column] for r in group if r["ethnicity"] == original_label), None)
        synthesized = [r for r in group if r["ethnicity"] != original_label]
        pooled = _rate(sum(r[correct_key] or 0 for r in synthesized), sum(r[answered_key] or 0 for r in synthesized))
        if original is not None:
            axes.bar(x - width / 2, original, width, color=colour, edgecolor="black", linewidth=0.4)
        if pooled is not None:
            axes.bar(x + width / 2, pooled, width, color=colour, alpha=0.35, edgecolor="black", linewidth=0.4)
        for r in synthesized:
            if r[column] is not None:
                k = swaps.index(r["ethnicity"])
                axes.plot(x + width / 2, r[column], markers[k % len(markers)], color="black", markersize=3.5)
    axes.set_xticks(
        range(len(pairs)),
        [f"{_country_code(c, mix)}-{_CATEGORY_ABBREVIATIONS.get(k, k)}" for c, k in pairs],
        rotation=60,
    )
    axes.set_ylim(0, 1.05)
    axes.set_ylabel("accuracy")
    handles = [
        plt.Rectangle((0, 0), 1, 1, color="grey", label="original"),
        plt.Rectangle((0, 0), 1, 1, color="grey", alpha=0.35, label="synthesized (average)"),
        *[
            plt.Line2D([], [], linestyle="", marker=markers[k % len(markers)], color="black", label=e)
            for k, e in enumerate(swaps)
        ],
    ]
    axes.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes.set_title(f"{title} accuracy: original vs synthesized", fontsize=10)
    return _png(figure)


def fig4_heatmap_png(per_image: pa.Table, mix: MixCubeReference, task: Task = "country") -> bytes:
    """Fig. 4 (Fig. 8b with `task="marker"`): rows are countries, columns category x swap ethnicity, each cell the
    swap's accuracy minus the originals' (negative = a drop), on a diverging colormap centred at 0; §3's
    resembling pairs (`RESEMBLING_PAIRS`) are boxed in red; a cell without data is grey."""
    _, title = _task_columns(task)
    drops = swap_drops(per_image, mix)
    if task == "marker":
        drops = drops.filter(pc.equal(drops["category"], MARKER_CATEGORY))
    original_key, swap_key = (
        ("original_accuracy", "swap_accuracy")
        if task == "country"
        else ("marker_original_accuracy", "marker_swap_accuracy")
    )
    rows = drops.to_pylist()
    if not rows:
        return _empty_png(f"{title} accuracy difference")
    plt = _pyplot()
    from matplotlib.colors import TwoSlopeNorm

    countries = _countries((r["country"] for r in rows), mix)
    categories = _categories((r["category"] for r in rows), mix)
    swaps = [e for e in _ethnicities((r["ethnicity"] for r in rows), mix) if e != mix.original_label]
    columns = [(c, e) for c in categories for e in swaps]
    matrix = np.full((len(countries), len(columns)), np.nan)
    for r in rows:
        if r[original_key] is not None and r[swap_key] is not None:
            matrix[countries.index(r["country"]), columns.index((r["category"], r["ethnicity"]))] = (
                r[swap_key] - r[original_key]
            )
    finite = matrix[np.isfinite(matrix)]
    limit = max(0.05, float(np.abs(finite).max()) if finite.size else 0.0)
    colormap = plt.get_cmap("BrBG").with_extremes(bad="#d9d9d9")
    figure, axes = plt.subplots(figsize=(max(5.0, 0.55 * len(columns) + 2.5), max(2.2, 0.5 * len(countries) + 1.5)))
    image = axes.imshow(
        # numpy.ma's stubs leave masked_invalid unannotated, an untyped call under the strict flags.
        np.ma.masked_invalid(matrix),  # type: ignore[no-untyped-call]
        cmap=colormap,
        norm=TwoSlopeNorm(0.0, -limit, limit),
        aspect="auto",
    )
    for (i, j), value in np.ndenumerate(matrix):
        label = "n/a" if not np.isfinite(value) else f"{value:+.2f}"
        dark = np.isfinite(value) and abs(value) > 0.6 * limit
        axes.text(j, i, label, ha="center", va="center", fontsize=7, color="white" if dark else "black")
        if (countries[i], columns[j][1]) in RESEMBLING_PAIRS:
            axes.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.8))
    axes.set_xticks(
        range(len(columns)), [f"{_CATEGORY_ABBREVIATIONS.get(c, c)}\n{e}" for c, e in columns], fontsize=7, rotation=90
    )
    axes.set_yticks(range(len(countries)), [_country_code(c, mix) for c in countries], fontsize=8)
    figure.colorbar(image, ax=axes, fraction=0.04, label="swap - original")
    axes.set_title(f"{title} accuracy difference (synthesized - original)", fontsize=10)
    return _png(figure)
