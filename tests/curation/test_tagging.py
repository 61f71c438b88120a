"""Multi-label tagging (3XCM paper App. I) through the real google-genai client and the local fake endpoint, and
the assembler's use of the tags: no distractor carries the query concept."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from PIL import Image, ImageStat
from pydantic import TypeAdapter, ValidationError

from collectors.concepts import ShippedConceptsConfig, run_concepts
from collectors.translations import ShippedTranslationsConfig, run_translations
from curation.assemble import AssemblyConfig, run_assembly
from curation.tagging import (
    APP_I_PROMPT,
    GeminiTaggingConfig,
    OwnConceptTaggingConfig,
    TaggingConfig,
    TagRequest,
    run_tagging,
)
from data.clients.gemini import GeminiSettings
from data.clients.retry import RetryPolicy
from data.reference import default_pack
from data.schemas import CATALOG, LLM_FAILURES, RQ2_SLOTS, RQ3_SLOTS, TAGS
from tests.support.catalog_rows import catalog_row
from tests.support.fake_gemini import FakeGemini, RecordedRequest, Reply, json_reply, text_reply

API_KEY = "AIzaFAKE-tagging-key-0123456789abcdef"
MODEL = "gemini-2.5-flash"
CONCEPTS = [(1000, "kite"), (1001, "lantern"), (1002, "Swing"), (1003, "rice cake")]
PALETTE = [(r, g, b) for r in (0, 128, 255) for g in (0, 128, 255) for b in (0, 128, 255)]


# -- fixtures: solid-colour images, and a fake that "sees" an image by its colour ---------------------------------
def image_bytes(color: tuple[int, int, int], size: tuple[int, int] = (64, 48), fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


def sha(i: int) -> str:
    return f"{i:064x}"


class Store:
    """Image bytes by sha256, counting reads."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def add(self, i: int, size: tuple[int, int] = (64, 48)) -> str:
        self.blobs[sha(i)] = image_bytes(PALETTE[i], size)
        return sha(i)

    def __call__(self, sha256: str) -> bytes:
        return self.blobs[sha256]


def images_in(request: RecordedRequest) -> list[tuple[str, Image.Image]]:
    """(label text before it, decoded image) for every inline image of the first turn, in order."""
    label, out = "", []
    for part in request.body["contents"][0]["parts"]:
        if "text" in part:
            label = part["text"]
        inline = part.get("inlineData") or part.get("inline_data")
        if inline:
            assert (inline.get("mimeType") or inline.get("mime_type")) == "image/jpeg"
            data = inline["data"]  # google-genai sends URL-safe base64 without padding
            out.append((label, Image.open(io.BytesIO(base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))))))
    return out


def colour_index(image: Image.Image) -> int:
    mean = ImageStat.Stat(image.convert("RGB")).mean
    return min(range(len(PALETTE)), key=lambda i: sum((a - b) ** 2 for a, b in zip(PALETTE[i], mean, strict=True)))


def seeing(answers: dict[int, list[str]]):
    """A responder answering each image (known by its palette colour) with `answers[colour]`, by its label's index;
    items come back in reverse order so the tagger must map them by index, not by position."""

    def respond(request: RecordedRequest) -> Reply:
        items = []
        for label, image in images_in(request):
            match = re.fullmatch(r"Image (\d+):", label)
            assert match, f"image without its label: {label!r}"
            items.append({"index": int(match.group(1)), "categories": answers[colour_index(image)]})
        return json_reply({"images": items[::-1]})

    return respond


@pytest.fixture(autouse=True)
def api_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", API_KEY)


@pytest.fixture
def fake() -> Iterator[FakeGemini]:
    with FakeGemini() as server:
        yield server


def config(fake: FakeGemini, **overrides: object) -> GeminiTaggingConfig:
    gemini = {
        "base_url": fake.base_url,
        "timeout_s": 5.0,
        "retry": RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05),
        "prefect_concurrency_limit": None,
        **overrides.pop("gemini", {}),  # type: ignore[dict-item]
    }
    return GeminiTaggingConfig(gemini=GeminiSettings(**gemini), **overrides)


