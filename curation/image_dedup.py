"""Image dedup stage: exact, perceptual and embedding near-duplicates within each concept (3XCM paper §3.2.1).

Tiers, each recorded in the pair table with its own score:
  1. exact_bytes: equal sha256 of the stored bytes (score 0);
  2. exact_pixels: equal sha256 of the decoded, normalised pixels (score 0). Only pairs that can have equal pixels
     (same size, pHash within EXACT_PIXEL_WINDOW) are decoded in full, so the check costs nothing elsewhere;
  3. phash: Hamming distance of 64-bit pHashes, confirmed by dHash (score: the pHash distance). Pairs a little
     further apart (crops, small rotations, and also different photos with the same layout) are
  3b. aligned: checked by the ECC correlation of 64x64 thumbnails after an affine alignment (curation/image_align.py;
     score: the correlation; a pair that already correlates at the merge level unaligned is not fitted, and its
     score is that unaligned correlation, a lower bound of the aligned one);
  4. embedding: cosine similarity of open_clip image embeddings, when configured (score: the cosine).
A pHash or aligned merge must also keep its colours: when the chroma of the two images, aligned, correlates below
`chroma_merge_min`, the pair is another photo shot the same way, and goes to review instead (a pair whose colours
correlate at `chroma_unaligned_min` as they stand needs no alignment for this). A pair at or past a
tier's merge threshold is merged automatically; a pair in the band between the merge and the
review threshold goes to the review queue (Label Studio, App. J) and is kept apart until a person decides; pairs
beyond the review threshold are not recorded. Where tiers disagree, the strongest decision wins (merge > review).
The default thresholds come from the labelled corpus of perf/dedup_vs_imagededup (docs/operators.md, "Choosing
the dedup thresholds").

Merged images are grouped with union-find. Each cluster keeps one image by this rule, in order:
  1. the highest resolution (width x height);
  2. the best search rank (lowest);
  3. the English query before the native one;
  4. the smallest image id (a stable tie-break).
Every dropped image records the kept image it duplicates, the tier of its direct link to that image (or, for an
image tied to it only through other members, its own strongest link, with the reason suffixed `_chain`), and the
score. The work is columnar (numpy and Arrow), so a million images fit in memory and time (perf/).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from curation.embedding_pairs import group_slices, similar_pairs
from curation.image_align import AlignedScorer
from curation.image_embeddings import OpenClipEmbeddingConfig
from curation.image_hashing import hamming_within
from curation.pair_batches import component_of_pairs, pair_batches
from data.process_pool import Failed, run_in_processes
from data.schemas import DEDUP_PAIRS, IMAGE_DEDUP, REVIEW_QUEUE
from data.unionfind import UnionFind

EXACT_BYTES = "exact_bytes"
EXACT_PIXELS = "exact_pixels"
PHASH = "phash"
ALIGNED = "aligned"
EMBEDDING = "embedding"
TIERS = (EXACT_BYTES, EXACT_PIXELS, PHASH, ALIGNED, EMBEDDING)  # strongest evidence first
MERGE, REVIEW = "merge", "review"
#: Identical pixels give identical thumbnails up to the decoder's rounding (a JPEG's DCT-scaled draft against a box
#: reduction of the same pixels re-saved as PNG), so their pHashes differ by a few bits at most.
EXACT_PIXEL_WINDOW = 6
#: ...and their 64x64 thumbnails differ by at most this mean absolute grey level (measured max 1.54 on the corpus).
EXACT_PIXEL_THUMBNAIL_MAD = 2.5


class PerceptualTierConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    merge_max_distance: int = Field(
        default=6,
        ge=0,
        le=64,
        description="pHash Hamming distance (of 64 bits) at or below which pairs merge without further checks.",
    )
    dhash_max_distance: int = Field(
        default=20, ge=0, le=64, description="dHash distance every pHash link must also meet."
    )
    verify_max_distance: int = Field(
        default=20,
        ge=0,
        le=64,
        description="pHash distance at or below which a pair that did not merge outright is checked by alignment.",
    )
    # The tuned corpus: its lowest true pair correlates at 0.71 unaligned; different photos reach 0.6-0.65 often.
    align_prefilter_min: float = Field(
        default=0.65,
        ge=-1,
        le=1,
        description="Plain (unaligned) thumbnail correlation below which a checked pair is rejected without a fit.",
    )
    align_merge_min: float = Field(
        default=0.92, gt=0, le=1, description="Aligned correlation at or above which a checked pair merges."
    )
    align_review_min: float = Field(
        default=0.85, gt=0, le=1, description="Aligned correlation at or above which a checked pair goes to review."
    )
    # The tuned corpus of perf/dedup_vs_imagededup: aligned, copies correlate in colour at 0.95 or more and
    # look-alike siblings at 0.62 or less; as they stand (crops and rotations not undone), copies go down to 0.78
    # and siblings up to 0.75.
    chroma_merge_min: float = Field(
        default=0.8,
        ge=-1,
        le=1,
        description="Chroma correlation, aligned, below which a pHash or aligned merge goes to review instead.",
    )
    chroma_unaligned_min: float = Field(
        default=0.9,
        ge=-1,
        le=1,
        description="Chroma correlation as the images stand at or above which a merge needs no alignment to check.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> PerceptualTierConfig:
        if self.verify_max_distance < self.merge_max_distance:
            raise ValueError("verify_max_distance must be >= merge_max_distance")
        if self.align_review_min > self.align_merge_min:
            raise ValueError("align_review_min must be <= align_merge_min")
        if self.chroma_unaligned_min < self.chroma_merge_min:
            raise ValueError("chroma_unaligned_min must be >= chroma_merge_min")
        return self


class EmbeddingTierConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    embedder: OpenClipEmbeddingConfig = Field(default_factory=OpenClipEmbeddingConfig)
    merge_min_cosine: float = Field(default=0.96, gt=0, le=1, description="Cosine at or above which pairs merge.")
    review_min_cosine: float = Field(
        default=0.90, gt=0, le=1, description="Cosine at or above which an unmerged pair goes to review."
    )
    block: int = Field(default=2048, ge=1, description="Rows per similarity block; memory is O(block x group).")
    shard_size: int = Field(default=256, ge=1, description="Images per resumable embedding part.")

    @model_validator(mode="after")
    def _ordered(self) -> EmbeddingTierConfig:
        if self.review_min_cosine > self.merge_min_cosine:
            raise ValueError("review_min_cosine must be <= merge_min_cosine")
        return self


class ImageDedupConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    perceptual: PerceptualTierConfig = Field(default_factory=PerceptualTierConfig)
    embedding: EmbeddingTierConfig | None = Field(
        default=None, description="The open_clip tier; off by default (it needs model weights)."
    )
    scope: Literal["concept", "global"] = Field(
        default="concept", description="Compare images within each concept (paper §3.2.1) or across all of them."
    )
    shard_size: int = Field(default=256, ge=1, description="Images per resumable hashing part.")
    workers: int = Field(default=2, ge=1, description="Decoder threads for hashing.")

    def tiers_label(self) -> str:
        """The tiers this config runs, for summaries: e.g. `exact+phash+open_clip:ViT-B-32`."""
        label = "exact+phash"
        return label if self.embedding is None else f"{label}+open_clip:{self.embedding.embedder.model_name}"


@dataclass
class DedupInputs:
    """Column arrays for one dedup run, aligned by row. Hash columns are None when the tier does not run."""

    image_ids: list[str]
    concept_ids: npt.NDArray[np.int32]
    width: npt.NDArray[np.int32]
    height: npt.NDArray[np.int32]
    rank: npt.NDArray[np.int32]
    english: npt.NDArray[np.bool_]  # bool: found by the English query
    sha256: list[str] | None = None
    phash: npt.NDArray[np.uint64] | None = None
    dhash: npt.NDArray[np.uint64] | None = None
    hashed: npt.NDArray[np.bool_] | None = None  # bool: the perceptual hashes exist (the image decoded)
    embeddings: npt.NDArray[np.floating] | None = None  # unit rows, float16/32; zero rows never pair
    pixel_hash: Callable[[int], str] | None = None  # full-decode pixel sha256 of row i, called only when needed
    # Row i's 64x64 grey thumbnail, and its (2, 32, 32) Cb/Cr thumbnail: each fetched only when needed.
    align_thumbnail: Callable[[int], npt.NDArray[np.uint8]] | None = None
    chroma_thumbnail: Callable[[int], npt.NDArray[np.int8]] | None = None
    forget_thumbnails: Callable[[], None] | None = None  # drop cached thumbnails (after each batch of pairs)
    # Called once with every row whose thumbnails the pairs will read, before any is read: a store of them can
    # gather them in one sweep (curation/dedup_stage.py's StoredThumbnails).
    prepare_thumbnails: Callable[[npt.NDArray[np.int64]], None] | None = None
    draft_decoded: npt.NDArray[np.bool_] | None = None  # bool: the thumbnails came from a JPEG draft decode
    workers: int = 1
    # Worker processes for the candidate pairs' batches (data/process_pool.py); 1: in this process. Each worker gets
    # these inputs by value, so the callables above must pickle (curation/dedup_stage.py's StoredThumbnails does).
    processes: int = 1

    def __len__(self) -> int:
        return len(self.image_ids)


@dataclass
class PairEvidence:
    """Pairs (i < j) found by the tiers, one entry per tier that found the pair."""

    i: list[npt.NDArray[np.int64]] = field(default_factory=list)
    j: list[npt.NDArray[np.int64]] = field(default_factory=list)
    tier: list[npt.NDArray[np.int8]] = field(default_factory=list)  # index into TIERS
    score: list[npt.NDArray[np.float32]] = field(default_factory=list)
    merge: list[npt.NDArray[np.bool_]] = field(default_factory=list)  # bool: merge (else review)

    def add(
        self,
        i: npt.NDArray[np.integer],
        j: npt.NDArray[np.integer],
        tier: str,
        score: npt.ArrayLike,
        merge: npt.ArrayLike,
    ) -> None:
        lo, hi = np.minimum(i, j).astype(np.int64), np.maximum(i, j).astype(np.int64)
        self.i.append(lo)
        self.j.append(hi)
        self.tier.append(np.full(len(lo), TIERS.index(tier), dtype=np.int8))
        self.score.append(np.asarray(score, dtype=np.float32))
        self.merge.append(np.asarray(merge, dtype=bool))

    def extend(self, other: PairEvidence) -> None:
        columns: tuple[list[npt.NDArray[Any]], ...] = (self.i, self.j, self.tier, self.score, self.merge)
        others: tuple[list[npt.NDArray[Any]], ...] = (other.i, other.j, other.tier, other.score, other.merge)
        for mine, theirs in zip(columns, others, strict=True):
            mine.extend(theirs)

    def ordered(self) -> PairEvidence:
        """The same entries ordered by (tier, i, j), stable."""
        i, j, tier, score, merge = self.arrays()
        order = np.lexsort((j, i, tier))
        return PairEvidence([i[order]], [j[order]], [tier[order]], [score[order]], [merge[order]])

    def arrays(
        self,
    ) -> tuple[
        npt.NDArray[np.int64],
        npt.NDArray[np.int64],
        npt.NDArray[np.int8],
        npt.NDArray[np.float32],
        npt.NDArray[np.bool_],
    ]:
        if not self.i:
            e = np.empty(0, dtype=np.int64)
            return e, e.copy(), np.empty(0, np.int8), np.empty(0, np.float32), np.empty(0, bool)
        return (
            np.concatenate(self.i),
            np.concatenate(self.j),
            np.concatenate(self.tier),
            np.concatenate(self.score),
            np.concatenate(self.merge),
        )


@dataclass(frozen=True)
class DedupResult:
    decisions: pa.Table  # IMAGE_DEDUP, one row per image
    pairs: pa.Table  # DEDUP_PAIRS, one row per (pair, tier) found
    review_queue: pa.Table  # REVIEW_QUEUE, ambiguous pairs of different clusters


def scope_keys(inputs: DedupInputs, scope: str) -> npt.NDArray[np.int64]:
    return inputs.concept_ids.astype(np.int64) if scope == "concept" else np.zeros(len(inputs), dtype=np.int64)


def exact_byte_pairs(
    sha256: list[str], scopes: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each image with bytes seen earlier in its scope, paired with that first image (a star per group)."""
    first: dict[tuple[int, str], int] = {}
    i, j = [], []
    for index, (scope, sha) in enumerate(zip(scopes.tolist(), sha256, strict=True)):
        head = first.setdefault((scope, sha), index)
        if head != index:
            i.append(head)
            j.append(index)
    return np.array(i, dtype=np.int64), np.array(j, dtype=np.int64)


