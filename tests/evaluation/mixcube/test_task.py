"""MixCuBe evaluation (evaluation/mixcube/task.py, vlm.py): the paper's prompts and scoring rules, the three VLM
backends against a fake OpenAI-compatible server, the fake Gemini server and a tiny random transformers model, and
the tables and figures. Assertions are about behaviour, never about what a model answers."""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from pydantic import TypeAdapter, ValidationError

from data.clients.devices import DeviceError
from data.clients.retry import RetryPolicy
from data.reference import default_pack
from evaluation.mixcube import task as m
from evaluation.models.vlm import (
    Answer,
    GeminiVlmConfig,
    OpenAIChatConfig,
    OpenAIChatVlm,
    TransformersVlmConfig,
    VisionLanguageModel,
    VlmConfig,
    VlmConfigError,
    VlmIdentity,
    folder_sha256,
    public_endpoint,
)
from tests.support.fake_gemini import FakeGemini
from tests.support.fake_gemini import RecordedRequest as GeminiRequest
from tests.support.fake_gemini import Reply as GeminiReply
from tests.support.fake_gemini import error_reply as gemini_error
from tests.support.fake_gemini import text_reply as gemini_text
from tests.support.fake_openai import (
    FakeOpenAI,
    RecordedRequest,
    Reply,
    error_reply,
    malformed_reply,
    no_choices_reply,
    refusal_reply,
    text_reply,
)
from tests.support.paths import REPO_ROOT

API_KEY = "sk-test-DO-NOT-LEAK-0123456789abcdef"
KEY_ENV = "CULTUREBENCH_TEST_VLM_KEY"
GEMINI_KEY = "AIzaFAKE-vlm-key-DO-NOT-LEAK-987654"
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.0, max_delay_s=0.0)
MIX = default_pack().mixcube()
DEMO_RELEASE = REPO_ROOT / "releases" / "mixcube" / "0.1.0-demo" / "default"


# -- inputs ---------------------------------------------------------------------------------------------------------
def jpeg(colour: tuple[int, int, int], size: tuple[int, int] = (48, 36)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


#: (country, category, ethnicity, colour, food_label): what a fake model "sees" is told apart by the colour.
ROWS = [
    ("Korean", "Food", "original", (200, 30, 30), "Jjajangmyeon, Kimchi, Ramyeon, Black Bean Noodles"),
    ("Korean", "Food", "EastAsian", (30, 200, 30), "Jjajangmyeon, Kimchi, Ramyeon, Black Bean Noodles"),
    ("Korean", "Food", "SouthAsian", (30, 30, 200), "Jjajangmyeon, Kimchi, Ramyeon, Black Bean Noodles"),
    ("British", "Festival", "original", (220, 220, 30), None),
    ("British", "Festival", "Caucasian", (30, 220, 220), None),
    ("American", "Clothes", "original", (220, 30, 220), None),
]


def make_rows(rows: list[tuple] = ROWS) -> pa.Table:
    """A MixCuBe-shaped table (the release's columns that evaluation reads) with small JPEGs as HF Image structs."""
    records = []
    for i, (country, category, ethnicity, colour, label) in enumerate(rows):
        original_id = f"t-{country.lower()}-{category.lower()}-{i // 3:02d}"
        image = jpeg(colour)
        records.append(
            {
                "country": country,
                "category": category,
                "ethnicity": ethnicity,
                "sample_id": f"{original_id}-{ethnicity.lower()}-{i}",
                "original_id": original_id,
                "placeholder": ethnicity != "original",
                "food_label": label,
                "sha256": hashlib.sha256(image).hexdigest(),
                "image": {"bytes": image, "path": f"{i}.jpg"},
            }
        )
    schema = pa.schema(
        [
            ("country", pa.string()),
            ("category", pa.string()),
            ("ethnicity", pa.string()),
            ("sample_id", pa.string()),
            ("original_id", pa.string()),
            ("placeholder", pa.bool_()),
            ("food_label", pa.string()),
            ("sha256", pa.string()),
            ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ]
    )
    return pa.Table.from_pylist(records, schema=schema)


def image_of(table: pa.Table, index: int) -> bytes:
    return table.column("image")[index].as_py()["bytes"]


#: What the fake model answers per image colour: right for the Korean original, right for its EastAsian swap only
#: with our aliases ("Korea" is neither the country, the culture nor one of App. A.5's labels), wrong for the
#: SouthAsian swap.
ANSWERS = {
    (200, 30, 30): "This food is most associated with South Korea. It is kimchi.",
    (30, 200, 30): "Korea, surely: this is jjajangmyeon.",
    (30, 30, 200): "This looks like Indian food, probably biryani.",
    (220, 220, 30): "A British festival, likely Guy Fawkes Night.",
    (30, 220, 220): "This celebration is typical of Germany.",
    (220, 30, 220): "Clothing most associated with the US: a cowboy outfit.",
}


def colour_of(data: bytes) -> tuple[int, int, int]:
    with Image.open(io.BytesIO(data)) as image:
        r, g, b = image.convert("RGB").getpixel((10, 10))
    return min(ANSWERS, key=lambda c: sum(abs(x - y) for x, y in zip(c, (r, g, b), strict=True)))


def judge_verdict(prompt: str) -> str:
    """A fake judge: Yes when the response names a food of the label."""
    response = prompt.rsplit("Response:", 1)[-1].lower()
    return "Yes" if any(food in response for food in ("kimchi", "jjajangmyeon")) else "No."


def openai_responder(request: RecordedRequest) -> Reply:
    if not request.images:
        return text_reply(judge_verdict(request.prompt))
    return text_reply(ANSWERS[colour_of(request.images[0][1])])


# -- fixtures -------------------------------------------------------------------------------------------------------
@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(openai_responder) as server:
        yield server


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, API_KEY)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)


def openai_config(fake: FakeOpenAI, **overrides: object) -> OpenAIChatConfig:
    values: dict = {
        "base_url": fake.base_url,
        "model": "fake/Fake-VLM-7B",
        "api_key_env": KEY_ENV,
        "timeout_s": 5.0,
        "retry": FAST_RETRY,
        **overrides,
    }
    return OpenAIChatConfig(**values)


