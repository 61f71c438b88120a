"""MixCuBe's Croissant facts: what `croissant.json` and the card's datasheet state of a MixCuBe release (its record
sets, the RAI texts and the composition notes), from the release's rows and the build's provenance.

Pure (`data/publish/croissant.py` turns the facts into JSON-LD): an identical rebuild states the same facts.
`mixcube_facts` composes one builder per section of the datasheet (`_collection`, `_manipulation`, ..., `_uses`,
`_record_sets`, `_composition`), each reading a `_Release`: the rows, the provenance and the counts taken once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from data.publish.croissant import (
    CSV,
    PNG,
    FileGroup,
    RecordSetSpec,
    ReleaseFacts,
    collection_timeframe,
    webdataset_groups,
)
from data.publish.manifest import Provenance
from data.publish.rai import (
    RaiTexts,
    counts,
    deviation_lines,
    maintenance_plan,
    platforms,
    reason_counts,
    review_analysis,
    source_lines,
    stage_line,
    stage_stats,
    url_only_line,
)
from data.review_labels import AUTO_ACCEPT

MIXCUBE_COLUMNS = {
    "country": "The culture, as an adjective.",
    "category": "Food, Festival or Clothes.",
    "ethnicity": "`original`, or the ethnicity the people were inpainted into.",
    "sample_id": "This image's id (`<original_id>-<ethnicity>`).",
    "original_id": "The original photo's id.",
    "attempt_id": "The accepted synthesis attempt (null for the original).",
    "mask_sha256": "The inpainting mask, `masks/<sha256>.png`.",
    "prompt": "The inpainting prompt (App. B.1, or the reviewers' retry prompt).",
    "seed": "The inpainting seed.",
    "model_id": "The inpainting model.",
    "brisque": "BRISQUE score (null when the filter was off).",
    "clip_similarity": "CLIP image-image similarity to the original (null when the filter was off).",
    "review_decision": "The synthesis QA decision.",
    "reviewer": "Who decided (`auto_accept`: no human).",
    "placeholder": "True when the offline placeholder painted the mask instead of a synthesis.",
    "food_label": "The food's name (Food images).",
    "sha256": "sha256 of the image bytes before the release's JPEG encoding.",
    "phash": "64-bit perceptual hash (imagehash pHash) of the image, 16 hex digits (URL-only releases).",
    "num_bytes": "Size of those bytes.",
    "image": "The image, JPEG bytes (an HF `Image` feature).",
    "synthesized": "True for a swap (its source columns are its original's).",
    "engine": "The search engine that returned the original.",
    "query": "The search query that returned the original.",
    "query_language": "The query's language code.",
    "region": "The search engine's region code.",
    "rank": "The original's rank among the query's results (1 is the top hit).",
    "source_page": "The page the original was found on.",
    "url": "The original's URL (a local file: its path relative to its folder).",
    "final_url": "The original's URL after redirects.",
    "retrieved_at": "When the original was retrieved (ISO 8601, UTC).",
    "http_status": "The HTTP status of the download.",
    "content_type": "The content type the server declared.",
    "license": "The original's licence as its source declares it (`unknown` when it declares none).",
    "license_filter": "The search engine's licence filter, when one was on.",
    "image_file": "`<sample_id>.jpg`.",
    "label": "The food's name.",
}


@dataclass(frozen=True)
class _Release:
    """A MixCuBe release as the card's sections read it: its rows, its provenance, and what is counted from them
    once."""

    version: str
    rows: pa.Table  # the `default` config without the image column
    provenance: Provenance
    mode: str
    stats: dict[str, dict[str, Any]]
    ethnicity: Counter[str]
    cultures: Counter[str]  # originals per culture
    categories: Counter[str]  # originals per category
    placeholders: int
    food: int  # Food images
    timeframe: str | None
    timeframe_note: str
    sources: str  # where the originals came from (`source_lines`)
    unlicensed: str  # the originals that declare no licence, if any
    qa_rounds: list[dict[str, Any]]  # the synthesis QA rounds' stage stats, in order

    @property
    def backends(self) -> dict[str, Any]:
        return self.provenance.backends

    @property
    def config(self) -> dict[str, Any]:
        return self.provenance.config

    @property
    def models(self) -> dict[str, Any]:
        return self.provenance.models

    @property
    def demo(self) -> bool:
        return self.provenance.demo

    @property
    def demo_note(self) -> str:
        return (
            "This is a demonstration build: the originals are composed from a stock portrait, not collected photos."
            if self.demo
            else ""
        )

    @property
    def demo_suffix(self) -> str:
        return f" {self.demo_note}" if self.demo else ""

    @property
    def originals(self) -> int:
        return self.ethnicity.get("original", 0)

    @property
    def swaps(self) -> int:
        return self.rows.num_rows - self.originals

    @property
    def annotators(self) -> Any:
        return self.config.get("qa", {}).get("annotators", "?")

    @property
    def round_reviewers(self) -> list[str]:
        """Who reviewed each synthesis QA round that had attempts."""
        return [
            s.get("extra", {}).get("review", {}).get("reviewer", "unknown") for s in self.qa_rounds if s.get("rows_in")
        ]

    @property
    def human(self) -> list[str]:
        """The rounds' reviewers that are people (not the auto-accept policy)."""
        return [r for r in self.round_reviewers if r != AUTO_ACCEPT]