def hamming_pairs(
    hashes: npt.NDArray[np.uint64],
    scopes: npt.NDArray[np.int64],
    valid: npt.NDArray[np.bool_],
    max_distance: int,
    block: int = 2048,
) -> tuple[npt.NDArray[np.integer], npt.NDArray[np.integer], npt.NDArray[np.int16]]:
    """Pairs within each scope with Hamming distance <= max_distance, in bulk over blocks."""
    order, slices = group_slices(scopes)
    found: list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.int16]]] = []
    for start, stop in slices:
        members = order[start:stop]
        members = members[valid[members]]
        if len(members) < 2:
            continue
        li, lj, d = hamming_within(hashes[members], max_distance, block)
        found.append((members[li], members[lj], d))
    if not found:
        e = np.empty(0, dtype=np.int64)
        return e, e.copy(), np.empty(0, np.int16)
    rows_i, rows_j, distances = (np.concatenate(parts) for parts in zip(*found, strict=True))
    return rows_i, rows_j, distances


def collect_pairs(inputs: DedupInputs, config: ImageDedupConfig) -> PairEvidence:
    scopes = scope_keys(inputs, config.scope)
    evidence = PairEvidence()
    if inputs.sha256 is not None:
        i, j = exact_byte_pairs(inputs.sha256, scopes)
        evidence.add(i, j, EXACT_BYTES, np.zeros(len(i)), np.ones(len(i), bool))
    if inputs.phash is not None and inputs.dhash is not None:
        _perceptual_pairs(inputs, config.perceptual, scopes, evidence)
    if inputs.embeddings is not None and config.embedding is not None:
        tier_e = config.embedding
        i, j, s = similar_pairs(inputs.embeddings, scopes, tier_e.review_min_cosine, block=tier_e.block)
        evidence.add(i, j, EMBEDDING, s, s >= tier_e.merge_min_cosine)
    return evidence