def requests_for(store: Store, specs: list[tuple[int, int]]) -> list[TagRequest]:
    """(palette index, own concept id) -> a request for a stored image of that colour."""
    return [TagRequest(image_id=f"img-{i}", concept_id=concept, sha256=store.add(i)) for i, concept in specs]


def by_image(table: pa.Table) -> dict[str, dict]:
    return {row["image_id"]: row for row in table.to_pylist()}


# -- tagging -----------------------------------------------------------------------------------------------------
def test_a_batch_is_answered_in_priority_order_with_the_own_concept(fake: FakeGemini, tmp_path: Path) -> None:
    store = Store()
    requests = requests_for(store, [(1, 1000), (2, 1001), (3, 1003)])
    store.blobs[sha(3)] = image_bytes(PALETTE[3], size=(3000, 1500), fmt="JPEG")  # large: sent downscaled
    fake.fallback = seeing({1: ["Lantern", " kite "], 2: ["swing"], 3: ["rice cake", "lantern", "LANTERN"]})

    out = run_tagging(config(fake, max_image_side=512), requests, CONCEPTS, store, str(tmp_path / "cache"))

    assert out.tags.schema == TAGS and out.failures.schema == LLM_FAILURES and out.failures.num_rows == 0
    assert out.tags["image_id"].to_pylist() == ["img-1", "img-2", "img-3"]  # request order
    rows = by_image(out.tags)
    assert rows["img-1"]["concept_ids"] == [1001, 1000]  # the model's priority order, names normalised
    assert rows["img-2"]["concept_ids"] == [1002, 1001]  # own concept missed by the model: appended
    assert rows["img-3"]["concept_ids"] == [1003, 1001]  # a repeat dropped
    assert {(r["tagger"], r["model_id"]) for r in rows.values()} == {("gemini", MODEL)}

    [request] = fake.requests
    assert request.model == MODEL and request.api_key == API_KEY
    filled = APP_I_PROMPT.format(category=json.dumps([name for _, name in CONCEPTS]))
    assert request.prompt.startswith(filled)
    assert "in the categories please order by priority (high to low)." in request.prompt
    assert request.schema_properties == {"images"}
    assert request.generation_config["responseMimeType"] == "application/json"
    sent = images_in(request)
    assert [label for label, _ in sent] == ["Image 0:", "Image 1:", "Image 2:"]
    assert sent[0][1].size == (64, 48) and sent[2][1].size == (512, 256)  # small images are not enlarged


@pytest.mark.parametrize(
    "bad",
    [
        {"images": [{"index": 0, "categories": ["dragon dance"]}, {"index": 1, "categories": ["kite"]}]},
        {"images": [{"index": 0, "categories": ["kite"]}]},  # an image unanswered
        {"images": [{"index": 0, "categories": ["kite"]}, {"index": 0, "categories": ["kite"]}]},  # repeated
        {"images": [{"index": 0, "categories": ["kite"]}, {"index": 2, "categories": ["kite"]}]},  # not in request
    ],
)
def test_rule_breaking_answers_are_asked_again(fake: FakeGemini, bad: dict) -> None:
    store = Store()
    requests = requests_for(store, [(1, 1000), (2, 1001)])
    fake.fallback = seeing({1: ["kite", "swing"], 2: ["lantern"]})
    fake.enqueue(json_reply(bad))

    out = run_tagging(config(fake), requests, CONCEPTS, store)

    assert out.failures.num_rows == 0
    assert by_image(out.tags)["img-1"]["concept_ids"] == [1000, 1002]
    assert len(fake.requests) == 2 and "invalid_output" in fake.requests[1].prompt


def test_a_name_outside_the_list_is_named_in_the_re_ask(fake: FakeGemini) -> None:
    store = Store()
    requests = requests_for(store, [(1, 1000)])
    fake.fallback = seeing({1: ["kite"]})
    fake.enqueue(json_reply({"images": [{"index": 0, "categories": ["kite", "dragon dance"]}]}))
    out = run_tagging(config(fake), requests, CONCEPTS, store)
    assert out.tags["concept_ids"].to_pylist() == [[1000]] and out.tags["tagger"].to_pylist() == ["gemini"]
    assert "'dragon dance'" in fake.requests[1].prompt and "not in the list" in fake.requests[1].prompt