def _release(version: str, rows: pa.Table, provenance: Provenance, mode: str) -> _Release:
    stats = stage_stats(provenance)
    ethnicities = rows["ethnicity"].to_pylist()
    originals_only = rows.filter(pa.compute.equal(rows["ethnicity"], "original"))  # a swap repeats its source
    timeframe, timeframe_note = collection_timeframe(originals_only)
    sources, unlicensed = source_lines(originals_only, "Originals")
    return _Release(
        version=version,
        rows=rows,
        provenance=provenance,
        mode=mode,
        stats=stats,
        ethnicity=Counter(ethnicities),
        cultures=Counter(c for c, e in zip(rows["country"].to_pylist(), ethnicities, strict=True) if e == "original"),
        categories=Counter(
            c for c, e in zip(rows["category"].to_pylist(), ethnicities, strict=True) if e == "original"
        ),
        placeholders=sum(bool(p) for p in rows["placeholder"].to_pylist()),
        food=rows.filter(pa.compute.equal(rows["category"], "Food")).num_rows,
        timeframe=timeframe,
        timeframe_note=timeframe_note,
        sources=sources,
        unlicensed=unlicensed,
        qa_rounds=sorted(
            (s for s in stats.values() if s["stage"].startswith("qa_")), key=lambda s: int(s["stage"][4:])
        ),
    )


def mixcube_facts(version: str, rows: pa.Table, provenance: Provenance, mode: str = "images") -> ReleaseFacts:
    """The facts of a MixCuBe release: `rows` is the `default` config without the image column. In a URL-only
    release (`mode` `urls`) only the swaps carry bytes; an original is its `url`, `sha256` and `phash`."""
    r = _release(version, rows, provenance, mode)
    return ReleaseFacts(
        name="MixCuBe (culturebench build)",
        benchmark="mixcube",
        version=version,
        description=(
            f"{r.originals} photos of food, festivals and clothing from {len(r.cultures)} cultures, each followed by "
            f"{len(r.ethnicity) - 1} copies whose people were inpainted into another ethnicity ({rows.num_rows} "
            f"images), following When Tom Eats Kimchi (MixCuBe). culturebench build "
            f"{provenance.build_id or '?'}.{r.demo_suffix}"
        ),
        motivation=(
            "MixCuBe measures whether vision-language models recognize a culture (its food, festivals and clothing) "
            "as well when the people in the picture are of another ethnicity: each original is paired with swaps "
            f"that change only the people.{r.demo_suffix}"
        ),
        keywords=("cultural bias", "inpainting", "vision-language models", "MixCuBe"),
        cite_as=(
            "Cite the paper that defines the benchmark, When Tom Eats Kimchi (MixCuBe), and this release as: "
            f"MixCuBe, culturebench build {version} (build id {provenance.build_id or '?'})."
        ),
        languages=("en",),
        record_sets=_record_sets(r),
        file_groups=(
            *webdataset_groups("sample_id"),
            FileGroup(
                "masks",
                "The inpainting masks, each named by its sha256 (`mask_sha256`)",
                "masks/*.png",
                PNG,
                as_set=True,
            ),
        ),
        composition=_composition(r),
        rai=_rai(r),
    )