def _perceptual_pairs(
    inputs: DedupInputs, tier: PerceptualTierConfig, scopes: npt.NDArray[np.int64], evidence: PairEvidence
) -> None:
    """The pHash candidates, scored batch by batch (curation/pair_batches.py): the thumbnails of one batch are
    held at a time, and the evidence is ordered by (tier, i, j) whatever the batches."""
    assert inputs.phash is not None and inputs.dhash is not None  # collect_pairs runs this tier only with both
    valid = inputs.hashed if inputs.hashed is not None else np.ones(len(inputs), bool)
    i, j, d = hamming_pairs(inputs.phash, scopes, valid, max(tier.verify_max_distance, EXACT_PIXEL_WINDOW))
    if inputs.sha256 is not None:  # equal bytes are already the strongest link
        distinct = np.array([inputs.sha256[a] != inputs.sha256[b] for a, b in zip(i, j, strict=True)], bool)
        i, j, d = i[distinct], j[distinct], d[distinct]
    prepare_thumbnails(inputs, i, j)
    batches = pair_batches(i, j)
    score = functools.partial(_scored_batch, _batch_inputs(inputs), tier, i, j, d)
    found = PairEvidence()
    if inputs.processes > 1 and len(batches) > 1:  # each batch's answer is its own: any order, any process
        for _, outcome in run_in_processes(score, batches, inputs.processes, lambda b: f"a batch of {len(b)} pairs"):
            if isinstance(outcome, Failed):
                raise outcome.error
            found.extend(outcome)
    else:
        for batch in batches:
            found.extend(score(batch))
    evidence.extend(found.ordered())


