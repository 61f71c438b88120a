"""What the reviews must never do: decide a tie, lose a scene, crash on a malformed export, or trust a brush RLE.

- A choice is decided only with more than half of the votes cast ("unsure" and unreadable verdicts count as cast),
  whatever the export order; synthesis QA uses the same rule.
- The duplicate review keeps exactly one image of each scene (images joined by "same scene" verdicts) unless every
  image of it is held back by an undecided pair, and counts those scenes.
- Every malformed Label Studio export raises `MalformedExport` naming the task, never another exception.
- A painted mask is checked against the original it was painted on; a mismatch or an undecodable RLE is a
  per-attempt `invalid_mask` reason, never a crash or a huge allocation.
"""

from __future__ import annotations

import copy
import itertools
import json
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from annotation.aggregate import Agreement, MalformedExport, Vote, decide, parse_export
from annotation.backends import LabelStudioFilesReviewConfig
from annotation.collect import ReviewRound
from annotation.label_configs import (
    ACCEPT,
    DIFFERENT,
    FIX_MASK,
    MASK_CONTROL,
    REJECT_ARTIFACTS,
    RETRY_PROMPT,
    SAME_SCENE,
    SPECS,
    UNSURE,
)
from annotation.label_studio import LabelStudioProject, LabelStudioServerConfig
from annotation.review import apply_pair_decisions, run_review
from annotation.synthesis_qa import decode_brush, run_synthesis_qa
from annotation.task_files import TaskFiles
from data import schemas
from tests.support.review_inputs import (
    DedupReviewInputs,
    brush,
    completed_export,
    fill_rle,
    pair_graph_inputs,
    retry_text,
    synthesis_candidates,
    verdict,
)

DUP = "duplicate_review"
AUTO_FILES = LabelStudioFilesReviewConfig(when_unreviewed="auto_accept")  # exports the tasks, then auto-accepts
QA = "synthesis_qa"
MIB = 1 << 20


def votes(key: str, *choices: str | None) -> list[Vote]:
    return [Vote(item_key=key, task_id=1, annotator=f"a{n}", choice=c) for n, c in enumerate(choices)]


def decision(choices: tuple[str | None, ...], annotators: int = 3, closed: bool = True) -> dict[str, Any]:
    table, _ = decide(votes("k", *choices), ["k"], SPECS[DUP], annotators=annotators, complete=closed)
    return table.to_pylist()[0]


# -- 1. a strict majority of the votes cast ------------------------------------------------------------------------


@pytest.mark.parametrize("order", sorted(set(itertools.permutations([SAME_SCENE, SAME_SCENE, DIFFERENT, DIFFERENT]))))
def test_a_two_two_split_is_no_majority_in_any_export_order(order: tuple[str, ...]) -> None:
    row = decision(order)
    assert (row["status"], row["decision"], row["reason"]) == ("undecided", None, "no_majority")
    assert row["majority_share"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("choices", "annotators", "closed", "expected"),
    [
        # "unsure" is a vote cast for nobody: two of four is no majority
        ((SAME_SCENE, SAME_SCENE, UNSURE, UNSURE), 3, True, ("undecided", None, "no_majority")),
        # an annotation whose verdict cannot be read (a renamed choice) is cast too: one of three is no majority
        ((SAME_SCENE, None, None), 3, True, ("undecided", None, "no_majority")),
        ((SAME_SCENE, SAME_SCENE, SAME_SCENE, DIFFERENT), 3, True, ("decided", SAME_SCENE, None)),
        ((UNSURE, UNSURE, UNSURE, SAME_SCENE), 3, True, ("undecided", None, "unsure")),
        # still open and short of annotators: wait, even when the votes so far agree
        ((SAME_SCENE, SAME_SCENE), 3, False, ("pending", None, "2 of 3 annotations")),
        # closed with fewer than a majority of the configured annotators
        ((SAME_SCENE,), 3, True, ("undecided", None, "too_few_annotations: 1 of 3")),
        ((SAME_SCENE, SAME_SCENE), 5, True, ("undecided", None, "too_few_annotations: 2 of 5")),
        # closed with enough of them: the votes cast decide
        ((SAME_SCENE, SAME_SCENE, DIFFERENT), 4, True, ("decided", SAME_SCENE, None)),
        ((SAME_SCENE, DIFFERENT), 3, True, ("undecided", None, "no_majority")),
    ],
)
def test_decisions_follow_the_votes_cast(
    choices: tuple[str | None, ...], annotators: int, closed: bool, expected: tuple[str, str | None, str | None]
) -> None:
    row = decision(choices, annotators, closed)
    assert (row["status"], row["decision"], row["reason"]) == expected