def _rai(r: _Release) -> RaiTexts:
    """The datasheet's RAI texts, one builder per property."""
    return RaiTexts(
        data_collection=_collection(r),
        data_collection_type=_collection_type(r),
        data_collection_timeframe=r.timeframe or "",
        data_preprocessing_protocol=_preprocessing(r),
        data_manipulation_protocol=_manipulation(r),
        data_annotation_protocol=_annotation_protocol(r),
        data_annotation_platform=platforms(sorted(set(r.round_reviewers)) or [AUTO_ACCEPT]),
        data_annotation_analysis=_annotation_analysis(r),
        annotations_per_item=(
            "0: no human labels (auto-accept)." if not r.human else f"{r.annotators} per synthesis attempt."
        ),
        machine_annotation_tools=_tools(r),
        personal_sensitive_information=_sensitive(r),
        data_biases=_biases(r),
        data_limitations=_limitations(r),
        data_use_cases=_uses(r),
        data_release_maintenance_plan=maintenance_plan("mixcube", r.version),
    )


def _collection(r: _Release) -> str:
    """Where the originals came from, their faces, and what was released."""
    stats, models = r.stats, r.models
    return " ".join(
        s
        for s in (
            f"Originals from the `{r.backends.get('originals', '?')}` backend: "
            + stage_line(stats, "originals", "originals"),
            stage_line(stats, "faces", f"Faces (`{models.get('faces', r.backends.get('faces', '?'))}`)"),
            f"Released: {r.originals} originals from {len(r.cultures)} cultures ({counts(r.cultures)}) and "
            f"{len(r.categories)} categories ({counts(r.categories)}), each followed by its swaps: "
            f"{r.rows.num_rows} images.",
            r.sources,
            r.demo_note,
            r.timeframe_note,
        )
        if s
    )


def _collection_type(r: _Release) -> list[str]:
    originals_backend = r.backends.get("originals", "?")
    if r.demo:
        collection_type = ["Others: composed from a stock portrait (demonstration), not collected photos"]
    elif originals_backend == "search":
        collection_type = ["Web Scraping", "Web API (image search per culture and category)"]
    elif originals_backend == "local":
        collection_type = ["Manual Human Curator (a labelled folder of photos, curated by people)"]
    else:
        collection_type = [f"Others: originals backend `{originals_backend}`"]
    collection_type.append("Others: synthetic images, the people inpainted into other ethnicities")
    return collection_type