def no_sleep(seconds: float) -> None:
    pass


# -- the paper's prompts and rules ----------------------------------------------------------------------------------
def test_prompts_are_the_papers() -> None:
    assert MIX.evaluation_prompts == {  # App. B.2
        "Clothes": "Which country is the clothing in the photo the most associated with? Which visual cues did you "
        "use to determine it?",
        "Food": "Which country is the food in the photo the most associated with? Which food is it?",
        "Festival": "Which country is the celebration/cultural activity/festival in the photo the most associated "
        "with? Which visual cues did you use to determine it?",
    }
    # App. B.3 as the paper's text prints it (one flattened paragraph); the module only starts each item on a line.
    paper = (
        "You’ll be provided with a label and a response by a multi-modal LLM that identifies the name of the food "
        "in an image. Determine whether the food name contained in the response can be considered as correct given "
        "the ground-truth label. under label. Consider it as correct (’Yes’) if the names of the food refer to the "
        "same food semantically either in native language or in English. Otherwise, ’No’. - Emphasize on the name "
        "instead of the description. - The names do not need to match exactly. - If the name provided is wrong, "
        'it’s ’No’ even if the description is close. For example, if the label is "Dote Htoe,Wat Thar Dote Htoe,'
        'pork offal skewers,pork skwers" and the response is "This food is mostly associated with Myanmar and is '
        "called ’E Kya Kway’ or ’Inn Kyaik Kyaw’. It’s a popular street food featuring skewers, often with a "
        'variety of meats and offal, cooked in a boiling broth.", the answer should be ’No’ since the name is '
        "completely wrong and the description does not include ’pork’. - Answer only in ’Yes’ or ’No’."
    )
    assert m.MARKER_JUDGE_INSTRUCTIONS.replace("\n", " ") == paper
    filled = m.MARKER_JUDGE_PROMPT.format(label="Kimchi, {odd}", response="It is {kimchi}")
    assert filled.startswith(m.MARKER_JUDGE_INSTRUCTIONS)
    assert filled.endswith('Label: "Kimchi, {odd}"\nResponse: "It is {kimchi}"')


def test_ground_truth_terms() -> None:
    # the paper's: the country, the culture (as the release spells it) and App. A.5's labels (none for South Korea
    # and Myanmar), each once
    assert m.ground_truth_terms("Korean", MIX) == ("South Korea", "Korean")
    assert m.ground_truth_terms("Myanmar", MIX) == ("Myanmar",)
    assert m.ground_truth_terms("Azerbaijani", MIX) == ("Azerbaijan", "Azerbaijani", "Azeri")  # App. A.5
    british = m.ground_truth_terms("British", MIX)
    assert british == ("United Kingdom", "British", "UK", "Scotland", "Britain", "Irish", "Wales", "England", "English")
    american = m.ground_truth_terms("American", MIX)
    assert american == ("United States", "American", "USA", "US", "the United States of America", "the United States",
                        "Hawaii")  # fmt: skip
    # ours after them, only when asked for
    assert m.ground_truth_terms("Korean", MIX, ours=True) == ("South Korea", "Korean", "Korea")
    assert m.ground_truth_terms("Myanmar", MIX, ours=True) == ("Myanmar", "Burma", "Burmese")
    assert m.ground_truth_terms("British", MIX, ours=True) == british  # App. A.5's cultures have none of ours
    assert m.ground_truth_terms("Martian", MIX) == m.ground_truth_terms("Martian", MIX, ours=True) == ("Martian",)


def test_the_pack_keeps_the_papers_aliases_and_ours_apart() -> None:
    korea = next(c for c in MIX.cultures if c.iso2 == "KR")
    assert korea.label_aliases == [] and korea.our_aliases == ["Korea"]
    assert "ours" in MIX.sources["our_aliases"].lower() and "App. A.5" in MIX.sources["label_aliases"]
    # a pack written before `our_aliases` existed still reads, with none of ours
    old = json.loads((REPO_ROOT / "data" / "reference" / "mixcube.json").read_text())
    for culture in old["cultures"]:
        culture.pop("our_aliases", None)
    legacy = type(MIX).model_validate(old)
    assert all(c.our_aliases == [] for c in legacy.cultures)
    assert m.ground_truth_terms("Korean", legacy, ours=True) == ("South Korea", "Korean")


def test_other_country_names() -> None:
    others = m.other_country_names("Korean", MIX)
    assert "North Korea" in others and "Papua New Guinea" in others and "Japan" in others
    assert "South Korea" not in others  # the ground truth's own names never block
    assert not any(name.casefold() in ("korea", "korean") for name in others)
    assert "Myanmar (Burma)" not in m.other_country_names("Myanmar", MIX)  # CLDR's own name for Myanmar
    assert "Myanmar (Burma)" in others
    assert not {"European Union", "United Nations", "Unknown Region", "Pseudo-Accents"} & set(others)
    assert "American Samoa" in others  # a territory with its own ISO code is another place
    assert "Martian" not in m.other_country_names("Martian", MIX) and "South Korea" in m.other_country_names(
        "Martian", MIX
    )