@settings(max_examples=300, deadline=None)
@given(
    choices=st.lists(st.sampled_from([SAME_SCENE, DIFFERENT, UNSURE, None]), max_size=7),
    annotators=st.integers(1, 5),
    closed=st.booleans(),
    seed=st.randoms(use_true_random=False),
)
def test_decide_is_a_strict_majority_of_the_votes_cast_in_any_order(
    choices: list[str | None], annotators: int, closed: bool, seed: Any
) -> None:
    row = decision(tuple(choices), annotators, closed)
    shuffled = list(choices)
    seed.shuffle(shuffled)
    again = decision(tuple(shuffled), annotators, closed)
    assert {k: v for k, v in again.items() if k != "annotators"} == {k: v for k, v in row.items() if k != "annotators"}
    cast, counts = len(choices), Counter(c for c in choices if c is not None)
    assert row["annotations"] == cast
    if not closed and cast < annotators:
        assert row["status"] == "pending"
    elif cast < annotators // 2 + 1:
        assert row["reason"] == f"too_few_annotations: {cast} of {annotators}"
    elif row["status"] == "decided":
        assert row["decision"] != UNSURE and 2 * counts[row["decision"]] > cast
    else:
        assert row["status"] == "undecided" and all(2 * n <= cast or c == UNSURE for c, n in counts.items())
        assert row["reason"] == ("unsure" if 2 * counts[UNSURE] > cast else "no_majority")


@pytest.mark.parametrize("accept_first", [True, False])
def test_synthesis_qa_keeps_no_attempt_on_a_tie(tmp_path: Path, accept_first: bool) -> None:
    inputs = pair_graph_inputs(tmp_path / "ws", {}, [])
    candidates = synthesis_candidates(inputs.ws, originals=1)
    accept, reject = [verdict(QA, ACCEPT)] * 2, [verdict(QA, REJECT_ARTIFACTS)] * 2
    results = {"orig0-African-1": accept + reject if accept_first else reject + accept}
    out = _synthesis_qa(inputs, candidates, tmp_path, results)
    (row,) = out.qa.to_pylist()
    assert (row["keep"], row["status"], row["decision"], row["reason"]) == (False, "undecided", None, "no_majority")


# -- 2. the duplicate review keeps one image per scene ---------------------------------------------------------------


def _review(inputs: DedupReviewInputs, tmp_path: Path, results: dict[str, list[list[dict]]]) -> Any:
    run_review(AUTO_FILES, inputs.decisions, inputs.queue, inputs.images, inputs.context())
    tasks = json.loads(Path(inputs.ws.file_path("label_studio", DUP, "tasks.json")).read_text())
    path = tmp_path / "export.json"
    path.write_text(json.dumps(completed_export(tasks, results)))
    config = LabelStudioFilesReviewConfig(completed_export=str(path))
    return run_review(config, inputs.decisions, inputs.queue, inputs.images, inputs.context())


SAME, SPLIT = [verdict(DUP, SAME_SCENE)] * 3, [verdict(DUP, SAME_SCENE), verdict(DUP, DIFFERENT), verdict(DUP, UNSURE)]
SIZES = {"A": (96, 72), "B": (80, 60), "C": (64, 48)}  # A ranks first, C last


