"""Tagging stage: every concept an image shows, in priority order (3XCM paper App. I).

The assembler reads tags so that no distractor carries the query concept. Embedded default (`none`): each image
is tagged with its own concept only, recorded as `tagger=none` so nobody mistakes it for a real multi-label pass.

Production (`gemini`): the App. I prompt, filled with the full concept list, is sent with a batch of downscaled
JPEG images through the one Gemini client (`data/clients/gemini.py`: retries, rate limits, re-asks, secrets). The
answer names each image's categories in priority order; a name outside the concept list, or a missing or repeated
image index, makes the client ask again. Valid answers are also cached per image (image sha256 + prompt hash), so
a rerun with other batches does not ask again for images already answered. An image whose request never gave a
valid answer keeps its own concept only, with `tagger=none`, and the request becomes an LLM_FAILURES row.
"""

from __future__ import annotations

import contextvars
import hashlib
import io
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Protocol, TypedDict

import pyarrow as pa
from pydantic import BaseModel, Field

from data.clients.gemini import GeminiClient, GeminiSettings, failure_row, failures_table
from data.schemas import TAGS, LlmFailureRow, empty, from_rows
from data.stage import BackendConfig, require
from data.workspace import Storage

logger = logging.getLogger(__name__)

STAGE = "tags"
TAGGER_NONE = "none"
TAGGER_GEMINI = "gemini"
#: LLM_FAILURES.error of an image that could not be read or decoded, so it was never sent.
IMAGE_ERROR = "image_error"

# 3XCM paper App. I, Figure 12, verbatim; {category} is "dynamically populated with the full list of categories".
# The doubled braces are the paper's own: it is a str.format template.
APP_I_PROMPT = (
    "Please classify the following image by assigning them to one or more of the following cultural categories: "
    "{category}. **Comprehensive Output Format (JSON):** output as JSON for example:\n"
    "{{\n"
    '  "<INDEX>": ["<CATEGORY>", "<CATEGORY>", ...],\n'
    "}}\n"
    "in the categories please order by priority (high to low)."
)
# Ours, not the paper's: several images share a request, and the response schema is a list of {index, categories}
# items because the Developer API refuses dict-shaped schemas. It must not depend on the batch (no count), since
# the filled prompt is part of the per-image cache key.
BATCH_INSTRUCTION = (
    'The images follow, each after its label "Image <INDEX>:". Answer with one item per image: "index" is the '
    'number in its label and "categories" lists its categories, exactly as written in the list above, highest '
    "priority first."
)


class OwnConceptTaggingConfig(BackendConfig["Tagger"]):
    backend: Literal["none"] = "none"

    def build(self) -> OwnConceptTagger:
        return OwnConceptTagger()


class GeminiTaggingConfig(BackendConfig["Tagger"]):
    backend: Literal["gemini"] = "gemini"
    gemini: GeminiSettings = Field(default_factory=GeminiSettings)
    images_per_request: int = Field(
        default=8,
        ge=1,
        le=16,  # 16 JPEGs at 1024 px stay well under the API's 20 MB inline request limit, base64 included
        description="Images batched into one request.",
    )
    max_image_side: int = Field(
        default=1024, ge=64, le=3072, description="Longest side, in pixels, of the JPEG sent for each image."
    )
    jpeg_quality: int = Field(default=85, ge=30, le=95, description="Quality of the re-encoded JPEG.")
    concurrent_requests: int = Field(
        default=4,
        ge=1,
        le=64,
        description="Requests in flight at once; gemini.requests_per_minute still bounds the rate.",
    )

    def build(self) -> GeminiTagger:
        return GeminiTagger(self)


TaggingConfig = Annotated[OwnConceptTaggingConfig | GeminiTaggingConfig, Field(discriminator="backend")]


class TagRequest(BaseModel):
    image_id: str
    concept_id: int
    sha256: str


@dataclass(frozen=True)
class TaggingOutput:
    tags: pa.Table  # TAGS, one row per request, in request order
    failures: pa.Table  # LLM_FAILURES, stage "tags"


class Tagger(Protocol):
    def run(
        self,
        requests: list[TagRequest],
        concepts: list[tuple[int, str]],
        load_bytes: Callable[[str], bytes],
        cache_dir: str | None,
    ) -> TaggingOutput: ...


