"""Explicit pyarrow schemas for every table the pipeline writes.

Conventions (docs/operators.md, "How a build works": failures are rows): collection tables carry `status` (ok | failed)
and `error` (a short class such as `not_an_image`); decision tables carry `keep` and `reason`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

import pyarrow as pa

STATUS_OK = "ok"
STATUS_FAILED = "failed"

DEMO_CORPUS = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),  # relative to the corpus root
        pa.field("role", pa.string(), nullable=False),  # original | duplicate:<kind> | lookalike:<kind> | bad_file
        pa.field("duplicate_of", pa.string()),
        pa.field("expected_error", pa.string()),
    ]
)

CONCEPTS = pa.schema(
    [
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("concept", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),  # shipped | gemini | operator
    ]
)

CONCEPT_DEDUP = pa.schema(
    [
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("concept", pa.string(), nullable=False),
        pa.field("normalized", pa.string(), nullable=False),
        pa.field("keep", pa.bool_(), nullable=False),
        pa.field("duplicate_of", pa.int32()),  # the kept concept this one merges into
        pa.field("score", pa.float32()),  # similarity to duplicate_of (or to the nearest concept when kept)
        pa.field("nearest_id", pa.int32()),
        pa.field("method", pa.string(), nullable=False),
        pa.field("reason", pa.string()),
    ]
)

CONCEPT_CANDIDATES = pa.schema(
    [
        # Generated concepts awaiting an operator (3XCM paper App. H); never used by a build until accepted.
        pa.field("candidate_id", pa.string(), nullable=False),  # stable: hash of the normalised name
        pa.field("concept", pa.string(), nullable=False),
        pa.field("rationale", pa.string()),
        pa.field("near_shipped", pa.string()),  # the shipped concept with the same normalised name, if any
        pa.field("model", pa.string(), nullable=False),
        pa.field("prompt_sha256", pa.string(), nullable=False),
        pa.field("review_status", pa.string(), nullable=False),  # pending | accepted | rejected
    ]
)

LLM_FAILURES = pa.schema(
    [
        # A model request that never produced a valid answer, with the raw text kept for inspection.
        pa.field("stage", pa.string(), nullable=False),
        pa.field("request_key", pa.string(), nullable=False),  # e.g. "ja" or "ja:12,13"
        pa.field("model", pa.string(), nullable=False),
        pa.field("prompt_sha256", pa.string(), nullable=False),
        pa.field("attempts", pa.int32(), nullable=False),
        # malformed_output | invalid_output | rate_limited | api_error | auth_error | image_error (never sent)
        pa.field("error", pa.string(), nullable=False),
        pa.field("detail", pa.string()),
        pa.field("raw_text", pa.string()),
    ]
)

TRANSLATION_CONFLICTS = pa.schema(
    [
        # A generated translation that differs from the shipped one; the shipped value is kept unless told otherwise.
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("language_code", pa.string(), nullable=False),
        pa.field("shipped_text", pa.string(), nullable=False),
        pa.field("proposed_text", pa.string(), nullable=False),
        pa.field("shipped_template", pa.string()),
        pa.field("proposed_template", pa.string()),
        pa.field("source", pa.string(), nullable=False),
        pa.field("resolution", pa.string(), nullable=False),  # kept_shipped | replaced_shipped
    ]
)

TRANSLATIONS = pa.schema(
    [
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("language_code", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("descriptor_template", pa.string(), nullable=False),
        pa.field("review_status", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
    ]
)

SEARCH_HITS = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),  # {slug}-{concept_id}-{rank}-{eng|nav}; query id on failure
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("country", pa.string(), nullable=False),
        pa.field("query", pa.string(), nullable=False),
        pa.field("query_lang", pa.string(), nullable=False),  # eng | nav
        pa.field("language_code", pa.string(), nullable=False),
        pa.field("rank", pa.int32()),  # 1-based position in the result list (1 = top hit), as in the authors' ids
        pa.field("url", pa.string()),
        pa.field("source_page", pa.string()),
        pa.field("title", pa.string()),
        pa.field("width", pa.int32()),
        pa.field("height", pa.int32()),
        pa.field("searcher", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("error", pa.string()),  # no_results | blocked | engine_error | ...
        pa.field("detail", pa.string()),
        # Provenance (docs/release-managers.md, "Image provenance"); null on failed rows.
        pa.field("region", pa.string()),  # the engine's region code (ddgs `region`); null when the searcher has none
        pa.field("license_filter", pa.string()),  # the engine's licence filter (ddgs `license_image`), null when off
        pa.field("license", pa.string()),  # as the source declares it (a local manifest's `license`), else `unknown`
        pa.field("retrieved_at", pa.string()),  # ISO 8601 UTC, as a local manifest declares it; else null
        pa.field("origin_url", pa.string()),  # the image's web URL as a local manifest declares it (`url` is the file)
    ]
)

IMAGES = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        # corrupt | not_an_image | too_small | too_large | decompression_bomb | opted_out | ...
        pa.field("error", pa.string()),
        pa.field("detail", pa.string()),  # for opted_out: the rule that refused it
        pa.field("sha256", pa.string()),  # blob key of the original bytes
        pa.field("num_bytes", pa.int64()),
        pa.field("width", pa.int32()),
        pa.field("height", pa.int32()),
        pa.field("format", pa.string()),  # PIL format name: JPEG, PNG, WEBP ...
        # Filled by the HTTP downloader; null for local imports.
        pa.field("final_url", pa.string()),  # after redirects
        pa.field("http_status", pa.int32()),
        pa.field("content_type", pa.string()),  # as declared by the server; never trusted for the decision
        pa.field("retrieved_at", pa.string()),  # ISO 8601 UTC (`...Z`) when the last response came; null if none did
        pa.field("attempts", pa.int32()),  # fetch attempts (transient failures are retried)
        pa.field("transient", pa.bool_()),  # a failure that `retry-failed` may fetch again
    ]
)

#: The images stage's table: IMAGES, and what the image pass (collectors/image_pass.py) made from the same bytes for
#: each stored image. Null on failed rows.
IMAGES_PASSED = pa.schema(
    [
        *IMAGES,
        pa.field("phash", pa.uint64()),  # imagehash-compatible 64-bit pHash; null when the image did not decode
        pa.field("dhash", pa.uint64()),
        pa.field("pixel_sha256", pa.string()),  # decoded-pixel hash, where the decode was full anyway (not JPEG)
        pa.field("hash_error", pa.string()),  # a stored image whose reduced decode failed
        pa.field("thumbnails", pa.string()),  # blob key of the shard's thumbnails (.npz: align, chroma)
        pa.field("thumbnail_row", pa.int32()),  # this image's row in them
    ]
)

IMAGE_EMBEDDINGS = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("embedding", pa.list_(pa.float16())),  # unit norm; null when the image did not decode
        pa.field("error", pa.string()),
    ]
)

IMAGE_DEDUP = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("cluster_id", pa.string(), nullable=False),  # image_id of the cluster's kept image
        pa.field("cluster_size", pa.int32(), nullable=False),
        pa.field("keep", pa.bool_(), nullable=False),
        pa.field("duplicate_of", pa.string()),
        pa.field("method", pa.string()),  # a tier of DEDUP_PAIRS: the link to the kept image
        pa.field("score", pa.float32()),  # the tier's own measure (see DEDUP_PAIRS)
        pa.field("reason", pa.string()),
    ]
)

DEDUP_PAIRS = pa.schema(
    [
        # One row per (pair, tier) that reached the tier's review threshold; pairs beyond it are not recorded.
        pa.field("image_a", pa.string(), nullable=False),
        pa.field("image_b", pa.string(), nullable=False),
        pa.field("concept_id", pa.int32(), nullable=False),  # image_a's concept (the scope, by default)
        pa.field("tier", pa.string(), nullable=False),
        # exact tiers: 0; phash: Hamming distance of 64 bits (lower is closer); aligned: ECC correlation after an
        # affine alignment, embedding: cosine (both higher is closer)
        pa.field("score", pa.float32(), nullable=False),
        pa.field("decision", pa.string(), nullable=False),  # merge | review
    ]
)

REVIEW_QUEUE = pa.schema(
    [
        # Ambiguous pairs left in different clusters, for people to decide (3XCM App. J); kept apart until then.
        pa.field("image_a", pa.string(), nullable=False),
        pa.field("image_b", pa.string(), nullable=False),
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("cluster_a", pa.string(), nullable=False),  # the kept image of each side's cluster
        pa.field("cluster_b", pa.string(), nullable=False),
        pa.field("phash_distance", pa.float32()),
        pa.field("aligned_correlation", pa.float32()),
        pa.field("embedding_cosine", pa.float32()),
    ]
)

COPIES = pa.schema(
    # image_dedup side table: copies of one picture across concepts (curation/copies.py), one row per hashed image.
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("copy_group", pa.string(), nullable=False),  # the smallest image id among its byte/pixel copies
        pa.field("pixel_sha256", pa.string()),  # decoded-pixel hash, where it was known or computed
    ]
)

CONCEPT_DEDUP_SUMMARY = pa.schema(
    [
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("concept", pa.string(), nullable=False),
        pa.field("images", pa.int64(), nullable=False),
        pa.field("kept", pa.int64(), nullable=False),
        pa.field("dropped", pa.int64(), nullable=False),
        pa.field("dropped_by_tier", pa.string(), nullable=False),
        pa.field("clusters", pa.int64(), nullable=False),  # merged clusters of two or more images
        pa.field("largest_cluster", pa.int64(), nullable=False),
        pa.field("review_pairs", pa.int64(), nullable=False),
    ]
)

REVIEW = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("keep", pa.bool_(), nullable=False),
        pa.field("automatic_keep", pa.bool_(), nullable=False),
        pa.field("reviewer", pa.string(), nullable=False),  # auto_accept | label_studio | label_studio_files
        pa.field("policy", pa.string(), nullable=False),
        pa.field("reason", pa.string()),
    ]
)

REVIEW_DECISIONS = pa.schema(
    [
        # One row per reviewed item (a queued pair, a synthesis attempt): the majority over its annotators.
        pa.field("review", pa.string(), nullable=False),  # duplicate_review | synthesis_qa
        pa.field("item_key", pa.string(), nullable=False),  # image_a|image_b, or the attempt id
        pa.field("task_id", pa.int64()),  # the Label Studio task
        pa.field("status", pa.string(), nullable=False),  # decided | undecided | pending
        pa.field("decision", pa.string()),  # a choice name of the labeling config; null unless decided
        pa.field("reason", pa.string()),  # why it is not decided
        pa.field("votes", pa.string(), nullable=False),  # JSON {choice: count}
        pa.field("annotations", pa.int32(), nullable=False),
        pa.field("annotators", pa.list_(pa.string()), nullable=False),
        pa.field("majority_share", pa.float32()),
    ]
)

SYNTHESIS_QA_CANDIDATES = pa.schema(
    [
        # What the MixCuBe flow sends to synthesis QA: attempts that passed the automatic filters (App. A.6).
        pa.field("attempt_id", pa.string(), nullable=False),
        pa.field("original_id", pa.string(), nullable=False),
        pa.field("ethnicity", pa.string(), nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("original_sha256", pa.string(), nullable=False),  # blob keys
        pa.field("synthesized_sha256", pa.string(), nullable=False),
        pa.field("mask_sha256", pa.string(), nullable=False),
        pa.field("prompt", pa.string(), nullable=False),
        pa.field("brisque", pa.float32()),
        pa.field("clip_similarity", pa.float32()),
    ]
)

SYNTHESIS_QA = pa.schema(
    [
        pa.field("attempt_id", pa.string(), nullable=False),
        pa.field("original_id", pa.string(), nullable=False),
        pa.field("ethnicity", pa.string(), nullable=False),
        pa.field("keep", pa.bool_(), nullable=False),  # accepted by the reviewers (or the auto-accept policy)
        pa.field("status", pa.string(), nullable=False),  # decided | undecided | pending
        # accept | reject_artifacts | reject_cultural_marker | retry_prompt | fix_mask
        pa.field("decision", pa.string()),
        pa.field("reviewer", pa.string(), nullable=False),
        pa.field("policy", pa.string(), nullable=False),
        pa.field("reason", pa.string()),
    ]
)

RESYNTHESIS_REQUESTS = pa.schema(
    [
        # Consumed by the MixCuBe flow: each row becomes a new attempt; earlier attempts are never overwritten.
        pa.field("attempt_id", pa.string(), nullable=False),  # the reviewed attempt
        pa.field("original_id", pa.string(), nullable=False),
        pa.field("ethnicity", pa.string(), nullable=False),
        pa.field("next_attempt", pa.int32(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # retry_prompt | fix_mask
        pa.field("prompt", pa.string()),  # the tailored prompt (retry_prompt)
        pa.field("mask_sha256", pa.string()),  # blob key of the painted mask PNG (fix_mask)
        pa.field("requested_by", pa.list_(pa.string()), nullable=False),
    ]
)

#: Where an original came from (docs/release-managers.md, "Image provenance"), on every MixCuBe original and, in the
#: release, on its swaps. Null where it does not apply (no search for a labelled folder, no HTTP for a local file);
#: `license` is always set.
SOURCE_FIELDS: tuple[pa.Field, ...] = (
    pa.field("engine", pa.string()),  # the searcher (ddgs:duckduckgo, local); null when nothing was searched
    pa.field("query", pa.string()),
    pa.field("query_language", pa.string()),  # the query's language code
    pa.field("region", pa.string()),  # the engine's region code
    pa.field("rank", pa.int32()),  # 1-based position in the engine's answer
    pa.field("source_page", pa.string()),  # the page the image was found on
    pa.field("url", pa.string()),  # the image URL (a local file relative to its folder when no web URL is known)
    pa.field("final_url", pa.string()),  # after redirects (the HTTP downloader)
    pa.field("retrieved_at", pa.string()),  # ISO 8601, UTC
    pa.field("http_status", pa.int32()),
    pa.field("content_type", pa.string()),  # as the server declared it
    pa.field("license", pa.string()),  # as the source declares it, else `unknown`
    pa.field("license_filter", pa.string()),  # the search engine's licence filter, null when off
)

MIXCUBE_ORIGINALS = pa.schema(
    [
        pa.field("original_id", pa.string(), nullable=False),
        pa.field("culture", pa.string()),  # MixCuBe culture name (Azerbaijan, South Korea, ...)
        pa.field("country", pa.string()),  # its adjective: the public dataset's `country` column
        pa.field("category", pa.string()),  # Food | Festival | Clothes
        pa.field("food_label", pa.string()),  # native and English names (food_label.csv), Food only
        pa.field("source", pa.string(), nullable=False),  # the image file, or `demo`
        pa.field("status", pa.string(), nullable=False),
        # bad_label | short_row | long_row | empty_path | bad_path | path_outside_root | missing_file | not_a_file |
        # bad_retrieved_at | read_error | not_an_image | too_small
        pa.field("error", pa.string()),
        pa.field("sha256", pa.string()),
        # sha256 of the bytes as received, before the EXIF orientation was applied (= sha256 when they were kept)
        pa.field("received_sha256", pa.string()),
        pa.field("width", pa.int32()),
        pa.field("height", pa.int32()),
        pa.field("format", pa.string()),
        *SOURCE_FIELDS,
    ]
)

SYNTHESIS_FILTER_SCORES = pa.schema(
    [
        pa.field("brisque", pa.float32()),  # of the synthesized image; null when off or not computable
        pa.field("clip_similarity", pa.float32()),  # cosine original vs synthesized; null when off or not computable
        pa.field("brisque_backend", pa.string(), nullable=False),  # e.g. piq-0.8.0:<file>:sha256-<12 hex>, or "off"
        pa.field("clip_backend", pa.string(), nullable=False),  # the embedder's model_id, or "off"
        pa.field("verdict", pa.string(), nullable=False),  # one of VERDICTS
        pa.field("reason", pa.string()),  # why not kept: the failed bounds, or "<where>: ErrorClass: detail"
    ]
)


# The filter stage's table: the attempt, then its scores.
MIXCUBE_FILTERS = pa.schema([pa.field("attempt_id", pa.string(), nullable=False), *SYNTHESIS_FILTER_SCORES])

SYNTHESIS_ATTEMPTS = pa.schema(
    [
        # One row per (original, ethnicity, attempt); a retry is a new attempt, never an overwrite.
        pa.field("attempt_id", pa.string(), nullable=False),  # <original_id>-<ethnicity>-<attempt>
        pa.field("original_id", pa.string(), nullable=False),
        pa.field("ethnicity", pa.string(), nullable=False),  # the public dataset's label: African, EastAsian ...
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("prompt", pa.string(), nullable=False),
        pa.field("seed", pa.int64(), nullable=False),
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("scheduler", pa.string()),
        pa.field("placeholder", pa.bool_(), nullable=False),  # the offline stand-in, never a real synthesis
        pa.field("mask_sha256", pa.string(), nullable=False),
        pa.field("sha256", pa.string()),  # the synthesized image; null on failure
        pa.field("error", pa.string()),
        # first | reseed | retry_prompt | fix_mask: why this attempt exists (MixCuBe §2, App. B.1)
        pa.field("retry_kind", pa.string(), nullable=False),
        pa.field("retry_of", pa.string()),  # the attempt it replaces; null for the first
    ]
)


MIXCUBE_FACES = pa.schema(
    [
        # One row per collected original: the faces kept by App. A.4 (conf >= threshold, top 3), or why none.
        pa.field("original_id", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("error", pa.string()),  # no_face | not_an_image | detector_error
        pa.field("detail", pa.string()),
        pa.field(
            "boxes",
            pa.list_(
                pa.struct(
                    [
                        pa.field("x", pa.int32()),
                        pa.field("y", pa.int32()),
                        pa.field("w", pa.int32()),
                        pa.field("h", pa.int32()),
                        pa.field("score", pa.float32()),
                    ]
                )
            ),
        ),
        pa.field("detector", pa.string(), nullable=False),  # model id: backend, file name and content hash
    ]
)


MIXCUBE_MASKS = pa.schema(
    [
        pa.field("original_id", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("error", pa.string()),  # empty_mask | masker_error
        pa.field("detail", pa.string()),
        pa.field("mask_sha256", pa.string()),  # PNG blob, white where people are repainted
        pa.field("coverage", pa.float32()),  # share of the image the mask covers (> 0 after feathering)
        pa.field("masker", pa.string(), nullable=False),
    ]
)


MIXCUBE_LEFT_OVER = pa.schema(
    [
        # (original, ethnicity) pairs without an accepted synthesis when the rounds ended, and why.
        pa.field("original_id", pa.string(), nullable=False),
        pa.field("ethnicity", pa.string(), nullable=False),
        pa.field("attempts", pa.int32(), nullable=False),
        pa.field("last_attempt_id", pa.string()),
        pa.field("outcome", pa.string(), nullable=False),  # synthesis_error | filter:<verdict> | qa:<decision> ...
        pa.field("cap_reached", pa.bool_(), nullable=False),
    ]
)

MIXCUBE_ROWS = pa.schema(
    [
        # The released `default` config: the public columns first, in the public order (each original, then its 4
        # swaps), then ours.
        pa.field("country", pa.string(), nullable=False),
        pa.field("category", pa.string(), nullable=False),
        pa.field("ethnicity", pa.string(), nullable=False),  # original | African | Caucasian | EastAsian | SouthAsian
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("original_id", pa.string(), nullable=False),
        pa.field("attempt_id", pa.string()),  # null for the original
        pa.field("mask_sha256", pa.string()),
        pa.field("prompt", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("model_id", pa.string()),
        pa.field("brisque", pa.float32()),
        pa.field("clip_similarity", pa.float32()),
        pa.field("review_decision", pa.string()),
        pa.field("reviewer", pa.string()),
        pa.field("placeholder", pa.bool_(), nullable=False),
        pa.field("food_label", pa.string()),
        pa.field("sha256", pa.string(), nullable=False),  # blob of the image
        pa.field("num_bytes", pa.int64()),
        pa.field("synthesized", pa.bool_(), nullable=False),  # a swap; its source columns are its original's
        *SOURCE_FIELDS,
    ]
)

TAGS = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("concept_ids", pa.list_(pa.int32()), nullable=False),  # priority order, own concept included
        pa.field("tagger", pa.string(), nullable=False),
        pa.field("model_id", pa.string()),
    ]
)

CATALOG = pa.schema(
    [
        pa.field("index_in_dataset", pa.int32(), nullable=False),
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("concept_id", pa.int32(), nullable=False),
        pa.field("concept", pa.string(), nullable=False),
        pa.field("concept_in_native", pa.string(), nullable=False),
        pa.field("concept_country", pa.string(), nullable=False),
        pa.field("country", pa.string(), nullable=False),
        pa.field("language_code", pa.string(), nullable=False),
        pa.field("language_group", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("query", pa.string(), nullable=False),
        pa.field("query_lang", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("source_page", pa.string()),
        pa.field("sha256", pa.string(), nullable=False),
        pa.field("pixel_sha256", pa.string()),  # decoded-pixel hash, where the dedup computed one
        pa.field("num_bytes", pa.int64(), nullable=False),
        pa.field("width", pa.int32(), nullable=False),
        pa.field("height", pa.int32(), nullable=False),
        pa.field("format", pa.string(), nullable=False),
        # Concepts it shows, in priority order: its own, the tagger's, then those of its copies under other concepts.
        pa.field("tags", pa.list_(pa.int32()), nullable=False),
        pa.field("tagger", pa.string(), nullable=False),
    ]
)

#: The image_metadata stage's table: CATALOG (what the validator and the reassembler read), then the provenance columns
#: CATALOG lacks (docs/release-managers.md, "Image provenance"). CATALOG's `query`, `query_lang` (with
#: `language_code`: the query's language is English for `eng`, the country's for `nav`), `rank`, `url` and
#: `source_page` are the rest of an image's provenance.
IMAGE_METADATA = pa.schema(
    [
        *CATALOG,
        pa.field("engine", pa.string()),  # the searcher: ddgs:duckduckgo, ddgs:bing, local
        pa.field("region", pa.string()),  # the engine's region code; null for a local search
        pa.field("final_url", pa.string()),  # after redirects (HTTP downloader); null for a local file
        pa.field("retrieved_at", pa.string()),  # ISO 8601, UTC: the download's, or as a local manifest declares it
        pa.field("http_status", pa.int32()),
        pa.field("content_type", pa.string()),  # as the server declared it
        pa.field("license", pa.string(), nullable=False),  # as the source declares it, else `unknown`
        pa.field("license_filter", pa.string()),  # the search engine's licence filter; null when off
    ]
)

#: RQ2 answer slots, in the authors' column order: (our name, the authors' column prefix).
RQ2_SLOTS: tuple[tuple[str, str], ...] = (
    ("correct", "semantically_relevant_candidate_"),
    ("language_biased", "culturally_relevant_candidate_"),
    ("irrelevant", "non_relevant_candidate_"),
)
#: RQ3 answer slots (3XCM paper §3.2.3, categories i-vi).
RQ3_SLOTS: tuple[str, ...] = (
    "correct",
    "object_relevant_language_biased",
    "object_relevant",
    "cultural_descriptor_relevant",
    "language_biased",
    "irrelevant",
)
CANDIDATE_FIELDS = ("index", "image_id", "concept", "country")


def _candidate_fields(prefix: str) -> list[pa.Field]:
    return [
        pa.field(f"{prefix}index", pa.int32(), nullable=False),
        pa.field(f"{prefix}image_id", pa.string(), nullable=False),
        pa.field(f"{prefix}concept", pa.string(), nullable=False),
        pa.field(f"{prefix}country", pa.string(), nullable=False),
    ]


BENCHMARK = pa.schema(
    [
        pa.field("query_index", pa.int32(), nullable=False),
        pa.field("query_image_id", pa.string(), nullable=False),
        pa.field("query_concept", pa.string(), nullable=False),
        pa.field("query_country", pa.string(), nullable=False),
        *[f for _, prefix in RQ2_SLOTS for f in _candidate_fields(prefix)],
        pa.field("query_concept_id", pa.int32(), nullable=False),
        pa.field("query_language", pa.string(), nullable=False),
        pa.field("query_text", pa.string(), nullable=False),
    ]
)
#: Where a 3XCM release (and a reassembled benchmark) keeps the authors' CSV, and its columns in order.
XCM_BENCH_CSV = "benchmarks/xcm-bench.csv"
XCM_BENCH_CSV_COLUMNS: tuple[str, ...] = tuple(BENCHMARK.names[: 4 + 4 * len(RQ2_SLOTS)])

BENCHMARK_CD = pa.schema(
    [
        pa.field("query_index", pa.int32(), nullable=False),
        pa.field("query_image_id", pa.string(), nullable=False),
        pa.field("query_concept", pa.string(), nullable=False),
        pa.field("query_country", pa.string(), nullable=False),
        pa.field("descriptor_country", pa.string(), nullable=False),
        *[f for slot in RQ3_SLOTS for f in _candidate_fields(f"{slot}_candidate_")],
        pa.field("query_concept_id", pa.int32(), nullable=False),
        pa.field("query_language", pa.string(), nullable=False),
        pa.field("query_text", pa.string(), nullable=False),
    ]
)

UNASSEMBLED = pa.schema(
    [
        pa.field("task", pa.string(), nullable=False),  # rq2 | rq3
        pa.field("query_index", pa.int32(), nullable=False),
        pa.field("query_image_id", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
    ]
)

VIOLATIONS = pa.schema(
    [
        pa.field("table", pa.string(), nullable=False),
        pa.field("row", pa.int32()),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
    ]
)


# -- typed rows ---------------------------------------------------------------------------------------------------
# The rows that stages build in one module and tables are made of in another, as TypedDicts: the keys are the
# schema's columns (tests/data/test_schemas.py checks them), in its order.


class FetchedUrl(TypedDict):
    """What fetching a URL decided: an IMAGES row without `image_id` (the HTTP downloader's journal keeps these)."""

    url: str
    status: str
    error: str | None
    detail: str | None
    sha256: str | None
    num_bytes: int | None
    width: int | None
    height: int | None
    format: str | None
    final_url: str | None
    http_status: int | None
    content_type: str | None
    retrieved_at: str | None
    attempts: int
    transient: bool | None


class ImagesRow(FetchedUrl):
    """An IMAGES row (`image_id` is its first column)."""

    image_id: str


def fetched_url(
    url: str,
    status: str,
    attempts: int,
    transient: bool | None = None,
    error: str | None = None,
    detail: str | None = None,
) -> FetchedUrl:
    """A FetchedUrl with every other column None."""
    return {
        "url": url,
        "status": status,
        "error": error,
        "detail": detail,
        "sha256": None,
        "num_bytes": None,
        "width": None,
        "height": None,
        "format": None,
        "final_url": None,
        "http_status": None,
        "content_type": None,
        "retrieved_at": None,
        "attempts": attempts,
        "transient": transient,
    }


def str_cell(row: Mapping[str, object], column: str) -> str:
    """A string cell of a row read from a table, such as a fetch's hit (`image_id`, `url`); TypeError otherwise."""
    value = row[column]
    if not isinstance(value, str):
        raise TypeError(f"{column} must be a string, not {value!r}")
    return value


def images_row(image_id: str, fetched: FetchedUrl) -> ImagesRow:
    """`fetched` as the IMAGES row of `image_id`."""
    return {"image_id": image_id, **fetched}


class LlmFailureRow(TypedDict):
    """An LLM_FAILURES row (`data.clients.gemini.failure_row`)."""

    stage: str
    request_key: str
    model: str
    prompt_sha256: str
    attempts: int
    error: str
    detail: str | None
    raw_text: str | None


class TranslationRow(TypedDict):
    """A TRANSLATIONS row."""

    concept_id: int
    language_code: str
    text: str
    descriptor_template: str
    review_status: str
    source: str


class TranslationConflictRow(TypedDict):
    """A TRANSLATION_CONFLICTS row."""

    concept_id: int
    language_code: str
    shipped_text: str
    proposed_text: str
    shipped_template: str | None
    proposed_template: str | None
    source: str
    resolution: str


class FilterScoresRow(TypedDict):
    """A SYNTHESIS_FILTER_SCORES row: the automatic filters' scores of one synthesis attempt."""

    brisque: float | None
    clip_similarity: float | None
    brisque_backend: str
    clip_backend: str
    verdict: str
    reason: str | None


class MixcubeFiltersRow(FilterScoresRow):
    """A MIXCUBE_FILTERS row (`attempt_id` is its first column)."""

    attempt_id: str


class SynthesisAttemptRow(TypedDict):
    """A SYNTHESIS_ATTEMPTS row."""

    attempt_id: str
    original_id: str
    ethnicity: str
    attempt: int
    prompt: str
    seed: int
    model_id: str
    scheduler: str | None
    placeholder: bool
    mask_sha256: str
    sha256: str | None
    error: str | None
    retry_kind: str
    retry_of: str | None


def empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def blank_row(schema: pa.Schema, **values: object) -> dict[str, object]:
    """A row of `schema` with every column None except those given (a column not in the schema is an error)."""
    unknown = set(values) - set(schema.names)
    if unknown:
        raise ValueError(f"not columns of the schema: {sorted(unknown)}")
    return {name: values.get(name) for name in schema.names}


def from_rows(rows: Sequence[Mapping[str, object]], schema: pa.Schema) -> pa.Table:
    """Build a table from row dicts, refusing missing or unexpected columns."""
    names = set(schema.names)
    for row in rows:
        if set(row) != names:
            missing, extra = names - set(row), set(row) - names
            raise ValueError(f"row does not match schema: missing {sorted(missing)}, unexpected {sorted(extra)}")
    return pa.Table.from_pylist(rows, schema=schema)