def test_a_scene_whose_best_image_is_held_back_keeps_another_copy(tmp_path: Path) -> None:
    # A|B undecided holds B back; B|C "same scene" used to drop C as a duplicate of B: the scene vanished
    inputs = pair_graph_inputs(tmp_path / "ws", SIZES, [("A", "B"), ("B", "C")])
    out = _review(inputs, tmp_path, {"A|B": SPLIT, "B|C": SAME})
    rows = {r["image_id"]: r for r in out.table.to_pylist()}
    assert rows["A"]["keep"] and rows["C"]["keep"]
    assert not rows["B"]["keep"] and rows["B"]["reason"].startswith("review_undecided: no_majority")
    assert out.scenes_fully_held_back == 0


def test_a_scene_held_back_in_every_copy_is_counted(tmp_path: Path) -> None:
    # B and C are one scene, and each loses an undecided pair against A
    inputs = pair_graph_inputs(tmp_path / "ws", SIZES, [("A", "B"), ("A", "C"), ("B", "C")])
    out = _review(inputs, tmp_path, {"A|B": SPLIT, "A|C": SPLIT, "B|C": SAME})
    keep = dict(zip(out.table["image_id"].to_pylist(), out.table["keep"].to_pylist(), strict=True))
    assert keep == {"A": True, "B": False, "C": False}
    reasons = dict(zip(out.table["image_id"].to_pylist(), out.table["reason"].to_pylist(), strict=True))
    assert reasons["B"].startswith("review_undecided") and reasons["C"].startswith("review_undecided")
    assert out.scenes_fully_held_back == 1


@st.composite
def pair_graphs(draw: st.DrawFn) -> tuple[dict[str, int], dict[tuple[str, str], str]]:
    """Up to 7 images with areas (ties included) and a verdict for each of some pairs between them."""
    n = draw(st.integers(2, 7))
    areas = {f"i{k}": draw(st.sampled_from([100, 200, 300])) for k in range(n)}
    pairs = draw(st.lists(st.sampled_from(list(itertools.combinations(sorted(areas), 2))), unique=True, max_size=12))
    outcome = st.sampled_from([SAME_SCENE, DIFFERENT, "undecided"])
    return areas, {pair: draw(outcome) for pair in pairs}


def _round(verdicts: dict[tuple[str, str], str]) -> ReviewRound:
    rows = [
        schemas.blank_row(
            schemas.REVIEW_DECISIONS,
            review=DUP,
            item_key=f"{a}|{b}",
            status="undecided" if v == "undecided" else "decided",
            decision=None if v == "undecided" else v,
            reason="no_majority" if v == "undecided" else None,
            votes="{}",
            annotations=3,
            annotators=[],
        )
        for (a, b), v in verdicts.items()
    ]
    decisions = schemas.from_rows(rows, schemas.REVIEW_DECISIONS)
    return ReviewRound(decisions, Agreement(0, None, None), "label_studio_files", "here", 0, len(rows), False, [])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair_graphs())
def test_every_scene_keeps_exactly_one_image_unless_all_of_it_is_held_back(
    graph: tuple[dict[str, int], dict[tuple[str, str], str]],
) -> None:
    areas, verdicts = graph
    rows = [
        schemas.blank_row(schemas.IMAGE_DEDUP, image_id=i, concept_id=1, cluster_id=i, cluster_size=1, keep=True)
        for i in areas
    ]
    rows.append(  # dropped before the review: it stays dropped
        schemas.blank_row(
            schemas.IMAGE_DEDUP,
            image_id="copy",
            concept_id=1,
            cluster_id="i0",
            cluster_size=2,
            keep=False,
            reason="exact_bytes",
        )
    )
    queue = [
        schemas.blank_row(schemas.REVIEW_QUEUE, image_a=a, image_b=b, concept_id=1, cluster_a=a, cluster_b=b)
        for a, b in verdicts
    ]
    out = apply_pair_decisions(
        schemas.from_rows(rows, schemas.IMAGE_DEDUP),
        schemas.from_rows(queue, schemas.REVIEW_QUEUE),
        _round(verdicts),
        areas,
        3,
    )
    result = {r["image_id"]: r for r in out.table.to_pylist()}
    assert not result["copy"]["keep"] and result["copy"]["reason"] == "exact_bytes"

    def rank(image_id: str) -> tuple[int, str]:
        return (-areas[image_id], image_id)

    # the rule, restated: the lower-ranked image of an undecided pair is held back; scenes are the images joined
    # by "same scene"; each scene keeps its best image that is not held back
    held = {max(pair, key=rank) for pair, v in verdicts.items() if v == "undecided"}
    scene = {i: {i} for i in areas}
    for (a, b), v in verdicts.items():
        if v == SAME_SCENE and scene[a] is not scene[b]:
            merged = scene[a] | scene[b]
            for member in merged:
                scene[member] = merged
    scenes = {frozenset(s) for s in scene.values()}
    for members in scenes:
        kept = [i for i in members if result[i]["keep"]]
        available = members - held
        assert len(kept) == (1 if available else 0), (members, held, kept)
        if available:
            assert kept == [min(available, key=rank)]
        for i in members & held:
            assert not result[i]["keep"] and result[i]["reason"].startswith("review_undecided")
    assert out.scenes_fully_held_back == sum(not (members - held) for members in scenes)


