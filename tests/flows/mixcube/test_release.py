"""The MixCuBe release from the building blocks on their embedded defaults: demo originals, Haar faces, ellipse
masks, the placeholder inpainter and auto-accepted QA, assembled into quintets and released."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from annotation.backends import AutoAcceptReviewConfig, ReviewContext
from annotation.synthesis_qa import run_synthesis_qa
from collectors.mixcube_originals import DemoOriginalsConfig, collect_originals
from curation.quintets import assemble_quintets
from data import schemas
from data.publish.folder import ReleaseExistsError
from data.publish.release import ReleaseConfig
from data.reference import default_pack
from data.workspace import Workspace
from flows.mixcube.release import write_mixcube_release
from synthesis.attempts import first_plans, run_attempts
from synthesis.faces import HaarFaceConfig, build_face_detector
from synthesis.inpaint import PlaceholderInpaintConfig, build_inpainter
from synthesis.masks import EllipseMaskConfig, build_masker, mask_png

MIX = default_pack().mixcube()
ETHNICITIES = [e.label for e in MIX.ethnicities]


def build_rows(ws: Workspace, drop: tuple[str, str] | None = None) -> tuple[pa.Table, list[dict]]:
    originals = collect_originals(DemoOriginalsConfig(per_cell=1, cultures=["South Korea", "UK"]), ws.blobs.put, MIX)
    detector, masker = build_face_detector(HaarFaceConfig()), build_masker(EllipseMaskConfig())
    masks = {}
    for original in originals.to_pylist():
        pixels = np.array(Image.open(io.BytesIO(ws.blobs.get(original["sha256"]))).convert("RGB"))
        masks[original["original_id"]] = ws.blobs.put(mask_png(masker.mask(pixels, detector.detect(pixels))))
    plans = [
        p for p in first_plans(originals.to_pylist(), masks, MIX, base_seed=0) if (p.original_id, p.ethnicity) != drop
    ]
    attempts_table = run_attempts(build_inpainter(PlaceholderInpaintConfig()), plans, ws.blobs.get, ws.blobs.put)
    candidates = [
        {
            **{k: row[k] for k in ("attempt_id", "original_id", "ethnicity", "attempt", "prompt", "mask_sha256")},
            "original_sha256": plan.original_sha256,
            "synthesized_sha256": row["sha256"],
            "brisque": None,
            "clip_similarity": None,
        }
        for plan, row in zip(plans, attempts_table.to_pylist(), strict=True)
    ]
    ctx = ReviewContext(ws.build_id, Path(ws.file_path()), ws.blobs.get, ws.blobs.path)
    qa = run_synthesis_qa(
        AutoAcceptReviewConfig(), schemas.from_rows(candidates, schemas.SYNTHESIS_QA_CANDIDATES), ctx, ws.blobs.put
    )
    sizes = {
        sha: len(ws.blobs.get(sha)) for sha in originals["sha256"].to_pylist() + attempts_table["sha256"].to_pylist()
    }
    quintets = assemble_quintets(originals, attempts_table, {}, qa.qa, sizes, MIX)
    return quintets.rows, quintets.incomplete


@pytest.mark.slow
def test_release_keeps_the_public_columns_and_order_and_marks_placeholders(tmp_path: Path) -> None:
    import datasets
    import webdataset as wds

    ws = Workspace(str(tmp_path / "ws"), "mixcube-test")
    rows, incomplete = build_rows(ws)
    assert incomplete == [] and rows.num_rows == 2 * 3 * 5
    config = ReleaseConfig(root=str(tmp_path / "rel"), version="0.0.1")
    result = write_mixcube_release(config, ws.blobs, rows, {"demo": True, "incomplete": incomplete}, default_pack())
    release = Path(result.path)

    loaded = datasets.load_dataset(str(release), split="train")
    assert loaded.column_names[:3] == ["country", "category", "ethnicity"] and "image" in loaded.column_names
    ethnicities = loaded["ethnicity"]
    for start in range(0, len(ethnicities), 5):  # each original followed by its 4 swaps, in the paper's order
        assert ethnicities[start : start + 5] == ["original", *ETHNICITIES]
        assert len(set(loaded["original_id"][start : start + 5])) == 1
    assert loaded[0]["image"].size == Image.open(io.BytesIO(ws.blobs.get(rows["sha256"][0].as_py()))).size
    assert [p for p, e in zip(loaded["placeholder"], ethnicities, strict=True) if e != "original"] == [True] * 24
    assert set(loaded["country"]) == {"Korean", "British"}

    with (release / "food_label.csv").open() as handle:
        food = list(csv.DictReader(handle))
    assert list(food[0]) == ["image_file", "label"] and len(food) == 2 * 5
    assert all(row["label"] for row in food)
    card = (release / "README.md").read_text()
    assert "pipeline demonstration, not the benchmark" in card and "24 images are placeholders" in card
    assert (release / "figures" / "before_after.png").is_file()
    manifest = json.loads((release / "manifest.json").read_text())
    for sha in set(rows["mask_sha256"].to_pylist()):
        assert f"masks/{sha}.png" in manifest["files"]

    tars = sorted(str(release / name) for name in manifest["files"] if name.endswith(".tar"))
    samples = list(wds.WebDataset(tars, shardshuffle=False))
    assert [x["__key__"] for x in samples] == rows["sample_id"].to_pylist()
    assert json.loads(samples[1]["json"])["ethnicity"] == ETHNICITIES[0] and samples[1]["jpg"][:3] == b"\xff\xd8\xff"

    again = write_mixcube_release(config, ws.blobs, rows, {"demo": True, "incomplete": incomplete}, default_pack())
    assert again.status == "unchanged"
    with pytest.raises(ReleaseExistsError):
        write_mixcube_release(config, ws.blobs, rows.slice(5), {"demo": True, "incomplete": incomplete}, default_pack())


def test_an_original_without_every_swap_is_left_out_and_reported(tmp_path: Path) -> None:
    ws = Workspace(str(tmp_path / "ws"), "mixcube-gap")
    first = collect_originals(DemoOriginalsConfig(per_cell=1, cultures=["South Korea", "UK"]), ws.blobs.put, MIX)
    gap = (first["original_id"][0].as_py(), "Caucasian")
    rows, incomplete = build_rows(ws, drop=gap)
    assert incomplete == [{"original_id": gap[0], "missing": ["Caucasian"]}]
    assert gap[0] not in set(rows["original_id"].to_pylist()) and rows.num_rows == 5 * 5
