"""Review stage of 3XCM: people settle the ambiguous near-duplicate pairs (3XCM paper §3.2.1, App. J).

Backends:
- `label_studio`: a Label Studio server. Tasks go to a project of this build; the build waits until every task
  has its annotators (3 by default, §3.2.1), then decides each pair by majority.
- `label_studio_files` (embedded default): Label-Studio-importable files in the workspace, and a completed Label
  Studio JSON export as the input once annotators are done. Until one is given, the auto-accept policy applies
  (recorded as such), or the build waits (`when_unreviewed: wait`).
- `auto_accept`: every automatic decision stands and ambiguous pairs stay apart. Each row says so
  (`reviewer=auto_accept`), so a release built this way can never pass for a human-reviewed one.

How votes change the automatic decisions: a pair decided "same scene" joins its two clusters and keeps the
representative with the larger resolution (then the smaller image id); "different" keeps both; an undecided pair
keeps the better representative and holds the other back (`review_undecided`): either outcome keeps one copy, so
the release uses only what was decided.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from annotation.backends import (
    AUTO_ACCEPT,
    ReviewConfig,
    ReviewContext,
    publisher,
    review_target,
    unreviewed_auto_accept,
)
from annotation.collect import ReviewRound, run_round
from annotation.label_configs import SAME_SCENE, SPECS
from annotation.tasks import EXTENSIONS, duplicate_item_key, duplicate_review_tasks
from curation.unionfind import UnionFind
from data import schemas
from data.schemas import REVIEW, from_rows

AUTO_ACCEPT_POLICY = (
    "accept every automatic dedup decision unchanged and keep ambiguous pairs apart; "
    "no human has looked at these images"
)
MAJORITY_POLICY = (
    "majority of {n} annotators per ambiguous pair (App. J guideline); undecided pairs hold one image back"
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
    annotators = config.annotators  # type: ignore[union-attr]
    round_ = run_round(backend, SPECS["duplicate_review"], tasks, annotators, ctx.accept_incomplete)
    areas = {image_id: image.area for image_id, image in images.items()}
    return ReviewOutput(apply_pair_decisions(decisions, queue, round_, areas, annotators), round_)


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
) -> pa.Table:
    """The REVIEW table after the people's verdicts on the queued pairs (module docstring)."""
    ids = decisions["image_id"].to_pylist()
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
    keeper: dict[int, str] = {}
    for root, members in groups.groups().items():
        representatives = [ids[m] for m in members if decisions["keep"][m].as_py()]
        if representatives:
            keeper[root] = min(representatives, key=rank)
    rows = []
    policy = MAJORITY_POLICY.format(n=annotators)
    for i, image_id in enumerate(ids):
        automatic = bool(decisions["keep"][i].as_py())
        keep, reason = automatic, decisions["reason"][i].as_py()
        if automatic:
            kept_by = keeper.get(groups.find(i), image_id)
            if kept_by != image_id:
                keep, reason = False, f"review_same_scene: duplicate of {kept_by}"
            elif image_id in held_back:
                keep, reason = False, held_back[image_id]
        rows.append(
            {
                "image_id": image_id,
                "keep": keep,
                "automatic_keep": automatic,
                "reviewer": round_.reviewer,
                "policy": policy,
                "reason": reason,
            }
        )
    return from_rows(rows, schemas.REVIEW)


def image_extension(format_name: str | None) -> str:
    return EXTENSIONS.get((format_name or "").upper(), "img")