# -- 3. malformed exports -----------------------------------------------------------------------------------------


def _task(*annotations: Any, **fields: Any) -> dict[str, Any]:
    return {"id": 7, "data": {"item_key": "k"}, "annotations": list(annotations), **fields}


def _annotation(result: Any = None, **fields: Any) -> dict[str, Any]:
    return {"id": 70, "completed_by": 1, "result": verdict(DUP, SAME_SCENE) if result is None else result, **fields}


def _without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


def _region(control: str = "verdict", **value: Any) -> dict[str, Any]:
    return {"from_name": control, "to_name": "image_a", "type": "choices", "value": value}


def _brush_region(**fields: Any) -> dict[str, Any]:
    region = brush(np.ones((4, 5), dtype=bool))
    return {**region, **fields}


GOOD_TASK = _task(_annotation())
MALFORMED: list[tuple[Any, str]] = [
    ({"tasks": []}, "is a list of tasks, got dict"),
    ("[]", "is a list of tasks, got str"),
    (None, "is a list of tasks, got NoneType"),
    ([1], r"task #0 is not an object"),
    ([{"id": 3}], r"task #0 \(id 3\) has no `data`"),
    ([{"id": 3, "data": []}], r"task #0 \(id 3\) has no `data`"),
    ([{"id": 3, "data": {}}], r"task #0 \(id 3\) has no `data.item_key`"),
    ([{"id": 3, "data": {"item_key": 5}}], "item_key"),
    ([{"id": 3, "data": {"item_key": ""}}], "item_key"),
    ([_without(GOOD_TASK, "id")], r"task #0 .*integer `id`"),
    ([{**GOOD_TASK, "id": "abc"}], r"task #0 .*integer `id`"),
    ([{**GOOD_TASK, "id": 3.5}], r"task #0 .*integer `id`"),
    ([{**GOOD_TASK, "id": True}], r"task #0 .*integer `id`"),
    ([_task(annotations="x")], r"task #0 \(id 7\): `annotations` is not a list"),
    ([_task(annotations={"0": _annotation()})], "`annotations` is not a list"),
    ([_task(5)], r"task #0 \(id 7\): annotation #0 is not an object"),
    ([GOOD_TASK, {"id": 9, "data": {"item_key": "k2"}, "annotations": [_annotation(), "x"]}], r"task #1 \(id 9\)"),
    ([_task(_annotation(result={"from_name": "verdict"}))], r"annotation #0 \(id 70\): `result` is not a list"),
    ([_task(_annotation(result="same_scene"))], "`result` is not a list"),
    ([_task(_annotation(result=[5]))], r"region #0 is not an object"),
    ([_task(_annotation(result=[{"from_name": "verdict", "value": "same_scene"}]))], "`value` is not an object"),
    ([_task(_annotation(result=[_region(choices="same_scene")]))], "`choices` is not a list of strings"),
    ([_task(_annotation(result=[_region(choices=[["same_scene"]])]))], "`choices` is not a list of strings"),
    ([_task(_annotation(result=[_region(choices=[None])]))], "`choices` is not a list of strings"),
    ([_task(_without(_annotation(), "completed_by"))], "`completed_by`"),
    ([_task(_annotation(completed_by=None))], "`completed_by`"),
    ([_task(_annotation(completed_by=True))], "`completed_by`"),
    ([_task(_annotation(completed_by=1.5))], "`completed_by`"),
    ([_task(_annotation(completed_by=[1]))], "`completed_by`"),
    ([_task(_annotation(completed_by={}))], "`completed_by`"),
    ([_task(_annotation(completed_by={"email": 5}))], "`completed_by`"),
    ([_task(_annotation(completed_by=""))], "`completed_by`"),
    ([_task(_annotation(was_cancelled="no"))], "`was_cancelled`"),
    ([_task(_annotation(result=[retry_text("x") | {"value": {"text": "a prompt"}}]))], "`text` is not a list"),
    ([_task(_annotation(result=[retry_text("x") | {"value": {"text": [1]}}]))], "`text` is not a list"),
    ([_task(_annotation(result=[_brush_region(value={"rle": "abc"})]))], "`rle` is not a list of integers"),
    ([_task(_annotation(result=[_brush_region(value={"rle": [1, "2"]})]))], "`rle` is not a list of integers"),
    ([_task(_annotation(result=[_brush_region(value={"rle": [1.5]})]))], "`rle` is not a list of integers"),
    ([_task(_annotation(result=[_brush_region(value={"rle": [True]})]))], "`rle` is not a list of integers"),
    ([_task(_annotation(result=[_brush_region(value={"rle": {"0": 1}})]))], "`rle` is not a list of integers"),
    ([_task(_annotation(result=[_without(_brush_region(), "original_width")]))], "`original_width`"),
    ([_task(_annotation(result=[_brush_region(original_height="72")]))], "`original_height`"),
    ([_task(_annotation(result=[_brush_region(original_width=0)]))], "`original_width`"),
    ([_task(_annotation(result=[_brush_region(original_width=-5)]))], "`original_width`"),
    ([_task(_annotation(result=[_brush_region(original_width=5.0)]))], "`original_width`"),
]