def test_images_per_request_splits_the_requests(fake: FakeGemini) -> None:
    store = Store()
    requests = requests_for(store, [(i, 1000 + i % 4) for i in range(1, 6)])
    fake.fallback = seeing({i: ["kite"] for i in range(1, 6)})

    out = run_tagging(config(fake, images_per_request=2, concurrent_requests=2), requests, CONCEPTS, store)

    assert out.failures.num_rows == 0 and set(out.tags["tagger"].to_pylist()) == {"gemini"}
    per_request = sorted(len(images_in(r)) for r in fake.requests)
    assert per_request == [1, 2, 2]
    seen = sorted(colour_index(image) for r in fake.requests for _, image in images_in(r))
    assert seen == [1, 2, 3, 4, 5]  # every image asked exactly once
    assert all(fake.requests[0].prompt.split("Image 0:")[0] == r.prompt.split("Image 0:")[0] for r in fake.requests)


def test_an_image_shared_by_two_requests_is_asked_once(fake: FakeGemini) -> None:
    store = Store()
    requests = [*requests_for(store, [(1, 1000)]), TagRequest(image_id="img-1-again", concept_id=1003, sha256=sha(1))]
    fake.fallback = seeing({1: ["lantern"]})
    out = run_tagging(config(fake), requests, CONCEPTS, store)
    assert len(images_in(fake.requests[0])) == 1
    assert out.tags["concept_ids"].to_pylist() == [[1001, 1000], [1001, 1003]]


def test_the_cache_is_per_image(fake: FakeGemini, tmp_path: Path) -> None:
    store = Store()
    cache = str(tmp_path / "cache")
    requests = requests_for(store, [(1, 1000), (2, 1001), (3, 1002)])
    fake.fallback = seeing({1: ["kite"], 2: ["lantern", "kite"], 3: ["swing"], 4: ["rice cake"]})
    first = run_tagging(config(fake, images_per_request=2), requests, CONCEPTS, store, cache)
    assert len(fake.requests) == 2

    # Same images, other batches: nothing is asked again.
    again = run_tagging(config(fake, images_per_request=3), requests, CONCEPTS, store, cache)
    assert len(fake.requests) == 2 and again.tags.equals(first.tags)

    # One new image: one request holding that image only.
    more = [*requests, *requests_for(store, [(4, 1003)])]
    out = run_tagging(config(fake, images_per_request=3), more, CONCEPTS, store, cache)
    assert len(fake.requests) == 3
    assert [colour_index(image) for _, image in images_in(fake.requests[2])] == [4]
    assert out.tags.slice(0, 3).equals(first.tags) and by_image(out.tags)["img-4"]["concept_ids"] == [1003]

    # Another concept list is another prompt: everything is asked again.
    run_tagging(config(fake, images_per_request=4), more, [*CONCEPTS, (1004, "drum")], store, cache)
    assert len(fake.requests) == 4 and len(images_in(fake.requests[3])) == 4


def test_a_persistently_malformed_answer_gives_a_failure_row_and_untagged_images(
    fake: FakeGemini, tmp_path: Path
) -> None:
    store = Store()
    cache = tmp_path / "cache"
    requests = requests_for(store, [(1, 1000), (2, 1001), (3, 1002)])
    fake.fallback = seeing({1: ["lantern", "kite"], 2: ["kite"], 3: ["kite"]})
    fake.enqueue(text_reply("{broken"), text_reply("{broken"))  # the first batch's two tries

    out = run_tagging(
        config(fake, images_per_request=2, concurrent_requests=1, gemini={"max_invalid_answers": 2}),
        requests,
        CONCEPTS,
        store,
        str(cache),
    )

    rows = by_image(out.tags)
    for image_id, own in (("img-1", 1000), ("img-2", 1001)):
        assert rows[image_id] == {"image_id": image_id, "concept_ids": [own], "tagger": "none", "model_id": None}
    assert rows["img-3"]["concept_ids"] == [1000, 1002] and rows["img-3"]["tagger"] == "gemini"
    [failure] = out.failures.to_pylist()
    assert failure["stage"] == "tags" and failure["request_key"] == "img-1,img-2" and failure["model"] == MODEL
    assert failure["error"] == "malformed_output" and failure["attempts"] == 2 and failure["raw_text"] == "{broken"

    # Failures are not cached: a rerun asks for the failed batch only, and now tags it.
    asked = len(fake.requests)
    again = run_tagging(config(fake, images_per_request=2), requests, CONCEPTS, store, str(cache))
    assert len(fake.requests) == asked + 1
    assert sorted(colour_index(image) for _, image in images_in(fake.requests[-1])) == [1, 2]
    assert by_image(again.tags)["img-1"]["concept_ids"] == [1001, 1000] and again.failures.num_rows == 0