def _manipulation(r: _Release) -> str:
    """How the swaps were made: faces, masks, inpainting, filters, attempts."""
    config, models, ethnicity = r.config, r.models, r.ethnicity
    inpaint_config = config.get("inpaint", {})
    settings = ", ".join(
        f"{k} {inpaint_config[k]}" for k in ("num_inference_steps", "guidance_scale", "strength") if k in inpaint_config
    )
    filters = config.get("filters", {})
    brisque, clip = filters.get("brisque"), filters.get("clip")
    synthesis = [s for s in r.stats.values() if s["stage"].startswith("synthesis_")]
    attempts = sum(s.get("rows_in", 0) for s in synthesis)
    return " ".join(
        s
        for s in (
            f"Each original's people are inpainted into {len(ethnicity) - 1} ethnicities "
            f"({', '.join(sorted(e for e in ethnicity if e != 'original'))}).",
            f"Faces: `{models.get('faces', '?')}`; masks: `{models.get('masks', '?')}` "
            "(stored as `masks/<sha256>.png`).",
            f"Inpainting: `{r.backends.get('inpaint', '?')}`, models {', '.join(models.get('inpaint', [])) or 'none'}"
            + (f" ({settings})" if settings else "")
            + ", the App. B.1 prompt per category and ethnicity, one seed per (original, ethnicity, attempt).",
            (
                f"{r.placeholders} of {r.swaps} swaps are placeholders: the offline stand-in painted the mask instead "
                "of synthesizing."
                if r.placeholders
                else ""
            ),
            "Filters: BRISQUE "
            + (f"keeps a score <= {brisque.get('max_score')}" if brisque else "off")
            + "; CLIP similarity "
            + (f"keeps [{clip.get('min_similarity')}, {clip.get('max_similarity')}]" if clip else "off")
            + ".",
            f"{attempts} synthesis attempts in {len(synthesis)} rounds (at most "
            f"{config.get('max_attempts', '?')} attempts per pair); a rejected attempt is drawn again, nothing is "
            "overwritten.",
            "Originals are stored upright: a photo's EXIF orientation is applied once at ingest.",
        )
        if s
    )


def _preprocessing(r: _Release) -> list[str]:
    """Each stage that dropped originals or attempts, then the quintets and the release's encoding."""
    stats, left = r.stats, r.provenance.left_over_by_outcome
    return [
        stage_line(stats, "originals", "Ingest (labels, paths, decoding, minimum size)"),
        stage_line(stats, "faces", "Face detection (an original needs a face)"),
        stage_line(stats, "masks", "Masks"),
        *[
            stage_line(stats, s["stage"], "Automatic filters")
            for s in sorted(stats.values(), key=lambda s: s["stage"])
            if s["stage"].startswith("filters_") and s.get("rows_in")
        ],
        f"Quintets: each original followed by its latest accepted swap per ethnicity; "
        f"{len(r.provenance.incomplete)} originals left out for lack of an accepted swap"
        + (f"; swaps never accepted, by last outcome: {reason_counts(left)}." if left else "."),
        "Images are published as JPEG (quality 95 for those that were not JPEG); `sha256` keeps the hash of the "
        "stored bytes.",
    ]


def _annotation_protocol(r: _Release) -> list[str]:
    """The synthesis QA (MixCuBe §2) as specified and as this build ran it, and the released swaps' decisions."""
    reviewers = Counter(reviewer for reviewer in r.rows["reviewer"].to_pylist() if reviewer)
    decisions = Counter(d for d in r.rows["review_decision"].to_pylist() if d)
    return [
        "Synthesis QA (MixCuBe §2): the original (with a brush to fix the mask), the synthesized image and the mask "
        f"are shown side by side with the filter scores; {r.annotators} annotators per attempt accept it, reject it "
        "for artifacts or for a changed cultural marker, ask for a retry with a prompt, or fix the mask. A choice "
        "wins with more than half of the votes cast.",
        (
            "In this build no human reviewed the synthesized images: the auto-accept policy accepted them."
            if not r.human
            else "In this build the attempts were reviewed through "
            f"{', '.join(f'`{reviewer}`' for reviewer in sorted(set(r.human)))}."
        ),
        f"Released swaps by decision: {counts(decisions) or 'none'}; by reviewer: {counts(reviewers) or 'none'}.",
    ]


def _annotation_analysis(r: _Release) -> list[str]:
    return [
        review_analysis(s.get("extra", {}).get("review", {}), f"Synthesis QA round {s['stage'][4:]}")
        for s in r.qa_rounds
        if s.get("rows_in")
    ] or ["No attempt reached synthesis QA, so no agreement was measured."]