def _batch_inputs(inputs: DedupInputs) -> DedupInputs:
    """What scoring a batch reads: without the columns it does not (a worker process gets a copy of these)."""
    return dataclasses.replace(inputs, image_ids=[], sha256=None, phash=None, embeddings=None)


def _scored_batch(
    inputs: DedupInputs,
    tier: PerceptualTierConfig,
    i: npt.NDArray[np.integer],
    j: npt.NDArray[np.integer],
    d: npt.NDArray[np.int16],
    batch: npt.NDArray[np.intp],
) -> PairEvidence:
    """One batch of candidate pairs scored, its thumbnails dropped after (curation/pair_batches.py)."""
    evidence = PairEvidence()
    scorer = None
    if inputs.align_thumbnail is not None:
        scorer = AlignedScorer(inputs.align_thumbnail, inputs.workers, inputs.chroma_thumbnail)
    try:
        _perceptual_batch(inputs, tier, scorer, i[batch], j[batch], d[batch], evidence)
    finally:
        forget_thumbnails(inputs, scorer)
        if scorer is not None:
            scorer.close()
    return evidence


def prepare_thumbnails(inputs: DedupInputs, i: npt.NDArray[np.integer], j: npt.NDArray[np.integer]) -> None:
    """Tell the thumbnails' store which rows the pairs (i, j) will read."""
    if inputs.prepare_thumbnails is not None and len(i):
        inputs.prepare_thumbnails(np.unique(np.concatenate([i, j])).astype(np.int64))