@pytest.mark.parametrize(("export", "message"), MALFORMED)
def test_every_malformed_export_is_named(export: Any, message: str) -> None:
    with pytest.raises(MalformedExport, match=message):
        parse_export(export, SPECS[QA])


def test_well_formed_variants_still_parse() -> None:
    export = [
        _task(_annotation(completed_by={"id": 4, "email": "ann@example.org"})),
        _task(_annotation(completed_by="ann@example.org", result=[]), annotations=None) | {"id": 8},
        _task(_annotation(completed_by=5, result=None, was_cancelled=None), _annotation(was_cancelled=True)),
        _task(_annotation(completed_by={"id": 6}, result=[_region("other", anything=1), _region(choices=[])])),
    ]
    export[2]["annotations"][0]["result"] = None
    parsed = parse_export(export, SPECS[DUP])
    assert [(v.task_id, v.annotator, v.choice) for v in parsed] == [
        (7, "ann@example.org", SAME_SCENE),
        (7, "5", None),
        (7, "6", None),
    ]


def _json_values(keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers(-3, 2**40) | st.floats(allow_nan=True) | st.text(max_size=4)
    return st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5), max_leaves=20
    )


EXPORT_KEYS = st.sampled_from(
    ["id", "data", "item_key", "annotations", "result", "from_name", "value", "choices", "text", "rle",
     "original_width", "original_height", "completed_by", "was_cancelled", "email", "verdict", MASK_CONTROL]
)  # fmt: skip


def _safe_parse(export: Any) -> None:
    """parse_export succeeds with votes or raises MalformedExport; anything else fails the test."""
    try:
        parsed = parse_export(export, SPECS[QA])
    except MalformedExport:
        return
    assert all(isinstance(v, Vote) and isinstance(v.annotator, str) for v in parsed)


