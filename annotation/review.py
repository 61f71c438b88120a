"""Review stage of 3XCM: people settle the ambiguous near-duplicate pairs (3XCM paper §3.2.1, App. J).

Backends:
- `label_studio`: a Label Studio server. Tasks go to a project of this build; the build waits until every task
  has its annotators (3 by default, §3.2.1), then decides each pair by majority.
- `label_studio_files` (embedded default): Label-Studio-importable files in the workspace, and a completed Label
  Studio JSON export as the input once annotators are done. Until one is given, the auto-accept policy applies
  (recorded as such), or the build waits (`when_unreviewed: wait`).
- `auto_accept`: every automatic decision stands and ambiguous pairs stay apart. Each row says so
  (`reviewer=auto_accept`), so a release built this way can never pass for a human-reviewed one.

How votes change the automatic decisions: an undecided pair keeps the better representative (the larger
resolution, then the smaller image id) and holds the other back (`review_undecided`), so the release uses only what
was decided. Pairs decided "same scene" join their clusters into one scene, which keeps its best representative
that is not held back; "different" keeps both. A scene therefore keeps exactly one image unless every one of its
images is held back; those scenes are counted (`scenes_fully_held_back`), since the release has no image of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa

from annotation.backends import (
    AutoAcceptReviewConfig,
    ReviewConfig,
    publisher,
    review_target,
    unreviewed_auto_accept,
)
from annotation.collect import ReviewRound, run_round
from annotation.label_configs import SAME_SCENE, SPECS
from annotation.tasks import EXTENSIONS, duplicate_item_key, duplicate_review_tasks
from data import schemas
from data.review import ReviewContext
from data.review_labels import AUTO_ACCEPT
from data.schemas import REVIEW, from_rows
from data.unionfind import UnionFind

AUTO_ACCEPT_POLICY = (
    "accept every automatic dedup decision unchanged and keep ambiguous pairs apart; "
    "no human has looked at these images"
)
MAJORITY_POLICY = (
    "more than half of the votes cast, {n} annotators per ambiguous pair (App. J guideline); "
    "undecided pairs hold one image back"
)


@dataclass(frozen=True)
class ReviewImage:
    sha256: str
    extension: str
    area: int  # width x height, for the keep rule of merged pairs


@dataclass
class ReviewOutput:
    table: pa.Table  # REVIEW: one row per image
    round: ReviewRound | None  # None under auto-accept
    # Scenes (images joined by "same scene" verdicts; an image in none is a scene of its own) of which every
    # automatically kept image is held back by an undecided pair: the release has no image of them. 0 under
    # auto-accept.
    scenes_fully_held_back: int = 0


@dataclass(frozen=True)
class PairDecisions:
    table: pa.Table  # REVIEW
    scenes_fully_held_back: int  # as in ReviewOutput


def run_review(
    config: ReviewConfig, decisions: pa.Table, queue: pa.Table, images: dict[str, ReviewImage], ctx: ReviewContext
) -> ReviewOutput:
    target = review_target(config, "duplicate_review", ctx) if queue.num_rows else None
    if target is None:
        return ReviewOutput(_auto_accept(decisions), None)
    backend, media = target
    publish = publisher(media, ctx)
    tasks = duplicate_review_tasks(queue, lambda image_id: publish(images[image_id].sha256, images[image_id].extension))
    if unreviewed_auto_accept(config):
        backend.export(tasks)
        return ReviewOutput(_auto_accept(decisions, f"{AUTO_ACCEPT_POLICY}; review tasks in {backend.location}"), None)
    assert not isinstance(config, AutoAcceptReviewConfig)  # review_target gives it no backend
    annotators = config.annotators
    round_ = run_round(backend, SPECS["duplicate_review"], tasks, annotators, ctx.accept_incomplete)
    areas = {image_id: image.area for image_id, image in images.items()}
    applied = apply_pair_decisions(decisions, queue, round_, areas, annotators)
    lost = applied.scenes_fully_held_back
    return ReviewOutput(applied.table, replace(round_, outcome={"scenes_fully_held_back": lost}), lost)


def _auto_accept(decisions: pa.Table, policy: str = AUTO_ACCEPT_POLICY) -> pa.Table:
    n = decisions.num_rows
    return pa.table(
        {
            "image_id": decisions["image_id"],
            "keep": decisions["keep"],
            "automatic_keep": decisions["keep"],
            "reviewer": pa.array([AUTO_ACCEPT] * n, pa.string()),
            "policy": pa.array([policy] * n, pa.string()),
            "reason": decisions["reason"],
        },
        schema=REVIEW,
    )


def apply_pair_decisions(
    decisions: pa.Table, queue: pa.Table, round_: ReviewRound, areas: dict[str, int], annotators: int
) -> PairDecisions:
    """The REVIEW table after the people's verdicts on the queued pairs (module docstring)."""
    ids = decisions["image_id"].to_pylist()
    automatic = [bool(keep) for keep in decisions["keep"].to_pylist()]
    reasons = decisions["reason"].to_pylist()
    index = {image_id: i for i, image_id in enumerate(ids)}
    verdict = {row["item_key"]: (row["status"], row["decision"], row["reason"]) for row in round_.decisions.to_pylist()}

    def rank(image_id: str) -> tuple[int, str]:
        return (-areas.get(image_id, 0), image_id)

    groups = UnionFind(len(ids))
    held_back: dict[str, str] = {}
    for pair in queue.to_pylist():
        a, b = pair["cluster_a"], pair["cluster_b"]
        status, decision, reason = verdict[duplicate_item_key(pair["image_a"], pair["image_b"])]
        if status == "decided" and decision == SAME_SCENE:
            groups.union(index[a], index[b])
        elif status != "decided":
            loser = max(a, b, key=rank)
            held_back.setdefault(loser, f"review_undecided: {reason} ({pair['image_a']} vs {pair['image_b']})")
    # A held-back image cannot stand for its scene: the keeper is the best copy that is not held back, so the scene
    # is lost only when every copy of it is held back.
    keeper: dict[int, str] = {}
    fully_held_back = 0
    for root, members in groups.groups().items():
        representatives = [ids[m] for m in members if automatic[m]]
        available = [image_id for image_id in representatives if image_id not in held_back]
        if available:
            keeper[root] = min(available, key=rank)
        elif representatives:
            fully_held_back += 1
    rows = []
    policy = MAJORITY_POLICY.format(n=annotators)
    for i, image_id in enumerate(ids):
        keep, reason = automatic[i], reasons[i]
        if automatic[i]:
            if image_id in held_back:
                keep, reason = False, held_back[image_id]
            elif keeper[groups.find(i)] != image_id:
                keep, reason = False, f"review_same_scene: duplicate of {keeper[groups.find(i)]}"
        rows.append(
            {
                "image_id": image_id,
                "keep": keep,
                "automatic_keep": automatic[i],
                "reviewer": round_.reviewer,
                "policy": policy,
                "reason": reason,
            }
        )
    return PairDecisions(from_rows(rows, schemas.REVIEW), fully_held_back)


def image_extension(format_name: str | None) -> str:
    return EXTENSIONS.get((format_name or "").upper(), "img")