def forget_thumbnails(inputs: DedupInputs, scorer: AlignedScorer | None = None) -> None:
    """Drop the thumbnails a batch of pairs held (the inputs' cache and the scorer's prepared images)."""
    if scorer is not None:
        scorer.forget()
    if inputs.forget_thumbnails is not None:
        inputs.forget_thumbnails()


def _perceptual_batch(
    inputs: DedupInputs,
    tier: PerceptualTierConfig,
    scorer: AlignedScorer | None,
    i: npt.NDArray[np.integer],
    j: npt.NDArray[np.integer],
    d: npt.NDArray[np.int16],
    evidence: PairEvidence,
) -> None:
    assert inputs.dhash is not None
    exact, _ = equal_pixels(inputs, i, j, d)
    evidence.add(i[exact], j[exact], EXACT_PIXELS, np.zeros(int(exact.sum())), np.ones(int(exact.sum()), bool))
    i, j, d = i[~exact], j[~exact], d[~exact]
    dh = np.bitwise_count(inputs.dhash[i] ^ inputs.dhash[j])
    agree = dh <= tier.dhash_max_distance
    direct = agree & (d <= tier.merge_max_distance)
    check = agree & ~direct & (d <= tier.verify_max_distance)
    if scorer is None:  # nothing to check with: the band is for people
        evidence.add(i[direct], j[direct], PHASH, d[direct], np.ones(int(direct.sum()), bool))
        evidence.add(i[check], j[check], PHASH, d[check], np.zeros(int(check.sum()), bool))
        return
    # A pHash merge whose colours disagree as the images stand is checked like a band pair (a crop of
    # another photo shot the same way can sit within a few bits); it stays a review pair unless that merges.
    di, dj, dd = i[direct], j[direct], d[direct]
    colour = scorer.colour_agrees(di, dj, tier.chroma_unaligned_min)
    evidence.add(di[colour], dj[colour], PHASH, dd[colour], np.ones(int(colour.sum()), bool))
    evidence.add(di[~colour], dj[~colour], PHASH, dd[~colour], np.zeros(int((~colour).sum()), bool))
    ci = np.concatenate([di[~colour], i[check]])
    cj = np.concatenate([dj[~colour], j[check]])
    _aligned_pairs(tier, scorer, ci, cj, evidence)


#: Band pairs are fitted in rounds: each connected component's pairs, most alike first, are taken this many per
#: round, and a pair whose images a merge already joined is not fitted at all (it would change no cluster), which
#: skips most pairs between copies of one original. A round holds every component's next few pairs, so the fits
#: run in parallel while each component's answer depends on its own pairs alone.
ALIGN_CHUNK = 2