@settings(max_examples=400, deadline=None)
@given(_json_values(EXPORT_KEYS))
def test_random_json_is_parsed_or_named_malformed(export: Any) -> None:
    _safe_parse(export)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    return [prefix] + [p for key, child in children for p in _paths(child, (*prefix, key))]


VALID_QA_EXPORT = [
    _task(
        _annotation(result=[*verdict(QA, RETRY_PROMPT), retry_text("a prompt")]),
        _annotation(result=[*verdict(QA, FIX_MASK), brush(np.eye(4, dtype=bool))], completed_by={"id": 2}),
    ),
    _task(_annotation(result=verdict(QA, ACCEPT), was_cancelled=False)),
]


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 10_000), _json_values(EXPORT_KEYS))
def test_a_valid_export_with_any_node_replaced_is_parsed_or_named_malformed(where: int, replacement: Any) -> None:
    paths = _paths(VALID_QA_EXPORT)
    path = paths[where % len(paths)]
    export: Any = copy.deepcopy(VALID_QA_EXPORT)
    if not path:
        export = replacement
    else:
        parent = export
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = replacement
    _safe_parse(export)


def test_a_malformed_server_snapshot_is_named_before_anything_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "token")
    config = LabelStudioServerConfig(url="http://127.0.0.1:9", document_root=str(tmp_path))
    project = LabelStudioProject(config, SPECS[DUP], "b1", 3)
    monkeypatch.setattr(project, "ensure_project", lambda: 1)
    monkeypatch.setattr(project, "snapshot", lambda: [{"id": 4, "annotations": []}])
    with pytest.raises(MalformedExport, match=r"task #0 \(id 4\) has no `data`"):
        project.export([{"data": {"item_key": "k"}}])


def test_a_completed_export_that_is_not_json_is_named(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text('[{"id": 1,')
    files = TaskFiles(tmp_path / "review", SPECS[DUP], "b", 3, tmp_path, str(path))
    with pytest.raises(MalformedExport, match=r"export.json is not JSON"):
        files.snapshot()


# -- 3b. brush RLE against the original ----------------------------------------------------------------------------


def _bits_rle(bits: str) -> list[int]:
    bits += "0" * (-len(bits) % 8)
    return [int(bits[i : i + 8], 2) for i in range(0, len(bits), 8)]


HEADER_8 = f"{8 - 1:05b}" + "".join(f"{s - 1:04b}" for s in (3, 4, 8, 16))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.data())
def test_decode_brush_reads_what_the_sdk_encoder_writes(width: int, height: int, data: st.DataObject) -> None:
    from label_studio_sdk.converter.brush import decode_rle, mask2rle

    flat = data.draw(st.lists(st.booleans(), min_size=width * height, max_size=width * height))
    mask = np.array(flat, dtype=bool).reshape(height, width)
    rle = mask2rle(mask.astype(np.uint8) * 255)
    assert np.array_equal(decode_brush(rle, width, height), mask)
    assert np.array_equal(decode_brush(rle, width, height), decode_rle(rle).reshape(height, width, 4)[:, :, 3] > 0)


@pytest.mark.parametrize(
    ("rle", "message"),
    [
        (fill_rle(10_000 * 10_000 * 4, 255), "400000000 values, the 96x72 original needs 27648"),
        (fill_rle(80 * 60 * 4, 255), "19200 values, the 96x72 original needs 27648"),
        (fill_rle(96 * 72 * 4, 255)[:6], "ends early"),
        (_bits_rle(f"{96 * 72 * 4:032b}" + f"{32 - 1:05b}" + "0" * 16), "word size 32"),
        (_bits_rle(f"{96 * 72 * 4:032b}" + HEADER_8 + "1" + "11" + f"{65535:016b}" + "1" * 8), "runs past"),
        ([*fill_rle(96 * 72 * 4, 255)[:-1], 300], "not bytes"),
        ([], "ends early"),
    ],
)
def test_decode_brush_refuses_an_rle_that_does_not_fit_the_original(rle: list[int], message: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=message):
            decode_brush(rle, 96, 72)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * MIB  # the header is checked before anything of its size is allocated