def _biases(r: _Release) -> list[str]:
    swap_kinds = len(r.ethnicity) - 1
    biases = [
        f"Originals per culture: {counts(r.cultures)}; per category: {counts(r.categories)}.",
        f"Swaps use {swap_kinds} coarse ethnicity labels, rendered by the inpainting model from a prompt: "
        "the model's own associations shape how each is drawn."
        if r.placeholders < r.swaps
        else f"Swaps use {swap_kinds} coarse ethnicity labels; in this build no model drew them (every swap is "
        "a placeholder).",
    ]
    short = r.provenance.cells_below_target
    if short:
        biases.append(
            f"Cells short of {short[0]['target']} originals: "
            + ", ".join(f"{c['country']} {c['category']} {c['originals']}" for c in short)
            + "."
        )
    return biases


def _limitations(r: _Release) -> list[str]:
    incomplete = r.provenance.incomplete
    limitations = [*deviation_lines(r.provenance)]
    if r.placeholders:
        limitations.append(f"{r.placeholders} images are placeholders, not syntheses (`placeholder=true`).")
    if incomplete:
        limitations.append(
            f"{len(incomplete)} originals are left out for lack of an accepted swap (manifest `incomplete`)."
        )
    limitations += [r.timeframe_note, r.unlicensed, url_only_line(r.mode, "original")]
    if r.demo:
        limitations.append(r.demo_note + " It checks the pipeline; it measures no model.")
    return [line for line in limitations if line]


def _sensitive(r: _Release) -> list[str]:
    return [
        "Ethnicity (perceived, and altered by inpainting), culture and geography: every image is labelled with a "
        "culture and an ethnicity.",
        (
            "The demo originals are composed from one stock portrait."
            if r.demo
            else "Every original shows at least one person (the face stage requires a face); faces are not blurred."
        ),
        (
            "The swaps show synthetic people who do not exist, placed in real scenes."
            if r.placeholders < r.swaps
            else "The swaps are placeholders: the masked people are painted over, no person is drawn."
        ),
    ]


def _uses(r: _Release) -> list[str]:
    uses = [
        f"Testing vision-language models for cultural and ethnic bias: {r.originals} quintets, questions about an "
        "image's culture (and its food's name) asked of the original and of its swaps (`culturebench evaluate "
        "mixcube`).",
        "Research use only (CC BY-NC-SA 4.0); ethical review is required for production use. Swapped images are "
        "synthetic and must not be presented as photos of real people.",
    ]
    if r.demo:
        uses.append("This demo build is for checking the pipeline, not for measuring models.")
    return uses


def _tools(r: _Release) -> list[str]:
    models, backends = r.models, r.backends
    return [
        f"Face detection: `{models.get('faces', '?')}`.",
        f"Masks: `{models.get('masks', '?')}`.",
        f"Inpainting: {', '.join(models.get('inpaint', [])) or 'none'}.",
        f"BRISQUE: `{backends.get('brisque', '?')}`; CLIP: `{backends.get('clip', '?')}`.",
    ]


def _record_sets(r: _Release) -> tuple[RecordSetSpec, ...]:
    labels_schema = pa.schema([pa.field("image_file", pa.string()), pa.field("label", pa.string())])
    return (
        RecordSetSpec(
            "default",
            "Each original followed by its swaps, one image per row.",
            "default/*.parquet",
            r.rows.schema,
            r.rows.num_rows,
            key=("sample_id",),
            image_column="image",
            columns=MIXCUBE_COLUMNS,
        ),
        RecordSetSpec(
            "food_label",
            "`food_label.csv`: the food images with their food's name.",
            "food_label.csv",
            labels_schema,
            r.food,
            encoding=CSV,
            key=("image_file",),
            columns=MIXCUBE_COLUMNS,
        ),
    )


def _composition(r: _Release) -> tuple[str, ...]:
    return (
        f"{r.rows.num_rows} images: {r.originals} originals and {r.swaps} swaps ({counts(r.ethnicity)}).",
        f"Cultures: {counts(r.cultures)} originals; categories: {counts(r.categories)} originals.",
        f"{r.food} Food images carry a food name (`food_label.csv`).",
    )