def _aligned_pairs(
    tier: PerceptualTierConfig,
    scorer: AlignedScorer,
    i: npt.NDArray[np.integer],
    j: npt.NDArray[np.integer],
    evidence: PairEvidence,
) -> None:
    """Fit the band pairs (i, j) in rounds; `evidence` holds this batch's pairs so far (its merges count)."""
    merged_i, merged_j, _, _, merged = evidence.arrays()
    n, m = len(i), int(merged.sum())
    rows, local = np.unique(np.concatenate([i, j, merged_i[merged], merged_j[merged]]), return_inverse=True)
    li, lj, mi, mj = local[:n], local[n : 2 * n], local[2 * n : 2 * n + m], local[2 * n + m :]
    linked = UnionFind(len(rows))
    for a, b in zip(mi.tolist(), mj.tolist(), strict=True):
        linked.union(a, b)
    plain = scorer.plain_correlation(i, j)
    hopeful = plain >= tier.align_prefilter_min  # far below any copy's: no fit needed
    order = np.flatnonzero(hopeful)[np.argsort(-plain[hopeful], kind="stable")]
    # Only merges link pairs: the hopeful pairs and the merges so far decide which pairs can affect each other.
    component = component_of_pairs(np.concatenate([li[order], mi]), np.concatenate([lj[order], mj]))[: len(order)]
    place = np.zeros(len(order), dtype=np.int64)  # each pair's place in its component's order
    seen: dict[int, int] = {}
    for k, label in enumerate(component.tolist()):
        place[k] = seen.get(label, 0)
        seen[label] = place[k] + 1
    rounds = place // ALIGN_CHUNK
    by_round = np.argsort(rounds, kind="stable")  # once: each round keeps the most-alike-first order
    cuts = np.flatnonzero(np.diff(rounds[by_round])) + 1
    for members in np.split(order[by_round], cuts) if len(order) else []:
        chunk = np.array([k for k in members.tolist() if linked.find(li[k]) != linked.find(lj[k])], int)
        if len(chunk) == 0:
            continue
        scores, merge = _score_chunk(scorer, tier, i[chunk], j[chunk], plain[chunk])
        for a, b in zip(li[chunk][merge].tolist(), lj[chunk][merge].tolist(), strict=True):
            linked.union(a, b)
        keep = scores >= tier.align_review_min
        evidence.add(i[chunk][keep], j[chunk][keep], ALIGNED, scores[keep], merge[keep])