class TagsRow(TypedDict):
    """A TAGS row."""

    image_id: str
    concept_ids: list[int]
    tagger: str
    model_id: str | None


def tag_row(request: TagRequest, concept_ids: list[int], tagger: str, model_id: str | None) -> TagsRow:
    """A TAGS row: priority order kept, repeats dropped, and the image's own concept always present."""
    ordered = list(dict.fromkeys(concept_ids))
    if request.concept_id not in ordered:  # a tagger may miss the obvious; the own concept is a fact
        ordered.append(request.concept_id)
    return {"image_id": request.image_id, "concept_ids": ordered, "tagger": tagger, "model_id": model_id}


def _tags_table(rows: list[TagsRow]) -> pa.Table:
    return from_rows(rows, TAGS) if rows else empty(TAGS)


class OwnConceptTagger:
    name = TAGGER_NONE
    model_id = None

    def tag(self, requests: list[TagRequest]) -> list[list[int]]:
        return [[r.concept_id] for r in requests]

    def run(
        self,
        requests: list[TagRequest],
        concepts: list[tuple[int, str]],
        load_bytes: Callable[[str], bytes],
        cache_dir: str | None,
    ) -> TaggingOutput:
        rows = [tag_row(r, ids, self.name, self.model_id) for r, ids in zip(requests, self.tag(requests), strict=True)]
        return TaggingOutput(_tags_table(rows), failures_table([]))


# -- Gemini ------------------------------------------------------------------------------------------------------
class ImageCategories(BaseModel):
    index: int = Field(description="The number in the image's label.")
    categories: list[str] = Field(description="Categories the image shows, from the list, highest priority first.")


class TaggingAnswer(BaseModel):
    images: list[ImageCategories]


def normalise_name(name: str) -> str:
    """Light normalisation for matching the model's names to the list: case and whitespace only."""
    return " ".join(name.split()).casefold()


def tagging_prompt(concepts: list[tuple[int, str]]) -> str:
    """The App. I prompt filled with every concept name (a JSON list, so names with commas stay whole)."""
    names = json.dumps([name for _, name in concepts], ensure_ascii=False)
    return f"{APP_I_PROMPT.format(category=names)}\n\n{BATCH_INSTRUCTION}"


def concept_lookup(concepts: list[tuple[int, str]]) -> dict[str, int]:
    """Normalised name -> concept id; the first id wins when two names normalise alike."""
    lookup: dict[str, int] = {}
    for concept_id, name in concepts:
        lookup.setdefault(normalise_name(name), concept_id)
    return lookup


def map_names(names: list[str], lookup: dict[str, int]) -> list[int]:
    """Concept ids in the order named; raises ValueError for a name outside the list."""
    unknown = [n for n in names if normalise_name(n) not in lookup]
    if unknown:
        raise ValueError(f"categories not in the list: {', '.join(repr(n) for n in unknown[:10])}")
    return list(dict.fromkeys(lookup[normalise_name(n)] for n in names))


def answer_validator(count: int, lookup: dict[str, int]) -> Callable[[BaseModel], None]:
    """Every image index 0..count-1 answered exactly once, every name from the concept list."""

    def validate(value: BaseModel) -> None:
        if not isinstance(value, TaggingAnswer):
            raise ValueError(f"expected a TaggingAnswer, got {type(value).__name__}")
        indexes = [item.index for item in value.images]
        repeated = sorted({i for i in indexes if indexes.count(i) > 1})
        outside = sorted({i for i in indexes if not 0 <= i < count})
        missing = sorted(set(range(count)) - set(indexes))
        problems = []
        if repeated:
            problems.append(f"image indexes answered more than once: {repeated}")
        if outside:
            problems.append(f"image indexes not in the request (0..{count - 1}): {outside}")
        if missing:
            problems.append(f"image indexes not answered: {missing}")
        for item in value.images:
            try:
                map_names(item.categories, lookup)
            except ValueError as exc:
                problems.append(f"image {item.index}: {exc}")
        if problems:
            raise ValueError("; ".join(problems))

    return validate