@pytest.mark.parametrize(
    ("answer", "country", "expected", "with_ours"),
    [
        ("It comes from South Korea.", "Korean", True, True),
        ("This is Korean food.", "Korean", True, True),  # the culture, as the release spells it
        ("KOREA, clearly", "Korean", False, True),  # names: case-insensitive
        ("SOUTH KOREA, clearly", "Korean", True, True),
        ("A Japanese dish, sushi.", "Korean", False, False),  # another country
        ("Probably Chinese or South Korean.", "Korean", True, True),  # no whole "South Korea"; a whole "Korean"
        ("Korea, I think.", "Korean", False, True),  # "Korea" is ours
        ("Probably Japan or South Korea.", "Korean", True, True),  # the right one among others
        ("This is Azeri plov.", "Azerbaijani", True, True),
        ("Typical of Turkey and the Caucasus.", "Azerbaijani", False, False),
        ("Associated with the United Kingdom.", "British", True, True),
        ("An English breakfast.", "British", True, True),
        ("A Scottish kilt.", "British", False, False),  # "Scottish" is not among App. A.5's labels
        ("Clearly from the UK.", "British", True, True),
        ("clearly from the uk.", "British", False, False),  # acronyms are case-sensitive
        ("A ukulele festival.", "British", False, False),
        ("Let us look: a festival in Mexico.", "American", False, False),  # "us" is not "US"
        ("Made in the USA.", "American", True, True),
        ("From the US.", "American", True, True),
        ("Connect a USB cable.", "American", False, False),  # acronyms are whole words
        ("A Hawaiian shirt.", "American", False, False),  # whole names: "Hawaiian" is not "Hawaii"
        ("Popular with Americans.", "American", True, True),  # an English plural is the same name
        ("Typical of the United States.", "American", True, True),
        ("Typical of Myanmar.", "Myanmar", True, True),
        ("A Burmese longyi.", "Myanmar", False, True),  # our Myanmar aliases
        ("Myanmar", "Korean", False, False),
        ("", "Korean", False, False),
        ("Panamanian", "American", False, False),  # "American" must be a whole word
        ("Latin American street food", "American", True, True),  # the rule is verbatim, not semantic
    ],
)
def test_is_correct(answer: str, country: str, expected: bool, with_ours: bool) -> None:
    assert m.is_correct(answer, country, MIX) is expected
    assert m.is_correct(answer, country, MIX, ours=True) is with_ours


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Yes", True),
        ("No", False),
        ("yes.", True),
        ("’No’", False),
        ("**Yes**", True),
        ("Answer: No", False),
        ("No, the names refer to different dishes; yes the description is close", False),
        ("The response is correct, so yes", True),
        ("", None),
        (None, None),
        ("Maybe", None),
        ("It could be yes or no", None),
        ("是", None),
    ],
)
def test_parse_verdict(raw: str | None, expected: bool | None) -> None:
    assert m.parse_verdict(raw) is expected


# -- configs and identity -------------------------------------------------------------------------------------------
def test_config_union_and_identity(fake: FakeOpenAI) -> None:
    adapter = TypeAdapter(VlmConfig)
    config = adapter.validate_python({"backend": "openai", "base_url": fake.base_url, "model": "Qwen/Qwen2-VL-7B"})
    assert isinstance(config, OpenAIChatConfig) and config.temperature == 0.0 and config.max_tokens == 120
    assert isinstance(adapter.validate_python({"backend": "gemini"}), GeminiVlmConfig)
    with pytest.raises(ValidationError, match="openai"):
        adapter.validate_python({"backend": "mystery", "model": "x"})
    with pytest.raises(ValidationError, match="http"):
        OpenAIChatConfig(base_url="ftp://example.org", model="x")

    vlm = config.build()
    assert isinstance(vlm, VisionLanguageModel)
    assert vlm.identity == VlmIdentity(
        backend="openai",
        model_id="openai--Qwen--Qwen2-VL-7B",
        name="Qwen/Qwen2-VL-7B",
        weights_sha256=None,
        endpoint=fake.base_url,
    )
    assert public_endpoint("https://user:pw@Api.Example.org:8443/v1/?key=abc#x") == "https://api.example.org:8443/v1"
    named = openai_config(fake, name="My VLM (fine-tuned)").build()
    assert named.identity.model_id == "openai--My-VLM-fine-tuned" and named.identity.name == "My VLM (fine-tuned)"
    with pytest.raises(ValidationError):
        VlmIdentity(backend="openai", model_id="../etc", name="x")
    assert not fake.requests  # building asks nothing


# -- openai-compatible backend --------------------------------------------------------------------------------------
def test_openai_end_to_end(fake: FakeOpenAI) -> None:
    rows = make_rows()
    vlm = openai_config(fake).build()
    seen: list[int] = []
    per_image = m.evaluate_images(rows, vlm, vlm, progress=seen.append, mix=MIX)

    assert per_image.schema == m.MIXCUBE_PER_IMAGE
    assert per_image.num_rows == rows.num_rows and sum(seen) == rows.num_rows
    assert per_image["sample_id"].to_pylist() == rows["sample_id"].to_pylist()
    assert per_image["correct"].to_pylist() == [True, False, False, True, False, True]
    assert per_image["correct_with_our_aliases"].to_pylist() == [True, True, False, True, False, True]
    assert not any(per_image["negated"].to_pylist()) and not any(per_image["negated_with_our_aliases"].to_pylist())
    assert per_image["answer"].to_pylist() == [ANSWERS[row[3]] for row in ROWS]  # raw, verbatim
    assert per_image["error"].null_count == per_image.num_rows
    assert per_image["attempts"].to_pylist() == [1] * 6 and not any(per_image["cached"].to_pylist())

    image_requests = [r for r in fake.requests if r.images]
    assert len(image_requests) == rows.num_rows  # one question per image (the marker task reuses the Food answer)
    for index, request in enumerate(image_requests):
        ((mime, data),) = request.images
        assert mime == "image/jpeg"
        assert hashlib.sha256(data).hexdigest() == per_image["image_sha256"][index].as_py()
        assert data == image_of(rows, index)
        assert request.prompt == MIX.evaluation_prompts[ROWS[index][1]]
        assert request.model == "fake/Fake-VLM-7B" and request.api_key == API_KEY
        assert request.body["max_tokens"] == 120 and request.body["temperature"] == 0.0
        assert request.path == "/v1/chat/completions"

    # Cultural Marker Identification: Food rows only, judged on the Food answer with the image's labels.
    judge_requests = [r for r in fake.requests if not r.images]
    assert len(judge_requests) == 3
    assert all(r.prompt.startswith(m.MARKER_JUDGE_INSTRUCTIONS) for r in judge_requests)
    assert 'Label: "Jjajangmyeon, Kimchi, Ramyeon, Black Bean Noodles"' in judge_requests[0].prompt
    assert ANSWERS[ROWS[0][3]] in judge_requests[0].prompt
    marker = per_image.select(["marker_prompt", "marker_answer", "marker_judge_raw", "marker_correct"]).to_pylist()
    assert [r["marker_correct"] for r in marker] == [True, True, False, None, None, None]
    assert (
        marker[0]["marker_prompt"] == MIX.evaluation_prompts["Food"]
        and marker[0]["marker_answer"] == ANSWERS[ROWS[0][3]]
    )
    assert marker[2]["marker_judge_raw"] == "No."
    assert marker[3] == {"marker_prompt": None, "marker_answer": None, "marker_judge_raw": None, "marker_correct": None}


