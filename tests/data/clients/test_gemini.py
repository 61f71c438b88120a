"""Gemini backends (concept generation, translation) through the real google-genai client and a fake server."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from collectors.concept_generation import (
    FIRST_NEW_CONCEPT_ID,
    ConceptCandidates,
    GeminiConceptGenerationConfig,
    ReviewFileError,
    accept_candidates,
    candidate_id,
    generate_concept_candidates,
    read_review_file,
    write_review_file,
)
from collectors.concepts import ReviewedConceptsConfig, ShippedConceptsConfig, run_concepts
from collectors.translations import (
    REVIEW_MACHINE,
    REVIEW_MACHINE_REPLACED,
    GeminiTranslationsConfig,
    ShippedTranslationsConfig,
    check_descriptor_template,
    run_translations,
)
from data.clients.gemini import GeminiClient, GeminiConfigError, GeminiSettings
from data.clients.retry import RetryPolicy
from data.reference import default_pack
from data.schemas import CONCEPT_CANDIDATES, LLM_FAILURES, TRANSLATION_CONFLICTS, TRANSLATIONS
from tests.support.fake_gemini import (
    FakeGemini,
    Reply,
    error_reply,
    input_data,
    json_reply,
    text_reply,
    translation_answer,
)

API_KEY = "AIzaFAKE-test-key-0123456789abcdef"


@pytest.fixture
def fake() -> Iterator[FakeGemini]:
    with FakeGemini() as server:
        yield server


@pytest.fixture(autouse=True)
def api_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", API_KEY)


def settings(fake: FakeGemini, **overrides: object) -> GeminiSettings:
    values: dict = {
        "base_url": fake.base_url,
        "timeout_s": 5.0,
        "retry": RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05),
        "prefect_concurrency_limit": None,
        **overrides,
    }
    return GeminiSettings(**values)


def concepts(*names_or_pairs: str | tuple[int, str]) -> pa.Table:
    """Shipped concepts by name, or (id, name) pairs for concepts outside the shipped list."""
    rows = []
    for item in names_or_pairs:
        if isinstance(item, tuple):
            rows.append({"concept_id": item[0], "concept": item[1], "source": "gemini"})
        else:
            rows += run_concepts(ShippedConceptsConfig(include=[item]), default_pack()).to_pylist()
    return pa.Table.from_pylist(rows)


def shipped_id(name: str) -> int:
    return next(c.concept_id for c in default_pack().concepts if c.concept == name)


def translate(fake: FakeGemini, table: pa.Table, codes: list[str], cache: Path | None, **config: object):
    gemini = settings(fake, **config.pop("gemini", {}))
    return run_translations(
        GeminiTranslationsConfig(gemini=gemini, **config), default_pack(), table, codes, str(cache) if cache else None
    )


# -- concept generation ------------------------------------------------------------------------------------------
def test_concept_generation_asks_the_app_h_prompt_and_returns_pending_candidates(fake: FakeGemini, tmp_path) -> None:
    config = GeminiConceptGenerationConfig(gemini=settings(fake), count=5, countries=["Japan", "ng", "usa"])
    candidates, failures = generate_concept_candidates(config, cache_dir=str(tmp_path / "cache"))

    assert candidates.schema == CONCEPT_CANDIDATES and failures.num_rows == 0
    assert candidates.num_rows == 5
    assert set(candidates["review_status"].to_pylist()) == {"pending"}
    assert candidates["candidate_id"].to_pylist() == [candidate_id(n) for n in candidates["concept"].to_pylist()]
    [request] = fake.requests
    assert request.model == "gemini-2.5-flash" and request.api_key == API_KEY
    assert request.prompt.startswith(
        "list 5 concepts that unique and vary in these country\nincluding Japan, Nigeria, USA"
    )
    assert '"costume":{"China":' in request.prompt  # the App. H example, verbatim
    assert request.generation_config["responseMimeType"] == "application/json"
    assert request.generation_config["temperature"] == 0.0
    assert request.schema_properties == {"concepts"}


def test_concept_candidates_flag_shipped_names_and_ids_are_stable(fake: FakeGemini) -> None:
    fake.enqueue(json_reply({"concepts": [{"name": "Trains"}, {"name": "kite flying", "rationale": "r"}]}))
    config = GeminiConceptGenerationConfig(gemini=settings(fake), count=2)
    candidates, _ = generate_concept_candidates(config)
    rows = {r["concept"]: r for r in candidates.to_pylist()}
    assert rows["Trains"]["near_shipped"] == "train"  # same normalised name as a shipped concept
    assert rows["kite flying"]["near_shipped"] is None and rows["kite flying"]["rationale"] == "r"
    assert rows["Trains"]["candidate_id"] == candidate_id("train") != candidate_id("kite flying")
    # All 16 countries by default.
    assert all(c.name in fake.requests[0].prompt for c in default_pack().countries)


def test_partial_concept_answers_are_asked_again_then_reported(fake: FakeGemini) -> None:
    short = json.dumps({"concepts": [{"name": "kite"}, {"name": "kites"}]})  # a repeat after normalisation, too few
    fake.enqueue(*[text_reply(short)] * 3)
    config = GeminiConceptGenerationConfig(gemini=settings(fake, max_invalid_answers=3), count=4)
    candidates, failures = generate_concept_candidates(config)
    assert candidates.num_rows == 0 and len(fake.requests) == 3
    [failure] = failures.to_pylist()
    assert failure["error"] == "invalid_output" and failure["attempts"] == 3 and failure["raw_text"] == short
    assert "repeat" in failure["detail"]
    assert "not usable" in fake.requests[1].prompt  # the re-ask says what was wrong


# -- the client: answers, re-asks, retries, cache ----------------------------------------------------------------
def test_translation_request_follows_app_r_and_answers_become_rows(fake: FakeGemini, tmp_path) -> None:
    table = concepts((1000, "kite"), (1001, "lantern"))
    out = translate(fake, table, ["ja", "en"], tmp_path / "cache")
    assert out.translations.schema == TRANSLATIONS and out.failures.num_rows == 0 and out.conflicts.num_rows == 0
    rows = {(r["concept_id"], r["language_code"]): r for r in out.translations.to_pylist()}
    assert rows[(1000, "ja")]["text"] == "ja:kite"
    assert rows[(1000, "ja")]["review_status"] == REVIEW_MACHINE
    assert rows[(1000, "ja")]["source"] == "gemini:gemini-2.5-flash"
    assert rows[(1000, "ja")]["descriptor_template"] == default_pack().language_pack("ja").language.descriptor_template
    # English is the source language: no request, the concept name itself.
    assert rows[(1001, "en")]["text"] == "lantern" and rows[(1001, "en")]["review_status"] == "source"
    [request] = fake.requests
    assert input_data(request)["language_code"] == "ja"
    assert [c["concept_id"] for c in input_data(request)["concepts"]] == [1000, 1001]
    for constraint in (
        "**Grammar & Fluency:**",
        "**No Stereotypes:**",
        "Thai 'khan'",
        '"high-speed"',
        "Nigeria: Yoruba",
    ):
        assert constraint in request.prompt
    assert "Japan: 日本" in request.prompt  # the forms that fill {country}


def test_nigeria_is_asked_in_yoruba(fake: FakeGemini) -> None:
    assert default_pack().country_by_name()["Nigeria"].language_code == "yo"
    out = translate(fake, concepts((1000, "kite")), ["yo"], None)
    [request] = fake.requests
    assert "fluency in Yoruba (Èdè Yorùbá)" in request.prompt
    assert input_data(request)["target_country"] == ["Nigeria"]
    assert "Nigeria: Yoruba" in request.prompt
    assert "{concept} ilẹ̀ {country}" in request.prompt
    assert out.translations["text"].to_pylist() == ["yo:kite"]


def test_malformed_json_is_asked_again(fake: FakeGemini) -> None:
    fake.enqueue(text_reply('{"translations": [{"concept_id": 1000, '))
    out = translate(fake, concepts((1000, "kite")), ["de"], None)
    assert out.translations["text"].to_pylist() == ["de:kite"] and out.failures.num_rows == 0
    assert len(fake.requests) == 2 and "malformed_output" in fake.requests[1].prompt


@pytest.mark.parametrize(
    "bad",
    [
        {"translations": [{"concept_id": 1000}]},  # schema: fields missing
        {"translations": []},  # an id unanswered
        {"translations": [{"concept_id": 1000, "text": "x", "descriptor_template": "{concept}"}]},  # no {country}
        {"translations": [{"concept_id": 1000, "text": " ", "descriptor_template": "{concept} {country}"}]},
        {
            "translations": [
                {"concept_id": 1000, "text": "x", "descriptor_template": "{concept} {country}"},
                {"concept_id": 7, "text": "y", "descriptor_template": "{concept} {country}"},  # not asked for
            ]
        },
    ],
)
def test_schema_or_rule_breaking_answers_are_asked_again(fake: FakeGemini, bad: dict) -> None:
    fake.enqueue(json_reply(bad))
    out = translate(fake, concepts((1000, "kite")), ["fr"], None)
    assert out.translations["text"].to_pylist() == ["fr:kite"] and out.failures.num_rows == 0
    assert len(fake.requests) == 2 and "invalid_output" in fake.requests[1].prompt


def test_persistent_malformed_answer_becomes_a_failure_row_and_is_not_cached(fake: FakeGemini, tmp_path) -> None:
    fake.enqueue(*[text_reply("{broken")] * 2)
    cache = tmp_path / "cache"
    table = concepts((1000, "kite"), (1001, "lantern"))
    out = translate(fake, table, ["th"], cache, gemini={"max_invalid_answers": 2})
    assert out.translations.num_rows == 0  # the pairs are absent; the failure says why
    assert out.failures.schema == LLM_FAILURES
    [failure] = out.failures.to_pylist()
    assert failure["stage"] == "translations" and failure["request_key"] == "th:1000,1001"
    assert failure["error"] == "malformed_output" and failure["attempts"] == 2 and failure["raw_text"] == "{broken"
    assert not list(cache.glob("*.json"))
    # A rerun asks again (failures are not cached) and now succeeds.
    again = translate(fake, table, ["th"], cache)
    assert again.translations.num_rows == 2 and len(fake.requests) == 3


def test_batches_fail_independently(fake: FakeGemini) -> None:
    fake.enqueue(text_reply("nope"), text_reply("nope"))
    table = concepts((1000, "kite"), (1001, "lantern"), (1002, "swing"))
    out = translate(fake, table, ["sw"], None, batch_size=2, gemini={"max_invalid_answers": 2})
    assert out.failures["request_key"].to_pylist() == ["sw:1000,1001"]
    assert out.translations["concept_id"].to_pylist() == [1002]


def test_429_waits_for_retry_after(fake: FakeGemini) -> None:
    fake.enqueue(error_reply(429, "quota", retry_after="1"))
    out = translate(fake, concepts((1000, "kite")), ["hi"], None)
    assert out.translations.num_rows == 1 and out.failures.num_rows == 0
    first, second = fake.requests
    assert second.received_at - first.received_at >= 0.95  # the server asked for 1 s; our backoff alone is < 0.05 s


def test_retry_delay_from_google_retry_info_and_500_then_success(fake: FakeGemini) -> None:
    retry_info = {
        "error": {
            "code": 429,
            "message": "quota",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}],
        }
    }
    fake.enqueue(Reply(status=429, body=retry_info), error_reply(500))
    slept: list[float] = []
    client = GeminiClient(settings(fake), sleep=slept.append)

    answer = client.generate_structured(["list 2 concepts"], ConceptCandidates, request_key="k")
    assert len(fake.requests) == 3  # google-genai's own retries are off: one HTTP call per attempt
    assert slept[0] == 7.0 and 0.0 <= slept[1] <= 0.02  # RetryInfo honoured; then jittered backoff
    assert answer.attempts == 3


def test_persistent_server_errors_and_auth_errors_become_failure_rows(fake: FakeGemini) -> None:
    fake.enqueue(*[error_reply(503)] * 3, error_reply(403, "API key not valid"))
    table = concepts((1000, "kite"))
    out = translate(fake, table, ["ar", "zh"], None)  # ar: 3 x 503 (budget 3); zh: 403, not retried
    failures = {r["request_key"]: r for r in out.failures.to_pylist()}
    assert failures["ar:1000"]["error"] == "api_error" and failures["ar:1000"]["attempts"] == 3
    assert failures["zh:1000"]["error"] == "auth_error" and failures["zh:1000"]["attempts"] == 1
    assert len(fake.requests) == 4 and out.translations.num_rows == 0


def test_timeouts_are_retried(fake: FakeGemini) -> None:
    fake.enqueue(Reply(delay_s=1.5, body={}))
    out = translate(fake, concepts((1000, "kite")), ["es"], None, gemini={"timeout_s": 0.5})
    assert out.translations["text"].to_pylist() == ["es:kite"]
    assert len(fake.requests) == 2


def test_valid_answers_are_cached_by_prompt(fake: FakeGemini, tmp_path) -> None:
    cache = tmp_path / "cache"
    table = concepts((1000, "kite"), (1001, "lantern"))
    first = translate(fake, table, ["de", "ja"], cache)
    assert len(fake.requests) == 2 and len(list(cache.glob("*.json"))) == 2
    second = translate(fake, table, ["de", "ja"], cache)
    assert len(fake.requests) == 2  # no new request
    assert second.translations.equals(first.translations)
    # Anything that decides the answer is part of the key: another temperature asks again.
    translate(fake, table, ["de"], cache, gemini={"temperature": 0.5})
    assert len(fake.requests) == 3


def test_cache_also_serves_concept_generation(fake: FakeGemini, tmp_path) -> None:
    config = GeminiConceptGenerationConfig(gemini=settings(fake), count=3)
    first, _ = generate_concept_candidates(config, cache_dir=str(tmp_path))
    second, _ = generate_concept_candidates(config, cache_dir=str(tmp_path))
    assert len(fake.requests) == 1 and first.equals(second)


# -- the API key ---------------------------------------------------------------------------------------------------
def test_api_key_never_leaks(fake: FakeGemini, tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    def echo_key(request):  # a hostile proxy that echoes the request headers into its error
        return error_reply(500, f"upstream failed for headers {request.headers}")

    fake.enqueue(*[echo_key] * 3)
    cache = tmp_path / "cache"
    caplog.set_level(logging.DEBUG)
    table = concepts((1000, "kite"))
    failed = translate(fake, table, ["pt"], cache)
    ok = translate(fake, table, ["pt"], cache)
    assert ok.translations.num_rows == 1 and fake.requests[-1].api_key == API_KEY  # the key did travel
    [failure] = failed.failures.to_pylist()
    assert "**redacted**" in failure["detail"]
    config = GeminiTranslationsConfig(gemini=settings(fake))
    texts = [
        caplog.text,
        json.dumps(failed.failures.to_pylist()),
        json.dumps(ok.translations.to_pylist(), ensure_ascii=False),
        repr(config),
        config.model_dump_json(),
        repr(GeminiClient(config.gemini)),
        *(p.read_text() for p in cache.rglob("*") if p.is_file()),
    ]
    assert all(API_KEY not in text for text in texts)


def test_api_key_from_prefect_secret_block(fake: FakeGemini, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.blocks.system import Secret

    monkeypatch.delenv("GEMINI_API_KEY")
    loaded: list[str] = []

    class Stored:
        def get(self) -> str:
            return "block-key-123456"

    def load(name: str, *args: object, **kwargs: object) -> Stored:
        loaded.append(name)
        return Stored()

    monkeypatch.setattr(Secret, "load", load)
    translate(fake, concepts((1000, "kite")), ["de"], None, gemini={"api_key_secret_block": "gemini-key"})
    assert loaded == ["gemini-key"] and fake.requests[0].api_key == "block-key-123456"


def test_api_key_falls_back_to_google_api_key_and_missing_key_is_a_clear_error(
    fake: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY")
    with pytest.raises(GeminiConfigError, match="GEMINI_API_KEY"):
        translate(fake, concepts((1000, "kite")), ["de"], None)
    assert fake.requests == []
    monkeypatch.setenv("GOOGLE_API_KEY", "google-key-987654")
    translate(fake, concepts((1000, "kite")), ["de"], None)
    assert fake.requests[0].api_key == "google-key-987654"


# -- shipped policies ----------------------------------------------------------------------------------------------
def test_fill_missing_uses_shipped_rows_and_asks_only_for_new_concepts(fake: FakeGemini) -> None:
    train = shipped_id("train")
    out = translate(fake, concepts("train", (1000, "kite")), ["th"], None)
    rows = {r["concept_id"]: r for r in out.translations.to_pylist()}
    assert rows[train]["text"] == default_pack().language_pack("th").concepts[train].text
    assert rows[train]["source"] == "shipped" and rows[1000]["source"].startswith("gemini:")
    [request] = fake.requests
    assert [c["concept_id"] for c in input_data(request)["concepts"]] == [1000]
    assert out.conflicts.num_rows == 0
    # Nothing new to translate: no request at all (and no key needed).
    translate(fake, concepts("train"), ["th"], None)
    assert len(fake.requests) == 1


def agree_on(concept_id: int, code: str):
    """A responder that returns the shipped translation for `concept_id` and "<lang>:<concept>" for the rest."""
    pack = default_pack().language_pack(code)

    def respond(request):
        answer = translation_answer(request)
        for item in answer["translations"]:
            if item["concept_id"] == concept_id:
                entry = pack.concepts[concept_id]
                item["text"] = entry.text
                item["descriptor_template"] = entry.descriptor_template or pack.language.descriptor_template
        return json_reply(answer)

    return respond


@pytest.mark.parametrize("policy", ["compare", "replace"])
def test_compare_and_replace_record_every_difference(fake: FakeGemini, policy: str) -> None:
    train, wedding = shipped_id("train"), shipped_id("wedding")
    pack = default_pack().language_pack("ja")
    fake.enqueue(agree_on(wedding, "ja"))
    out = translate(fake, concepts("train", "wedding", (1000, "kite")), ["ja"], None, shipped_policy=policy)
    assert [c["concept_id"] for c in input_data(fake.requests[0])["concepts"]] == [train, wedding, 1000]
    rows = {r["concept_id"]: r for r in out.translations.to_pylist()}
    assert out.conflicts.schema == TRANSLATION_CONFLICTS
    [conflict] = out.conflicts.to_pylist()  # wedding agreed: no conflict
    assert conflict["concept_id"] == train and conflict["shipped_text"] == pack.concepts[train].text
    assert conflict["proposed_text"] == "ja:train"
    assert rows[wedding]["source"] == "shipped"
    assert rows[1000]["text"] == "ja:kite" and rows[1000]["review_status"] == REVIEW_MACHINE
    if policy == "compare":
        assert conflict["resolution"] == "kept_shipped"
        assert rows[train]["text"] == pack.concepts[train].text and rows[train]["source"] == "shipped"
    else:
        assert conflict["resolution"] == "replaced_shipped"
        assert rows[train]["text"] == "ja:train" and rows[train]["review_status"] == REVIEW_MACHINE_REPLACED


def test_shipped_backend_returns_the_new_output_shape() -> None:
    out = run_translations(ShippedTranslationsConfig(), default_pack(), concepts("train"), ["de", "en"])
    assert out.translations.num_rows == 2 and out.conflicts.num_rows == 0 and out.failures.num_rows == 0


def test_descriptor_template_rules() -> None:
    for good in ("{concept} of {country}", "{country}の{concept}", "train ya {country}"):
        assert check_descriptor_template(good) == good
    for bad in ("{concept}", "{country} {country}", "{concept} {concept} {country}", "{country} {x}", "{country"):
        with pytest.raises(ValueError):
            check_descriptor_template(bad)


# -- operator review -----------------------------------------------------------------------------------------------
def candidate_table(*names: str) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "candidate_id": candidate_id(n),
                "concept": n,
                "rationale": f"why {n}",
                "near_shipped": None,
                "model": "m",
                "prompt_sha256": "0" * 64,
                "review_status": "pending",
            }
            for n in names
        ],
        schema=CONCEPT_CANDIDATES,
    )


def test_review_file_merge_keeps_operator_decisions_and_ids(tmp_path: Path) -> None:
    path = str(tmp_path / "review" / "concepts.csv")
    assert write_review_file(candidate_table("kite", "lantern", "swing"), path, default_pack()) == 3
    changed = accept_candidates(path, default_pack(), [candidate_id("lantern"), candidate_id("kite")])
    assert sorted(r.concept_id for r in changed) == [FIRST_NEW_CONCEPT_ID, FIRST_NEW_CONCEPT_ID + 1]
    accept_candidates(path, default_pack(), [candidate_id("swing")], reject=True)
    # The operator renames an accepted concept by hand; a rerun of generation must not undo it.
    text = Path(path).read_text().replace(",lantern,", ",paper lantern,")
    Path(path).write_text(text)
    assert write_review_file(candidate_table("kite", "lantern", "swing", "drum"), path, default_pack()) == 1
    rows = {r.candidate_id: r for r in read_review_file(path, default_pack())}
    assert rows[candidate_id("lantern")].concept == "paper lantern"
    assert rows[candidate_id("swing")].review_status == "rejected"
    assert rows[candidate_id("drum")].review_status == "pending" and rows[candidate_id("drum")].concept_id is None
    # Accept all pending: the new id continues after the highest one in the file.
    [drum] = accept_candidates(path, default_pack())
    assert drum.concept_id == FIRST_NEW_CONCEPT_ID + 2
    assert accept_candidates(path, default_pack()) == []  # nothing pending any more
    with pytest.raises(KeyError, match="nope"):
        accept_candidates(path, default_pack(), ["nope"])


def test_reviewed_backend_adds_only_accepted_candidates(tmp_path: Path) -> None:
    path = str(tmp_path / "concepts.csv")
    write_review_file(candidate_table("kite", "lantern", "swing"), path, default_pack())
    accept_candidates(path, default_pack(), [candidate_id("kite")])
    accept_candidates(path, default_pack(), [candidate_id("swing")], reject=True)
    table = run_concepts(ReviewedConceptsConfig(review_file=path, include=["train", "food"]), default_pack())
    rows = table.to_pylist()
    assert [(r["concept"], r["source"]) for r in rows] == [
        *sorted(((c, "shipped") for c in ("train", "food")), key=lambda x: shipped_id(x[0])),
        ("kite", "gemini"),
    ]
    assert rows[-1]["concept_id"] == FIRST_NEW_CONCEPT_ID
    everything = run_concepts(ReviewedConceptsConfig(review_file=path), default_pack())
    assert everything.num_rows == len(default_pack().concepts) + 1
    only_new = run_concepts(ReviewedConceptsConfig(review_file=path, include_shipped=False), default_pack())
    assert only_new["concept"].to_pylist() == ["kite"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace(",pending,", ",maybe,", 1), "line 2: review_status 'maybe'"),
        (lambda t: t.replace(",pending,", ",accepted,", 1), "line 2: 'kite' is accepted but has no concept_id"),
        (
            lambda t: t.replace(",pending,,", ",pending,12,", 1),
            "line 2: concept_id 12 is negative or a concept id of the reference pack",
        ),
        (lambda t: t.replace(",pending,,", ",pending,x1,", 1), "line 2: concept_id 'x1' is not an integer"),
        (lambda t: t + "short,row\n", "line 4: expected 8 fields"),
        (lambda t: t.replace("review_status", "status", 1), "line 1: missing column"),
    ],
)
def test_malformed_review_file_names_the_line(tmp_path: Path, edit, message: str) -> None:
    path = tmp_path / "concepts.csv"
    write_review_file(candidate_table("kite", "lantern"), str(path), default_pack())
    path.write_text(edit(path.read_text()))
    with pytest.raises(ReviewFileError, match=message.replace("(", r"\(")):
        run_concepts(ReviewedConceptsConfig(review_file=str(path)), default_pack())


def test_concepts_config_is_a_discriminated_union() -> None:
    from pydantic import TypeAdapter

    from collectors.concepts import ConceptsConfig
    from collectors.translations import TranslationsConfig

    assert isinstance(TypeAdapter(ConceptsConfig).validate_python({"backend": "shipped"}), ShippedConceptsConfig)
    reviewed = TypeAdapter(ConceptsConfig).validate_python({"backend": "reviewed", "review_file": "r.csv"})
    assert isinstance(reviewed, ReviewedConceptsConfig) and reviewed.include_shipped
    gemini = TypeAdapter(TranslationsConfig).validate_python({"backend": "gemini", "shipped_policy": "compare"})
    assert isinstance(gemini, GeminiTranslationsConfig) and gemini.gemini.model == "gemini-2.5-flash"
    with pytest.raises(ValueError):
        TypeAdapter(TranslationsConfig).validate_python({"backend": "gemini", "api_key": "x"})


def test_image_contents_are_sent_inline_and_hashed_by_content(fake: FakeGemini) -> None:
    from google.genai import types
    from PIL import Image

    from data.clients.gemini import prompt_sha256

    gemini = settings(fake)
    red, blue = Image.new("RGB", (8, 8), "red"), Image.new("RGB", (8, 8), "blue")
    part = types.Part.from_bytes(data=b"\x89PNG fake", mime_type="image/png")
    digest = prompt_sha256(gemini, [red, part, "list 1 concepts"], ConceptCandidates)
    assert digest == prompt_sha256(gemini, [red.copy(), part, "list 1 concepts"], ConceptCandidates)
    assert digest != prompt_sha256(gemini, [blue, part, "list 1 concepts"], ConceptCandidates)
    other_part = types.Part.from_bytes(data=b"\x89PNG other", mime_type="image/png")
    assert digest != prompt_sha256(gemini, [red, other_part, "list 1 concepts"], ConceptCandidates)

    answer = GeminiClient(gemini).generate_structured([red, part, "list 1 concepts"], ConceptCandidates)
    assert answer.ok and answer.prompt_sha256 == digest
    parts = fake.requests[0].body["contents"][0]["parts"]
    assert [p["inlineData"]["mime_type"] for p in parts if "inlineData" in p] == ["image/png", "image/png"]


def test_concepts_cli_reports_a_missing_key_and_a_missing_review_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    runner = CliRunner()
    result = runner.invoke(app, ["concepts", "generate", str(tmp_path / "review.csv"), "--count", "3"])
    assert result.exit_code == 2 and "GEMINI_API_KEY" in " ".join(result.output.split())
    assert not (tmp_path / "review.csv").exists()
    result = runner.invoke(app, ["concepts", "accept", str(tmp_path / "missing.csv")])
    assert result.exit_code == 2 and "does not exist" in " ".join(result.output.split())