def _score_chunk(
    scorer: AlignedScorer,
    tier: PerceptualTierConfig,
    i: npt.NDArray[np.integer],
    j: npt.NDArray[np.integer],
    plain: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """(score, merge) per pair. Pairs already at the merge level unaligned keep that score unless their colours
    disagree as they stand; those, and all the others, are fitted, and a merge needs the aligned colours to agree."""
    scores = plain.astype(np.float32)
    unaligned = plain >= tier.align_merge_min
    if unaligned.any():
        unaligned[unaligned] = scorer.colour_agrees(i[unaligned], j[unaligned], tier.chroma_unaligned_min)
    fit = np.flatnonzero(~unaligned)
    merge = unaligned.copy()
    if len(fit):
        fitted, warps = scorer.fit(i[fit], j[fit])
        scores[fit] = fitted
        candidates = np.flatnonzero(fitted >= tier.align_merge_min)
        if len(candidates):
            agree = scorer.colour_agrees(
                i[fit[candidates]], j[fit[candidates]], tier.chroma_merge_min, [warps[k] for k in candidates]
            )
            merge[fit[candidates[agree]]] = True
    return scores, merge


def equal_pixels(
    inputs: DedupInputs, i: npt.NDArray[np.integer], j: npt.NDArray[np.integer], d: npt.NDArray[np.int16]
) -> tuple[npt.NDArray[np.bool_], dict[int, str]]:
    """Which candidate pairs have identical decoded pixels, and the pixel hashes that took (row -> sha256). Only
    pairs that can be equal are decoded in full: same size, pHash within the window, and (when thumbnails are at
    hand) equal thumbnails for two images decoded the same way, or thumbnails within the draft-versus-box rounding
    for a JPEG against another format."""
    out = np.zeros(len(i), dtype=bool)
    if inputs.pixel_hash is None:
        return out, {}
    same_size = (inputs.width[i] == inputs.width[j]) & (inputs.height[i] == inputs.height[j])
    candidates = np.flatnonzero(same_size & (d <= EXACT_PIXEL_WINDOW))
    align, draft = inputs.align_thumbnail, inputs.draft_decoded
    if align is not None and draft is not None:
        candidates = np.array(
            [k for k in candidates.tolist() if _thumbnails_allow_equal(align, draft, i[k], j[k])], int
        )
    rows = sorted(set(i[candidates].tolist()) | set(j[candidates].tolist()))
    with ThreadPoolExecutor(max_workers=max(1, inputs.workers)) as pool:  # full decodes release the GIL
        digests = dict(zip(rows, pool.map(inputs.pixel_hash, rows), strict=True))
    for k in candidates.tolist():
        out[k] = digests[int(i[k])] == digests[int(j[k])]
    return out, digests


def _thumbnails_allow_equal(
    align: Callable[[int], npt.NDArray[np.uint8]], draft: npt.NDArray[np.bool_], a: int, b: int
) -> bool:
    """`align`, `draft`: the inputs' `align_thumbnail` and `draft_decoded`."""
    ta = align(a).astype(np.int16)
    tb = align(b).astype(np.int16)
    if draft[a] == draft[b]:
        return bool(np.array_equal(ta, tb))  # the same decode path is deterministic
    return float(np.abs(ta - tb).mean()) <= EXACT_PIXEL_THUMBNAIL_MAD


def cluster_labels(n: int, i: npt.NDArray[np.int64], j: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Union-find over the merge pairs; each row's label is its cluster root."""
    groups = UnionFind(n)
    for a, b in zip(i.tolist(), j.tolist(), strict=True):
        groups.union(a, b)
    return np.array([groups.find(k) for k in range(n)], dtype=np.int64)


def kept_rows(inputs: DedupInputs, labels: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """For every row, the row its cluster keeps (module docstring's rule)."""
    area = inputs.width.astype(np.int64) * inputs.height.astype(np.int64)
    ids = np.array(inputs.image_ids, dtype=object)
    id_rank = np.empty(len(ids), dtype=np.int64)
    id_rank[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    order = np.lexsort((id_rank, ~inputs.english.astype(bool), inputs.rank, -area, labels))
    first = np.ones(len(order), dtype=bool)
    first[1:] = labels[order][1:] != labels[order][:-1]
    keeper_of_label = dict(zip(labels[order][first].tolist(), order[first].tolist(), strict=True))
    return np.array([keeper_of_label[label] for label in labels.tolist()], dtype=np.int64)


def _links_to_kept(
    kept: npt.NDArray[np.int64],
    i: npt.NDArray[np.int64],
    j: npt.NDArray[np.int64],
    tier: npt.NDArray[np.int8],
    score: npt.NDArray[np.float32],
) -> dict[int, tuple[int, float, bool]]:
    """Per dropped row: (tier, score, direct) of its best merge link, preferring a direct link to the kept row."""
    x = np.concatenate([i, j])
    y = np.concatenate([j, i])
    t = np.concatenate([tier, tier])
    s = np.concatenate([score, score])
    direct = y == kept[x]
    order = np.lexsort((t, ~direct, x))  # per x: direct links first, then the strongest tier
    best: dict[int, tuple[int, float, bool]] = {}
    for k in order.tolist():
        best.setdefault(int(x[k]), (int(t[k]), float(s[k]), bool(direct[k])))
    return best


@dataclass(frozen=True)
class DedupColumns:
    """`decide`'s answer before any table is built (numpy only, so that a caller that needs no Arrow table, such
    as curation/file_dedup.py, never pays for pyarrow's first-use import of pandas). Pairs i < j, one entry per
    (pair, tier) found."""

    i: npt.NDArray[np.int64]
    j: npt.NDArray[np.int64]
    tier: npt.NDArray[np.int8]  # int8, index into TIERS
    score: npt.NDArray[np.float32]
    merge: npt.NDArray[np.bool_]
    labels: npt.NDArray[np.int64]  # int64: each row's cluster root
    kept: npt.NDArray[np.int64]  # int64: the row each row's cluster keeps
    sizes: npt.NDArray[np.integer]  # int64: each row's cluster size

    def queued(self) -> dict[tuple[int, int], dict[str, float]]:
        """The review queue's pairs (rows a < b whose images ended in different clusters), each with every tier's
        score; in no particular order."""
        return queued_pairs(self.labels, self.i, self.j, self.tier, self.score, self.merge)


def decide_columns(inputs: DedupInputs, config: ImageDedupConfig) -> DedupColumns:
    n = len(inputs)
    pi, pj, ptier, pscore, pmerge = collect_pairs(inputs, config).arrays()
    labels = cluster_labels(n, pi[pmerge], pj[pmerge])
    kept = kept_rows(inputs, labels) if n else np.empty(0, dtype=np.int64)
    sizes = np.bincount(labels, minlength=n)[labels] if n else np.empty(0, dtype=np.int64)
    return DedupColumns(pi, pj, ptier, pscore, pmerge, labels, kept, sizes)


def decide(inputs: DedupInputs, config: ImageDedupConfig) -> DedupResult:
    return dedup_tables(inputs, decide_columns(inputs, config))


def dedup_tables(inputs: DedupInputs, found: DedupColumns) -> DedupResult:
    """The decision, pair and review-queue tables of `decide_columns`' answer."""
    n = len(inputs)
    pi, pj, ptier, pscore, pmerge = found.i, found.j, found.tier, found.score, found.merge
    labels, kept, sizes = found.labels, found.kept, found.sizes
    best = _links_to_kept(kept, pi[pmerge], pj[pmerge], ptier[pmerge], pscore[pmerge])

    ids = inputs.image_ids
    method: list[str | None] = [None] * n
    score: list[float | None] = [None] * n
    reason: list[str | None] = [None] * n
    for row, (t, s, direct) in best.items():
        if kept[row] != row:
            method[row], score[row] = TIERS[t], s
            reason[row] = f"near_duplicate:{TIERS[t]}" + ("" if direct else "_chain")
    is_kept = kept == np.arange(n)
    decisions = pa.table(
        {
            "image_id": pa.array(ids, pa.string()),
            "concept_id": pa.array(inputs.concept_ids, pa.int32()),
            "cluster_id": pa.array([ids[k] for k in kept.tolist()], pa.string()),
            "cluster_size": pa.array(sizes, pa.int32()),
            "keep": pa.array(is_kept, pa.bool_()),
            "duplicate_of": pa.array([None if k == r else ids[k] for r, k in enumerate(kept.tolist())], pa.string()),
            "method": pa.array(method, pa.string()),
            "score": pa.array(score, pa.float32()),
            "reason": pa.array(reason, pa.string()),
        },
        schema=IMAGE_DEDUP,
    )
    id_array = np.array(ids, dtype=object)
    pairs = pa.table(
        {
            "image_a": pa.array(id_array[pi], pa.string()),
            "image_b": pa.array(id_array[pj], pa.string()),
            "concept_id": pa.array(inputs.concept_ids[pi], pa.int32()),
            "tier": pa.array(np.array(TIERS, dtype=object)[ptier], pa.string()),
            "score": pa.array(pscore, pa.float32()),
            "decision": pa.array(np.where(pmerge, MERGE, REVIEW).astype(object), pa.string()),
        },
        schema=DEDUP_PAIRS,
    )
    return DedupResult(decisions, pairs, review_queue(inputs, labels, kept, pi, pj, ptier, pscore, pmerge))


def _phash_distance(inputs: DedupInputs, a: int, b: int) -> float | None:
    if inputs.phash is None or (inputs.hashed is not None and not (inputs.hashed[a] and inputs.hashed[b])):
        return None
    return float(int(inputs.phash[a] ^ inputs.phash[b]).bit_count())


def queued_pairs(
    labels: npt.NDArray[np.int64],
    i: npt.NDArray[np.int64],
    j: npt.NDArray[np.int64],
    tier: npt.NDArray[np.int8],
    score: npt.NDArray[np.float32],
    merge: npt.NDArray[np.bool_],
) -> dict[tuple[int, int], dict[str, float]]:
    """Review pairs (not merged) whose rows ended in different clusters, each with every tier's score."""
    candidate = ~merge & (labels[i] != labels[j])
    queued: dict[tuple[int, int], dict[str, float]] = {}
    for a, b, t, s in zip(i[candidate].tolist(), j[candidate].tolist(), tier[candidate], score[candidate], strict=True):
        queued.setdefault((a, b), {})[TIERS[int(t)]] = float(s)
    return queued


def review_queue(
    inputs: DedupInputs,
    labels: npt.NDArray[np.int64],
    kept: npt.NDArray[np.int64],
    i: npt.NDArray[np.int64],
    j: npt.NDArray[np.int64],
    tier: npt.NDArray[np.int8],
    score: npt.NDArray[np.float32],
    merge: npt.NDArray[np.bool_],
) -> pa.Table:
    """Ambiguous pairs whose images ended in different clusters: one row per pair, with every tier's score."""
    queued = queued_pairs(labels, i, j, tier, score, merge)
    ids = inputs.image_ids
    rows = [
        {
            "image_a": ids[a],
            "image_b": ids[b],
            "concept_id": int(inputs.concept_ids[a]),
            "cluster_a": ids[int(kept[a])],
            "cluster_b": ids[int(kept[b])],
            "phash_distance": _phash_distance(inputs, a, b),
            "aligned_correlation": scores.get(ALIGNED),
            "embedding_cosine": scores.get(EMBEDDING),
        }
        for (a, b), scores in sorted(queued.items(), key=lambda item: (ids[item[0][0]], ids[item[0][1]]))
    ]
    return pa.Table.from_pylist(rows, schema=REVIEW_QUEUE)