def test_openai_separate_marker_question(fake: FakeOpenAI) -> None:
    rows = make_rows(ROWS[:2] + ROWS[3:4])
    vlm = openai_config(fake).build()
    per_image = m.evaluate_images(rows, vlm, vlm, marker_question="separate", mix=MIX)
    image_prompts = [r.prompt for r in fake.requests if r.images]
    assert image_prompts.count(m.MARKER_PROMPT) == 2  # the two Food images are asked a second question
    assert per_image["marker_prompt"].to_pylist() == [m.MARKER_PROMPT, m.MARKER_PROMPT, None]


def test_openai_retry_after_then_success(fake: FakeOpenAI) -> None:
    fake.enqueue(error_reply(429, "slow down", retry_after="7"))
    sleeps: list[float] = []
    vlm = OpenAIChatVlm(openai_config(fake), sleep=sleeps.append)
    answer = vlm.ask(MIX.evaluation_prompts["Food"], jpeg(ROWS[0][3]))
    assert answer == Answer(ANSWERS[ROWS[0][3]], None, None, 2, False)
    assert sleeps == [7.0]  # the server's Retry-After, not our backoff
    assert len(fake.requests) == 2


def test_openai_failures_are_rows(fake: FakeOpenAI) -> None:
    rows = make_rows()
    # 1st image: 500 three times (persistent); 2nd: a 200 that is not JSON; 3rd: a refusal; 4th: no choices.
    fake.enqueue(*[error_reply(500)] * 3, malformed_reply(), refusal_reply("I won't."), no_choices_reply())
    vlm = OpenAIChatVlm(openai_config(fake), sleep=no_sleep)
    per_image = m.evaluate_images(rows, vlm, judge=None, mix=MIX)
    got = per_image.select(["answer", "correct", "error", "attempts"]).to_pylist()
    assert got[0] == {"answer": None, "correct": None, "error": "server_error", "attempts": 3}
    assert got[1] == {"answer": None, "correct": None, "error": "bad_response", "attempts": 1}  # not retried
    assert got[2] == {"answer": None, "correct": False, "error": "refused", "attempts": 1}  # scored: names no country
    assert got[3] == {"answer": None, "correct": None, "error": "bad_response", "attempts": 1}
    assert got[4]["error"] is None and got[5]["error"] is None
    assert per_image["error_detail"][2].as_py() == "I won't."
    markers = per_image.select(["marker_correct", "marker_error"]).to_pylist()[:3]
    assert markers == [
        {"marker_correct": None, "marker_error": "server_error"},
        {"marker_correct": None, "marker_error": "bad_response"},
        {"marker_correct": False, "marker_error": "refused"},
    ]

    table = m.accuracy_table(per_image, MIX)
    korean_food = table.filter(pa.compute.equal(table["country"], "Korean")).to_pylist()
    assert [(r["ethnicity"], r["n"], r["answered"], r["failed"]) for r in korean_food] == [
        ("original", 1, 0, 1),
        ("EastAsian", 1, 0, 1),
        ("SouthAsian", 1, 1, 0),
    ]
    assert korean_food[0]["accuracy"] is None and korean_food[2]["accuracy"] == 0.0
    totals = m.summary(per_image, MIX)
    assert totals["failures"] == {"bad_response": 2, "server_error": 1}
    assert totals["errors"] == {"bad_response": 2, "refused": 1, "server_error": 1}
    assert totals["images"] == 6 and totals["answered"] == 3 and totals["failed"] == 3


def test_openai_judge_failures(fake: FakeOpenAI) -> None:
    rows = make_rows(ROWS[:3])
    vlm = OpenAIChatVlm(openai_config(fake), sleep=no_sleep)
    judge_replies = iter([text_reply("Well, it depends."), error_reply(500), error_reply(500), error_reply(500)])

    def responder(request: RecordedRequest) -> Reply:
        return openai_responder(request) if request.images else next(judge_replies, text_reply("Yes"))

    fake.fallback = responder
    per_image = m.evaluate_images(rows, vlm, vlm, mix=MIX)
    got = per_image.select(["marker_judge_raw", "marker_correct", "marker_error"]).to_pylist()
    assert got[0] == {
        "marker_judge_raw": "Well, it depends.",
        "marker_correct": None,
        "marker_error": "bad_judge_output",
    }
    assert got[1] == {"marker_judge_raw": None, "marker_correct": None, "marker_error": "judge_server_error"}
    assert got[2] == {"marker_judge_raw": "Yes", "marker_correct": True, "marker_error": None}
    assert per_image["correct"].to_pylist() == [True, False, False]  # the country scores stand

    no_judge = m.evaluate_images(rows, vlm, judge=None, mix=MIX)
    assert no_judge["marker_error"].to_pylist() == ["no_judge"] * 3
    unlabelled = rows.set_column(rows.schema.get_field_index("food_label"), "food_label", pa.nulls(3, pa.string()))
    assert m.evaluate_images(unlabelled, vlm, vlm, mix=MIX)["marker_error"].to_pylist() == ["no_label"] * 3