def downscale_jpeg(data: bytes, max_side: int, quality: int) -> bytes:
    """The image as an RGB JPEG whose longest side is at most `max_side`, to bound the request size."""
    image_module = require("PIL.Image", "gemini")
    ops = require("PIL.ImageOps", "gemini")
    with image_module.open(io.BytesIO(data)) as opened:
        opened.draft("RGB", (max_side, max_side))  # JPEG: decode at a reduced scale, much cheaper for large photos
        image = ops.exif_transpose(opened)
        if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
            rgba = image.convert("RGBA")
            background = image_module.new("RGB", rgba.size, (255, 255, 255))  # transparency reads as white
            background.paste(rgba, mask=rgba.getchannel("A"))
            image = background
        image = image.convert("RGB")
        image.thumbnail((max_side, max_side), image_module.Resampling.LANCZOS)
        out = io.BytesIO()
        image.save(out, format="JPEG", quality=quality)
        return out.getvalue()


class PerImageCache:
    """One small JSON per answered image, keyed by image sha256 and everything else that decides the answer.

    The key leaves out the batch composition on purpose: an image answered once is not asked again when it
    falls in another batch. Entries hold category names and hashes, never a key or a request.
    """

    def __init__(self, url: str | None, answer_key: str) -> None:
        self._storage = Storage(url) if url else None
        self._answer_key = answer_key

    def key(self, image_sha256: str) -> str:
        return hashlib.sha256(f"{image_sha256}:{self._answer_key}".encode()).hexdigest()

    def _path(self, image_sha256: str) -> str:
        key = self.key(image_sha256)
        assert self._storage is not None
        return self._storage.path("tags", key[:2], f"{key}.json")  # sharded: 100k files in one folder are slow

    def get(self, image_sha256: str, lookup: dict[str, int]) -> list[int] | None:
        if self._storage is None:
            return None
        path = self._path(image_sha256)
        if not self._storage.exists(path):
            return None
        try:
            entry = self._storage.read_json(path)
            if entry["image_sha256"] != image_sha256:
                raise ValueError("entry of another image")
            return map_names(list(entry["categories"]), lookup)
        except (KeyError, TypeError, ValueError) as exc:  # unreadable or rejected by the current list: ask again
            logger.info("tag cache entry for %s ignored: %s", image_sha256[:12], type(exc).__name__)
            return None

    def put(self, image_sha256: str, categories: list[str], prompt_sha256: str, model: str) -> None:
        if self._storage is None:
            return
        self._storage.write_json(
            self._path(image_sha256),
            {
                "image_sha256": image_sha256,
                "model": model,
                "categories": categories,
                "request_prompt_sha256": prompt_sha256,  # the whole-request entry of GeminiClient's cache
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        )


@dataclass(frozen=True)
class _BatchResult:
    tags: dict[str, list[int]]  # image sha256 -> concept ids (successes only)
    failures: list[LlmFailureRow]


class GeminiTagger:
    def __init__(self, config: GeminiTaggingConfig) -> None:
        self.config = config

    def answer_key(self, prompt: str) -> str:
        """Everything besides the image that decides a per-image answer."""
        settings = self.config.gemini
        payload = {
            "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest(),
            "model": settings.model,
            "schema": TaggingAnswer.__name__,
            "schema_sha256": hashlib.sha256(
                json.dumps(TaggingAnswer.model_json_schema(), sort_keys=True).encode()
            ).hexdigest(),
            "temperature": settings.temperature,
            "max_image_side": self.config.max_image_side,
            "jpeg_quality": self.config.jpeg_quality,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def run(
        self,
        requests: list[TagRequest],
        concepts: list[tuple[int, str]],
        load_bytes: Callable[[str], bytes],
        cache_dir: str | None,
    ) -> TaggingOutput:
        settings = self.config.gemini
        prompt = tagging_prompt(concepts)
        lookup = concept_lookup(concepts)
        cache_url = settings.cache_dir or cache_dir  # the client's own precedence
        cache = PerImageCache(cache_url, self.answer_key(prompt))

        # The categories depend on the pixels only: one question per distinct image, shared by its requests.
        tags: dict[str, list[int]] = {}
        pending: dict[str, TagRequest] = {}
        for request in requests:
            if request.sha256 in tags or request.sha256 in pending:
                continue
            hit = cache.get(request.sha256, lookup)
            if hit is None:
                pending[request.sha256] = request
            else:
                tags[request.sha256] = hit
        todo = list(pending.values())
        size = self.config.images_per_request
        batches = [todo[start : start + size] for start in range(0, len(todo), size)]
        logger.info("tagging %d images: %d asked in %d requests", len(requests), len(todo), len(batches))

        failures: list[LlmFailureRow] = []
        if batches:
            client = GeminiClient(settings, cache_dir=cache_url)
            prompt_sha = hashlib.sha256(prompt.encode()).hexdigest()

            def ask(batch: list[TagRequest]) -> _BatchResult:
                return self._ask(client, cache, prompt, prompt_sha, lookup, batch, load_bytes)

            with ThreadPoolExecutor(max_workers=min(self.config.concurrent_requests, len(batches))) as pool:
                # Each task runs in a copy of this context, so a Prefect run context (and its global concurrency
                # limit, see flows.engine.slots.gpu_slot) reaches the worker threads.
                futures = [pool.submit(contextvars.copy_context().run, ask, batch) for batch in batches]
                for future in futures:  # in submission order: the failure rows come out in a stable order
                    result = future.result()
                    tags.update(result.tags)
                    failures += result.failures

        rows: list[TagsRow] = []
        for request in requests:
            if request.sha256 in tags:
                rows.append(tag_row(request, tags[request.sha256], TAGGER_GEMINI, settings.model))
            else:  # visibly untagged: its own concept only, and no model claimed
                rows.append(tag_row(request, [request.concept_id], TAGGER_NONE, None))
        return TaggingOutput(_tags_table(rows), failures_table(failures))

    def _ask(
        self,
        client: GeminiClient,
        cache: PerImageCache,
        prompt: str,
        prompt_sha: str,
        lookup: dict[str, int],
        batch: list[TagRequest],
        load_bytes: Callable[[str], bytes],
    ) -> _BatchResult:
        """One request for a batch of images; an image that cannot be read is left out and reported alone."""
        types = require("google.genai.types", "gemini")
        model = self.config.gemini.model
        failures: list[LlmFailureRow] = []
        sent: list[tuple[TagRequest, Any]] = []
        for request in batch:
            try:
                jpeg = downscale_jpeg(load_bytes(request.sha256), self.config.max_image_side, self.config.jpeg_quality)
            except Exception as exc:  # a missing blob or an undecodable file: this image only, never the stage
                failures.append(
                    {
                        "stage": STAGE,
                        "request_key": request.image_id,
                        "model": model,
                        "prompt_sha256": prompt_sha,
                        "attempts": 0,
                        "error": IMAGE_ERROR,
                        "detail": f"{type(exc).__name__}: {str(exc)[:300]}",
                        "raw_text": None,
                    }
                )
                continue
            sent.append((request, types.Part.from_bytes(data=jpeg, mime_type="image/jpeg")))
        if not sent:
            return _BatchResult({}, failures)

        contents: list[Any] = [prompt]
        for index, (_, part) in enumerate(sent):
            contents += [f"Image {index}:", part]
        request_key = ",".join(request.image_id for request, _ in sent)
        answer = client.generate_structured(contents, TaggingAnswer, answer_validator(len(sent), lookup), request_key)
        if not answer.ok:
            return _BatchResult({}, [*failures, failure_row(STAGE, request_key, model, answer)])
        assert answer.value is not None  # an ok structured answer holds its validated value
        tags: dict[str, list[int]] = {}
        for item in answer.value.images:  # the validator saw every index 0..len(sent)-1 exactly once
            request, _ = sent[item.index]
            tags[request.sha256] = map_names(item.categories, lookup)
            cache.put(request.sha256, item.categories, answer.prompt_sha256, model)
        return _BatchResult(tags, failures)


def run_tagging(
    config: OwnConceptTaggingConfig | GeminiTaggingConfig,
    requests: list[TagRequest],
    concepts: list[tuple[int, str]],
    load_bytes: Callable[[str], bytes],
    cache_dir: str | None = None,
) -> TaggingOutput:
    """Tags of every requested image. `concepts` is the full kept concept list (id, English name), the App. I
    category list; `load_bytes(sha256)` returns an image's stored bytes; `cache_dir` holds model answers."""
    return config.build().run(requests, concepts, load_bytes, cache_dir)