def test_the_api_key_never_reaches_cache_files_or_failure_rows(fake: FakeGemini, tmp_path: Path) -> None:
    store = Store()
    cache = tmp_path / "cache"
    requests = requests_for(store, [(1, 1000), (2, 1001)])
    fake.fallback = seeing({1: ["kite"], 2: ["lantern"]})
    fake.enqueue(*[text_reply(f"not json; key={API_KEY}")] * 2)  # an answer that echoes the key
    cfg = config(fake, images_per_request=1, concurrent_requests=1, gemini={"max_invalid_answers": 2})

    out = run_tagging(cfg, requests, CONCEPTS, store, str(cache))

    assert out.failures.num_rows == 1 and "key=" in out.failures["raw_text"][0].as_py()
    assert API_KEY not in json.dumps(out.failures.to_pylist()) and API_KEY not in json.dumps(out.tags.to_pylist())
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert any("tags" in p.parts for p in files) and len(files) >= 2  # per-image and whole-request entries
    assert all(API_KEY not in p.read_text() for p in files)
    assert all(r.api_key == API_KEY for r in fake.requests)  # it was sent, as a header only


def test_an_unreadable_image_is_reported_and_not_sent(fake: FakeGemini) -> None:
    store = Store()
    requests = requests_for(store, [(1, 1000), (2, 1001)])
    store.blobs[sha(2)] = b"not an image"
    fake.fallback = seeing({1: ["kite"]})

    out = run_tagging(config(fake), requests, CONCEPTS, store)

    [request] = fake.requests
    assert [colour_index(image) for _, image in images_in(request)] == [1]
    assert by_image(out.tags)["img-2"] == {
        "image_id": "img-2",
        "concept_ids": [1001],
        "tagger": "none",
        "model_id": None,
    }
    [failure] = out.failures.to_pylist()
    assert failure["request_key"] == "img-2" and failure["error"] == "image_error" and failure["attempts"] == 0


def test_the_none_backend_tags_each_image_with_its_own_concept_without_reading_it() -> None:
    requests = [
        TagRequest(image_id="a", concept_id=3, sha256=sha(1)),
        TagRequest(image_id="b", concept_id=4, sha256=sha(2)),
    ]

    def unreadable(sha256: str) -> bytes:
        raise AssertionError("the none backend reads no image")

    out = run_tagging(OwnConceptTaggingConfig(), requests, CONCEPTS, unreadable)
    assert out.tags.to_pylist() == [
        {"image_id": "a", "concept_ids": [3], "tagger": "none", "model_id": None},
        {"image_id": "b", "concept_ids": [4], "tagger": "none", "model_id": None},
    ]
    assert out.failures.num_rows == 0 and out.failures.schema == LLM_FAILURES


def test_tagging_config_picks_the_backend_and_bounds_the_batch() -> None:
    adapter = TypeAdapter(TaggingConfig)
    assert isinstance(adapter.validate_python({"backend": "none"}), OwnConceptTaggingConfig)
    parsed = adapter.validate_python({"backend": "gemini", "images_per_request": 4, "gemini": {"model": "m"}})
    assert isinstance(parsed, GeminiTaggingConfig) and parsed.images_per_request == 4 and parsed.gemini.model == "m"
    for bad in ({"backend": "gemini", "images_per_request": 0}, {"backend": "gemini", "images_per_request": 1000},
                {"backend": "gemini", "max_image_side": 10}, {"backend": "gemini", "api_key": "x"}):  # fmt: skip
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)