def test_openai_cache_rerun_asks_nothing(fake: FakeOpenAI, tmp_path: Path) -> None:
    rows = make_rows()
    cache = str(tmp_path / "cache")
    fake.enqueue(*[error_reply(503)] * 3)  # the first image fails for good: failures are not cached
    first = m.evaluate_images(rows, OpenAIChatVlm(openai_config(fake, cache_dir=cache), sleep=no_sleep), None, mix=MIX)
    assert first["error"].to_pylist()[0] == "server_error"
    calls = len(fake.requests)

    second = m.evaluate_images(rows, openai_config(fake, cache_dir=cache).build(), None, mix=MIX)
    assert len(fake.requests) == calls + 1  # only the failed image is asked again
    assert second["cached"].to_pylist() == [False, True, True, True, True, True]
    third = m.evaluate_images(rows, openai_config(fake, cache_dir=cache).build(), None, workers=3, mix=MIX)
    assert len(fake.requests) == calls + 1  # a full rerun asks nothing
    assert all(third["cached"].to_pylist()) and third["attempts"].to_pylist() == [0] * 6
    assert third["answer"].to_pylist() == second["answer"].to_pylist()
    assert third["correct"].to_pylist() == [True, False, False, True, False, True]

    renamed = m.evaluate_images(
        rows, openai_config(fake, cache_dir=cache, name="Another display name").build(), None, mix=MIX
    )
    assert len(fake.requests) == calls + 1 and all(renamed["cached"].to_pylist())  # the display name is no part of it

    # Anything that decides the answer is in the key: another max_tokens asks again.
    m.evaluate_images(rows.slice(0, 1), openai_config(fake, cache_dir=cache, max_tokens=50).build(), None, mix=MIX)
    assert len(fake.requests) == calls + 2