def _synthesis_qa(
    inputs: DedupReviewInputs, candidates: pa.Table, tmp_path: Path, results: dict[str, list[list[dict]]]
) -> Any:
    ctx, put = inputs.context(), inputs.ws.blobs.put
    run_synthesis_qa(AUTO_FILES, candidates, ctx, put)
    tasks = json.loads(Path(inputs.ws.file_path("label_studio", QA, "tasks.json")).read_text())
    path = tmp_path / "qa.json"
    path.write_text(json.dumps(completed_export(tasks, results)))
    return run_synthesis_qa(LabelStudioFilesReviewConfig(completed_export=str(path)), candidates, ctx, put)


def _painted(height: int, width: int) -> np.ndarray:
    mask = np.zeros((height, width), dtype=bool)
    mask[5 : height // 2, 10 : width // 2] = True
    return mask


@pytest.mark.parametrize(
    ("region", "message"),
    [
        # painted on another size (the export says 80x60 and so does its RLE): the redraw would fail on it
        (brush(_painted(60, 80)), "painted on a 80x60 view of the 96x72 original"),
        # painted on a rotated view: as many pixels as the original, but not its shape
        (brush(_painted(96, 72)), "painted on a 72x96 view of the 96x72 original"),
        # a few KB that promise a 10000x10000 mask
        (brush(_painted(72, 96)) | {"original_width": 10_000, "original_height": 10_000,
                                    "value": {"format": "rle", "rle": fill_rle(10_000 * 10_000 * 4, 255)}},
         "painted on a 10000x10000 view of the 96x72 original"),
        (brush(_painted(72, 96)) | {"value": {"format": "rle", "rle": fill_rle(10_000 * 10_000 * 4, 255)}},
         "400000000 values, the 96x72 original needs 27648"),
    ],
)  # fmt: skip
def test_a_painted_mask_that_does_not_fit_the_original_is_an_invalid_mask_reason(
    tmp_path: Path, region: dict[str, Any], message: str
) -> None:
    inputs = pair_graph_inputs(tmp_path / "ws", {}, [])
    candidates = synthesis_candidates(inputs.ws, originals=1)
    fix = [*verdict(QA, FIX_MASK), region]
    tracemalloc.start()
    try:
        out = _synthesis_qa(inputs, candidates, tmp_path, {"orig0-African-1": [fix, fix, verdict(QA, ACCEPT)]})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (row,) = out.qa.to_pylist()
    assert (row["status"], row["decision"], row["keep"]) == ("decided", FIX_MASK, False)
    assert row["reason"].startswith("invalid_mask: ") and message in row["reason"]
    (request,) = out.requests.to_pylist()
    assert request["kind"] == FIX_MASK and request["mask_sha256"] is None  # the redraw keeps the old mask
    assert out.invalid_masks == 1 and out.round.stats()["invalid_masks"] == 1
    assert peak < 64 * MIB


def test_valid_painted_masks_still_count_when_another_backer_painted_a_wrong_one(tmp_path: Path) -> None:
    inputs = pair_graph_inputs(tmp_path / "ws", {}, [])
    candidates = synthesis_candidates(inputs.ws, originals=1)
    good = _painted(72, 96)
    results = {
        "orig0-African-1": [
            [*verdict(QA, FIX_MASK), brush(good)],
            [*verdict(QA, FIX_MASK), brush(_painted(60, 80))],
            verdict(QA, ACCEPT),
        ]
    }
    out = _synthesis_qa(inputs, candidates, tmp_path, results)
    (row,) = out.qa.to_pylist()
    assert row["reason"].startswith("invalid_mask: annotator 2: ")
    (request,) = out.requests.to_pylist()
    with Image.open(inputs.ws.blobs.storage.fs.open(inputs.ws.blobs.path(request["mask_sha256"]))) as image:
        assert np.array_equal(np.array(image) > 0, good)