# -- the assembler and the tags ----------------------------------------------------------------------------------
DANCE, COSTUME, DRINK = (default_pack().concept_by_name()[name].concept_id for name in ("dance", "costume", "drink"))


def catalog_from_tags(images: list[tuple[str, int]], tags: pa.Table) -> pa.Table:
    """CATALOG rows (already in catalog order) for (country, concept id), with the tagging stage's tags."""
    tag_rows = by_image(tags)
    rows = []
    for index, (country, concept_id) in enumerate(images):
        tagged = tag_rows[f"img-{index}"]
        rows.append(
            catalog_row(
                index,
                f"img-{index}",
                country,
                concept_id,
                index,
                tagged["concept_ids"],
                tagged["tagger"],
                sha256=sha(index),
                width=64,
                height=48,
                format="PNG",
            )
        )
    return pa.Table.from_pylist(rows, schema=CATALOG)


@pytest.mark.parametrize("shows_dance", [True, False])
def test_a_distractor_tagged_with_the_query_concept_is_never_used(
    fake: FakeGemini, tmp_path: Path, shows_dance: bool
) -> None:
    # Spain and Japan/Kenya are different language groups; the second Spanish costume image (the suspect) is the
    # only Spanish distractor besides the drink image.
    images = [
        ("Japan", COSTUME), ("Kenya", COSTUME), ("Spain", COSTUME),
        ("Spain", COSTUME),
        ("Japan", DANCE), ("Kenya", DANCE), ("Spain", DANCE), ("Spain", DANCE),
        ("Japan", DRINK), ("Kenya", DRINK), ("Spain", DRINK),
    ]  # fmt: skip
    country_order = {c.name: i for i, c in enumerate(default_pack().countries)}
    images.sort(key=lambda image: (image[1], country_order[image[0]]))  # catalog order: concept id, then country
    suspect = len(images) - 1 - images[::-1].index(("Spain", COSTUME))
    store = Store()
    requests = [
        TagRequest(image_id=f"img-{i}", concept_id=concept, sha256=store.add(i))
        for i, (_, concept) in enumerate(images)
    ]
    names = {c.concept_id: c.concept for c in default_pack().concepts}
    answers = {i: [names[concept]] for i, (_, concept) in enumerate(images)}
    if shows_dance:
        answers[suspect] = [names[COSTUME], names[DANCE]]  # a costume photo taken at a dance
    fake.fallback = seeing(answers)
    concept_list = [(k, names[k]) for k in (COSTUME, DANCE, DRINK)]
    tags = run_tagging(config(fake), requests, concept_list, store, str(tmp_path / "cache")).tags
    assert by_image(tags)[f"img-{suspect}"]["concept_ids"] == ([COSTUME, DANCE] if shows_dance else [COSTUME])

    catalog = catalog_from_tags(images, tags)
    concepts = run_concepts(ShippedConceptsConfig(include=[str(k) for k in (COSTUME, DANCE, DRINK)]), default_pack())
    translations = run_translations(
        ShippedTranslationsConfig(), default_pack(), concepts, ["es", "ja", "sw"]
    ).translations

    used_for_dance = False
    for seed in range(3):
        result = run_assembly(AssemblyConfig(seed=seed), catalog, translations, default_pack())
        assert result.benchmark.num_rows > 0 and result.benchmark_cd.num_rows > 0
        columns = [f"{prefix}index" for _, prefix in RQ2_SLOTS]
        dance_rows = [r for r in result.benchmark.to_pylist() if r["query_concept_id"] == DANCE]
        cd_columns = [f"{slot}_candidate_index" for slot in RQ3_SLOTS]
        dance_rows_cd = [r for r in result.benchmark_cd.to_pylist() if r["query_concept_id"] == DANCE]
        assert dance_rows and dance_rows_cd
        uses = [r[c] for r in dance_rows for c in columns] + [r[c] for r in dance_rows_cd for c in cd_columns]
        used_for_dance |= suspect in uses
    # Tagged with dance: never a distractor of a dance query. Untagged: the same image is used, so the check bites.
    assert used_for_dance is not shows_dance