def test_api_key_never_leaks(fake: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    cache = tmp_path / "cache"

    def echo_key(request: RecordedRequest) -> Reply:  # a careless server that echoes the key in errors and answers
        return error_reply(400, f"invalid key {request.api_key}")

    fake.enqueue(echo_key, text_reply(f"Korea, says {API_KEY}"), *[error_reply(500, f"boom {API_KEY}")] * 3)
    config = openai_config(fake, cache_dir=str(cache))
    vlm = OpenAIChatVlm(config, sleep=no_sleep)
    per_image = m.evaluate_images(make_rows(), vlm, vlm, mix=MIX)
    assert fake.requests[0].api_key == API_KEY  # it did go to the server, and only there
    assert per_image["error"].to_pylist()[:2] == ["bad_request", None]
    assert "**redacted**" in per_image["error_detail"][0].as_py()
    assert per_image["answer"][1].as_py() == "Korea, says **redacted**"

    texts = [
        json.dumps(per_image.to_pylist(), default=str),
        json.dumps(m.summary(per_image, MIX)),
        vlm.identity.model_dump_json(),
        config.model_dump_json(),
        repr(vlm),
        caplog.text,
        *(path.read_text() for path in cache.rglob("*.json")),
    ]
    assert list(cache.rglob("*.json"))
    assert all(API_KEY not in text for text in texts)


def test_openai_without_key_sends_placeholder(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    answer = openai_config(fake).build().ask("Which country?", jpeg((1, 2, 3)))
    assert answer.ok and fake.requests[0].api_key == "EMPTY"


def test_bad_and_missing_images_ask_nothing(fake: FakeOpenAI) -> None:
    vlm = openai_config(fake).build()
    assert vlm.ask("Which country?", b"not an image").error == "bad_image"
    rows = make_rows(ROWS[:2])
    images = pa.array([None, {"bytes": b"\x00garbage", "path": "x"}], rows.schema.field("image").type)
    broken = rows.set_column(rows.schema.get_field_index("image"), "image", images)
    per_image = m.evaluate_images(broken, vlm, vlm, mix=MIX)
    assert per_image["error"].to_pylist() == ["no_image", "bad_image"]
    assert per_image["correct"].to_pylist() == [None, None]
    assert per_image["image_sha256"][0].as_py() is None
    assert not fake.requests


def test_input_errors_raise(fake: FakeOpenAI) -> None:
    vlm = openai_config(fake).build()
    with pytest.raises(ValueError, match="image"):
        m.evaluate_images(make_rows().drop(["image"]), vlm, None, mix=MIX)
    odd = make_rows(ROWS[:1])
    odd = odd.set_column(odd.schema.get_field_index("category"), "category", pa.array(["Music"]))
    with pytest.raises(ValueError, match="Music"):
        m.evaluate_images(odd, vlm, None, mix=MIX)
    assert not fake.requests


def test_demo_release_rows(fake: FakeOpenAI) -> None:
    """The caller's input: the demo release's `default` rows as they are (placeholder swaps included)."""
    files = sorted(DEMO_RELEASE.glob("*.parquet"))
    if not files:
        pytest.skip("no demo release here (make demo builds it)")
    rows = pq.read_table(files[0]).slice(0, 10)
    fake.fallback = lambda request: text_reply("Azerbaijani baklava" if request.images else "Yes")
    per_image = m.evaluate_images(rows, openai_config(fake).build(), openai_config(fake).build(), workers=2, mix=MIX)
    assert per_image.num_rows == 10 and per_image["sample_id"].to_pylist() == rows["sample_id"].to_pylist()
    sent = {hashlib.sha256(r.images[0][1]).hexdigest() for r in fake.requests if r.images}
    assert sent == set(per_image["image_sha256"].to_pylist())
    assert per_image["placeholder"].to_pylist() == rows["placeholder"].to_pylist()
    assert all(per_image["correct"].to_pylist())


# -- gemini backend -------------------------------------------------------------------------------------------------
def gemini_responder(request: GeminiRequest) -> GeminiReply:
    if not request.images:
        return gemini_text(judge_verdict(request.prompt))
    return gemini_text(ANSWERS[colour_of(request.images[0][1])])


def gemini_config(fake: FakeGemini, **overrides: object) -> GeminiVlmConfig:
    values: dict = {"base_url": fake.base_url, "timeout_s": 5.0, "retry": FAST_RETRY, **overrides}
    return GeminiVlmConfig(**values)


def test_gemini_end_to_end(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rows = make_rows()
    cache = tmp_path / "cache"
    with FakeGemini(gemini_responder) as fake:
        # image 1: a 429, then its answer; its judge call; image 2: 500 for good (so it gets no judge call)
        fake.enqueue(gemini_error(429, retry_after="0"), gemini_responder, gemini_responder, *[gemini_error(500)] * 3)
        config = gemini_config(fake, cache_dir=str(cache))
        vlm = config.build()
        assert vlm.identity.backend == "gemini" and vlm.identity.model_id == "gemini--gemini-2.5-flash"
        assert vlm.identity.endpoint == fake.base_url and vlm.identity.weights_sha256 is None
        per_image = m.evaluate_images(rows, vlm, vlm, mix=MIX)
        got = per_image.select(["correct", "error", "attempts"]).to_pylist()
        assert got[0] == {"correct": True, "error": None, "attempts": 2}  # 429 (Retry-After) then the answer
        assert got[1] == {"correct": None, "error": "server_error", "attempts": 3}
        assert [g["correct"] for g in got[2:]] == [False, True, False, True]
        assert per_image["marker_correct"].to_pylist()[:3] == [True, None, False]

        image_requests = [r for r in fake.requests if r.images]
        assert image_requests[0].model == "gemini-2.5-flash" and image_requests[0].api_key == GEMINI_KEY
        ((mime, data),) = image_requests[-1].images
        assert mime == "image/jpeg" and data == image_of(rows, 5)
        assert image_requests[-1].prompt == MIX.evaluation_prompts["Clothes"]
        generation = image_requests[-1].generation_config
        assert generation["temperature"] == 0.0 and generation["maxOutputTokens"] == 120
        assert list(generation["thinkingConfig"].values()) == [0]  # thinking off (google-genai keeps snake_case here)

        calls = len(fake.requests)
        rerun = m.evaluate_images(rows, gemini_config(fake, cache_dir=str(cache)).build(), vlm, mix=MIX)
        assert len(fake.requests) == calls + 2  # only the failed image again, and now its judge call
        assert rerun["correct"].to_pylist() == [True, False, False, True, False, True]
        again = m.evaluate_images(rows, gemini_config(fake, cache_dir=str(cache)).build(), vlm, mix=MIX)
        assert len(fake.requests) == calls + 2 and all(again["cached"].to_pylist())

    texts = [caplog.text, json.dumps(per_image.to_pylist(), default=str), repr(vlm)]
    texts += [path.read_text() for path in cache.rglob("*.json")]
    assert all(GEMINI_KEY not in text for text in texts)


def test_gemini_refusal_and_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = GeminiReply(body={"promptFeedback": {"blockReason": "SAFETY"}, "candidates": []})
    with FakeGemini(gemini_responder) as fake:
        fake.enqueue(blocked)
        answer = gemini_config(fake).build().ask(MIX.evaluation_prompts["Food"], jpeg((200, 30, 30)))
        assert answer.error == "refused" and answer.text is None and "SAFETY" in (answer.detail or "")
        monkeypatch.delenv("GEMINI_API_KEY")
        with pytest.raises(VlmConfigError, match="GEMINI_API_KEY"):
            gemini_config(fake).build()


# -- transformers backend (a tiny random LLaVA) ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from tests.support.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm") / "tiny-llava")


def test_transformers_end_to_end(tiny_vlm: Path, tmp_path: Path) -> None:
    config = TransformersVlmConfig(model=str(tiny_vlm), device="cpu", max_new_tokens=6, cache_dir=str(tmp_path / "c"))
    vlm = config.build()
    assert vlm.identity.backend == "transformers" and vlm.identity.model_id == "transformers--tiny-llava"
    assert vlm.identity.weights_sha256 == folder_sha256(tiny_vlm) and vlm.identity.endpoint is None
    assert str(tiny_vlm) not in vlm.identity.model_dump_json()  # no machine path in a results card

    rows = make_rows(ROWS[:2] + ROWS[3:4])
    per_image = m.evaluate_images(rows, vlm, vlm, mix=MIX)
    assert per_image.schema == m.MIXCUBE_PER_IMAGE and per_image.num_rows == 3
    for row in per_image.to_pylist():
        assert row["error"] in (None, "empty")
        assert isinstance(row["answer"], str)  # gibberish, kept as generated
        assert row["correct"] in (True, False) and row["attempts"] == 1
    food = per_image.to_pylist()[:2]
    assert all(r["marker_error"] in (None, "bad_judge_output", "empty") for r in food)
    assert all(r["marker_judge_raw"] is not None or r["marker_error"] == "empty" for r in food)

    # Greedy decoding and the cache: a rerun gives the same raw answers without generating.
    again = m.evaluate_images(rows, config.build(), None, mix=MIX)
    assert again["answer"].to_pylist() == per_image["answer"].to_pylist() and all(again["cached"].to_pylist())
    text_only = vlm.ask("Answer only in Yes or No.")
    assert text_only.error in (None, "empty") and isinstance(text_only.text, str)


def test_transformers_batches_answer_as_one_at_a_time(
    tiny_vlm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batched model is asked its questions together (images apart from the judge's text-only ones), left-padded so
    that each answer is the one it gives alone; a bad image is its own row, and a batch that fails is asked again one
    question at a time."""
    from evaluation.models.vlm import transformers as backend

    rows = make_rows()
    single = m.evaluate_images(
        rows, TransformersVlmConfig(model=str(tiny_vlm), max_new_tokens=8).build(), None, mix=MIX
    )
    one_at_a_time = TransformersVlmConfig(model=str(tiny_vlm), max_new_tokens=8).build()
    batched_config = TransformersVlmConfig(
        model=str(tiny_vlm), max_new_tokens=8, batch_size=4, cache_dir=str(tmp_path / "c")
    )
    vlm = batched_config.build()
    calls: list[int] = []
    generate = backend.TransformersVlm._generate

    def counted(self: backend.TransformersVlm, conversations: list) -> list:
        calls.append(len(conversations))
        return generate(self, conversations)

    monkeypatch.setattr(backend.TransformersVlm, "_generate", counted)
    seen: list[int] = []
    per_image = m.evaluate_images(rows, vlm, one_at_a_time, mix=MIX, progress=seen.append)
    assert per_image["sample_id"].to_pylist() == rows["sample_id"].to_pylist() and sum(seen) == rows.num_rows
    judged = [r for r in per_image.to_pylist() if r["marker_judge_raw"] is not None]
    assert judged and calls == [4, 2] + [1] * len(judged)  # six images by four; the batch-1 judge, one by one
    assert per_image["answer"].to_pylist() == single["answer"].to_pylist()

    # The batch size is part of the cache key (a batch-1 cache is not read as a batch-4 one), and a rerun asks nothing.
    assert vlm._params["batch_size"] == 4 and "batch_size" not in one_at_a_time._params
    calls.clear()
    again = m.evaluate_images(rows, batched_config.build(), None, mix=MIX)
    assert calls == [] and all(again["cached"].to_pylist())

    # A bad image among good ones: its own row; a batch the pipeline cannot run: each question alone.
    broken = rows.set_column(
        rows.schema.get_field_index("image"),
        "image",
        pa.array(
            [{"bytes": b"\xff\xd8\xffnot a jpeg", "path": "0.jpg"}, *rows["image"].to_pylist()[1:]],
            rows.schema.field("image").type,
        ),
    )

    def fails_in_batches(self: backend.TransformersVlm, conversations: list) -> list:
        calls.append(len(conversations))
        if len(conversations) > 1:
            raise RuntimeError("batch too large")
        return generate(self, conversations)

    monkeypatch.setattr(backend.TransformersVlm, "_generate", fails_in_batches)
    calls.clear()
    fresh = TransformersVlmConfig(model=str(tiny_vlm), max_new_tokens=8, batch_size=8).build()
    recovered = m.evaluate_images(broken, fresh, None, mix=MIX)
    assert recovered["error"].to_pylist()[0] == "bad_image"
    assert recovered["answer"].to_pylist()[1:] == single["answer"].to_pylist()[1:]
    assert calls == [5, 1, 1, 1, 1, 1]


def test_transformers_config_errors(tiny_vlm: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(VlmConfigError, match="does not exist"):
        TransformersVlmConfig(model=str(tmp_path / "nowhere")).build()
    (tmp_path / "empty").mkdir()
    with pytest.raises(VlmConfigError, match=r"config\.json"):
        TransformersVlmConfig(model=str(tmp_path / "empty")).build()
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="cuda"):
            TransformersVlmConfig(model=str(tiny_vlm), device="cuda").build()
        with caplog.at_level(logging.WARNING):
            vlm = TransformersVlmConfig(model=str(tiny_vlm), precision="fp16").build()
        assert vlm.precision == "fp32" and "fp16 needs CUDA" in caplog.text


# -- tables and figures ---------------------------------------------------------------------------------------------
def per_image_rows(spec: list[tuple[str, str, str, bool | None, bool | None]]) -> pa.Table:
    """A synthetic per-image table: (country, category, ethnicity, correct, marker_correct) per image."""
    records = []
    for i, (country, category, ethnicity, correct, marker) in enumerate(spec):
        food = category == "Food"
        records.append(
            {
                "sample_id": f"s{i}",
                "original_id": f"o{i}",
                "country": country,
                "category": category,
                "ethnicity": ethnicity,
                "placeholder": False,
                "image_sha256": "0" * 64,
                "food_label": "Kimchi" if food else None,
                "prompt": MIX.evaluation_prompts[category],
                "answer": None if correct is None else "x",
                "correct": correct,
                "error": "server_error" if correct is None else None,
                "error_detail": None,
                "attempts": 1,
                "cached": False,
                "marker_prompt": MIX.evaluation_prompts[category] if food else None,
                "marker_answer": None,
                "marker_judge_raw": None,
                "marker_correct": marker if food else None,
                "marker_error": ("server_error" if marker is None else None) if food else None,
                "marker_error_detail": None,
            }
        )
    return pa.Table.from_pylist(records, schema=m.MIXCUBE_PER_IMAGE)


SYNTHETIC = [
    # Korean Food: originals 3/4 (+1 failure), African 1/4, EastAsian 2/2; markers: originals 2/4, African 1/4
    *[("Korean", "Food", "original", c, mk) for c, mk in [(True, True), (True, True), (True, False), (False, False)]],
    ("Korean", "Food", "original", None, None),
    *[("Korean", "Food", "African", c, mk) for c, mk in [(True, True), (False, False), (False, False), (False, None)]],
    *[("Korean", "Food", "EastAsian", c, mk) for c, mk in [(True, True), (True, False)]],
    # British Festival: originals 1/2, Caucasian 2/2; a failure-only SouthAsian group
    ("British", "Festival", "original", True, None),
    ("British", "Festival", "original", False, None),
    ("British", "Festival", "Caucasian", True, None),
    ("British", "Festival", "Caucasian", True, None),
    ("British", "Festival", "SouthAsian", None, None),
]


def test_accuracy_table_arithmetic() -> None:
    table = m.accuracy_table(per_image_rows(SYNTHETIC), MIX)
    assert table.schema == m.MIXCUBE_ACCURACY
    got = {(r["country"], r["category"], r["ethnicity"]): r for r in table.to_pylist()}
    assert list(got)[:3] == [
        ("Korean", "Food", "original"),
        ("Korean", "Food", "African"),
        ("Korean", "Food", "EastAsian"),
    ]
    original = got[("Korean", "Food", "original")]
    assert (original["n"], original["answered"], original["failed"], original["correct"]) == (5, 4, 1, 3)
    assert original["accuracy"] == 0.75  # the failure is counted but not in the denominator
    assert (original["marker_answered"], original["marker_correct"], original["marker_accuracy"]) == (4, 2, 0.5)
    african = got[("Korean", "Food", "African")]
    assert african["accuracy"] == 0.25 and african["marker_answered"] == 3 and african["marker_accuracy"] == 1 / 3
    festival = got[("British", "Festival", "original")]
    assert festival["accuracy"] == 0.5 and festival["marker_answered"] is None and festival["marker_accuracy"] is None
    nothing = got[("British", "Festival", "SouthAsian")]
    assert (nothing["n"], nothing["answered"], nothing["failed"], nothing["accuracy"]) == (1, 0, 1, None)


def test_swap_drops_arithmetic() -> None:
    drops = m.swap_drops(per_image_rows(SYNTHETIC), MIX)
    assert drops.schema == m.MIXCUBE_SWAP_DROPS
    got = {(r["country"], r["category"], r["ethnicity"]): r for r in drops.to_pylist()}
    assert set(got) == {
        ("Korean", "Food", "African"),
        ("Korean", "Food", "EastAsian"),
        ("British", "Festival", "Caucasian"),
        ("British", "Festival", "SouthAsian"),
    }
    african = got[("Korean", "Food", "African")]
    assert (african["original_accuracy"], african["swap_accuracy"], african["drop"]) == (0.75, 0.25, 0.5)
    assert african["marker_drop"] == pytest.approx(0.5 - 1 / 3)
    east = got[("Korean", "Food", "EastAsian")]
    assert east["drop"] == -0.25 and east["marker_drop"] == 0.0  # negative: the swap did better
    caucasian = got[("British", "Festival", "Caucasian")]
    assert caucasian["drop"] == -0.5 and caucasian["marker_drop"] is None
    south = got[("British", "Festival", "SouthAsian")]
    assert south["swap_answered"] == 0 and south["swap_accuracy"] is None and south["drop"] is None


def test_summary() -> None:
    totals = m.summary(per_image_rows(SYNTHETIC), MIX)
    json.dumps(totals)  # JSON-ready
    assert (totals["images"], totals["answered"], totals["correct"], totals["failed"]) == (16, 14, 9, 2)
    assert totals["accuracy"] == 9 / 14
    assert totals["accuracy_by_ethnicity"] == {
        "original": 4 / 6,
        "African": 0.25,
        "Caucasian": 1.0,
        "EastAsian": 1.0,
        "SouthAsian": None,
    }
    assert totals["accuracy_original"] == 4 / 6 and totals["accuracy_synthesized"] == 5 / 8
    assert totals["drop_original_minus_synthesized"] == pytest.approx(4 / 6 - 5 / 8)
    assert totals["marker_images"] == 11 and totals["marker_judged"] == 9 and totals["marker_accuracy"] == 4 / 9
    assert totals["failures"] == {"server_error": 2} and totals["marker_errors"] == {"server_error": 2}


class _Replies:
    """Answers each image (by its bytes) from a map."""

    identity = VlmIdentity(backend="test", model_id="test--replies", name="replies")
    runs_locally = True

    def __init__(self, replies: dict[bytes, str]) -> None:
        self.replies = replies

    def ask(self, prompt: str, image: bytes | None = None) -> Answer:
        assert image is not None
        return Answer(self.replies[image], None, None, 1, False)


#: (country, category, ethnicity, colour, answer): correct by the paper's terms? by ours? negated (both)?
REPLIES = [
    ("Korean", "Food", "original", (200, 30, 30), "South Korea, clearly."),  # yes, yes
    ("Korean", "Food", "original", (30, 200, 30), "Korea, clearly."),  # no, yes (ours)
    ("Korean", "Food", "EastAsian", (30, 30, 200), "Definitely not South Korea."),  # no, no: negated
    ("Korean", "Food", "EastAsian", (220, 220, 30), "North Korea."),  # no, no: another country's name
    ("Myanmar", "Food", "original", (30, 220, 220), "Burmese tea leaf salad."),  # no, yes (ours)
    ("British", "Festival", "original", (220, 30, 220), "Not Japan: the UK."),  # yes, yes
]


def test_our_aliases_and_negated_answers_are_reported_apart() -> None:
    rows = make_rows([(c, k, e, colour, None) for c, k, e, colour, _ in REPLIES])
    replies = {image_of(rows, i): answer for i, (*_, answer) in enumerate(REPLIES)}
    per_image = m.evaluate_images(rows, _Replies(replies), None, mix=MIX)
    assert per_image["correct"].to_pylist() == [True, False, False, False, False, True]
    assert per_image["correct_with_our_aliases"].to_pylist() == [True, True, False, False, True, True]
    assert per_image["negated"].to_pylist() == [False, False, True, False, False, False]
    assert per_image["negated_with_our_aliases"].to_pylist() == [False, False, True, False, False, False]

    totals = m.summary(per_image, MIX)
    json.dumps(totals)
    assert totals["accuracy"] == 2 / 6 and totals["correct"] == 2
    assert totals["accuracy_with_our_aliases"] == 4 / 6 and totals["correct_with_our_aliases"] == 4
    assert totals["accuracy_by_country"] == {"Korean": 0.25, "Myanmar": 0.0, "British": 1.0}
    assert totals["accuracy_with_our_aliases_by_country"] == {"Korean": 0.5, "Myanmar": 1.0, "British": 1.0}
    assert totals["negated_answers"] == totals["negated_answers_with_our_aliases"] == 1
    rule = totals["answer_rule"]
    assert rule["accuracy_with_our_aliases"].startswith("ours") and "App. A.5" in rule["accuracy"]
    assert rule["terms"]["Korean"] == {"paper": ["South Korea", "Korean"], "ours": ["Korea"]}
    assert rule["terms"]["British"]["ours"] == []
    notes = m.answer_rule_warnings(totals)
    assert len(notes) == 2 and "negated_answers" in notes[0] and "ours, not the paper's" in notes[1]
    assert m.answer_rule_warnings({**totals, "negated_answers": 0, "accuracy_with_our_aliases": 2 / 6}) == []

    table = {(r["country"], r["ethnicity"]): r for r in m.accuracy_table(per_image, MIX).to_pylist()}
    korean = table[("Korean", "original")]
    assert (korean["correct"], korean["accuracy"]) == (1, 0.5)
    assert (korean["correct_with_our_aliases"], korean["accuracy_with_our_aliases"]) == (2, 1.0)
    assert table[("Korean", "EastAsian")]["accuracy_with_our_aliases"] == 0.0


def _check_png(data: bytes) -> None:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(data)) as image:
        image.verify()
    with Image.open(io.BytesIO(data)) as image:
        assert image.width > 100 and image.height > 100


def test_figures_are_pngs() -> None:
    per_image = per_image_rows(SYNTHETIC)
    for draw in (m.fig3_bars_png, m.fig4_heatmap_png):
        for task in ("country", "marker"):
            _check_png(draw(per_image, MIX, task=task))
        assert draw(per_image, MIX) == draw(per_image, MIX)  # byte-stable
        _check_png(draw(per_image.slice(0, 0), MIX))  # no data: still a figure
