"""perf/reduced_decode.py (issue 60): Pillow's draft scale reproduced, the pixel comparison, and one JSON line with
every variant timed or said to be not measured, on a tiny sample."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from perf import reduced_decode as rd


def _jpeg(width: int, height: int, seed: int = 0) -> bytes:
    grid = np.random.default_rng(seed).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(grid).resize((width, height), Image.Resampling.BILINEAR).save(out, "JPEG", quality=80)
    return out.getvalue()


@pytest.mark.parametrize("size", [(64, 64), (256, 192), (300, 260), (1024, 768), (1100, 1030), (2000, 300)])
def test_draft_scale_is_the_one_pillow_picks(size: tuple[int, int]) -> None:
    width, height = size
    s = rd.draft_scale(width, height)
    assert rd.pil_draft(_jpeg(width, height)).size == (-(-width // s), -(-height // s))


def test_compare_counts_identity_differences_and_shape_mismatches() -> None:
    a = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert rd.compare([a, a], [a.copy(), a.copy()]) == {
        "files": 2,
        "same_shape": 1.0,
        "files_identical": 1.0,
        "pixels_identical": 1.0,
        "max_abs_diff": 0,
        "mean_abs_diff": 0.0,
    }
    b = a.copy()
    b[1, 2] += 5
    stats = rd.compare([a, a], [b, a[:2]])
    assert stats["same_shape"] == 0.5 and stats["files_identical"] == 0.0
    assert stats["max_abs_diff"] == 5 and stats["pixels_identical"] == pytest.approx(11 / 12)


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_main_times_every_variant_it_can_and_pillow_matches_itself(capsys: pytest.CaptureFixture[str]) -> None:
    summary = rd.main(["--images", "20", "--rounds", "1"])
    report = _last_json(capsys.readouterr().out)
    assert report == json.loads(json.dumps(summary))
    assert report["benchmark"] == "reduced_decode" and report["threads"] == [1, 2]
    assert {"pillow", "simplejpeg", "turbojpeg"} <= set(report["libraries"])
    assert [s["set"] for s in report["sets"]] == ["size_scale=1", "size_scale=0.25"]
    can = rd.available()
    for row in report["sets"]:
        assert row["files"] == 20 and sum(row["dct_scales"].values()) == 20
        measured = {n for n, (_, lib) in rd.VARIANTS.items() if can[lib] is None}
        assert set(row["seconds"]) == measured and set(row["not_measured"]) == set(rd.VARIANTS) - measured
        assert all(set(t) == {"1", "2"} and min(t.values()) > 0 for t in row["seconds"].values())
        assert row["ratio_to_pil_reduced"]["pil_reduced"] == {"1": 1.0, "2": 1.0}
        assert row["fastest_pass_variant"]["1"] in rd.PASS_VARIANTS
        for what in ("luma", "chroma_thumbnail"):  # the bare draft decode is today's path's pixels
            assert row["pixels"]["pil_draft_vs_reduced"][what]["files_identical"] == 1.0
    full, quarter = report["sets"]
    assert "1/1" in quarter["dct_scales"] and full["dct_scales"].get("1/1", 0) < quarter["dct_scales"]["1/1"]


def test_a_folder_is_sampled_and_its_bad_files_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(6):
        (tmp_path / f"{i}.jpg").write_bytes(_jpeg(300 + 40 * i, 260, seed=i))
    (tmp_path / "cut.jpg").write_bytes(_jpeg(400, 300)[:600])
    (tmp_path / "page.jpg").write_bytes(b"<!DOCTYPE html><html>403</html>")
    Image.new("RGB", (300, 300)).save(tmp_path / "flat.png")  # not a .jpg: never sampled
    grey = io.BytesIO()
    Image.new("L", (300, 300), 90).save(grey, "JPEG")
    (tmp_path / "grey.jpg").write_bytes(grey.getvalue())
    rd.main(["--corpus", str(tmp_path), "--images", "50", "--rounds", "1", "--threads", "2"])
    (row,) = _last_json(capsys.readouterr().out)["sets"]
    assert row["files"] == 6 and sum(row["left_out"].values()) == 3 and row["left_out"]["JPEG L"] == 1
    assert set(next(iter(row["seconds"].values()))) == {"2"}


def test_libjpeg_turbo_luma_is_pillows_draft_luma() -> None:
    """Where simplejpeg or PyTurboJPEG is installed (not in the project's venv), their luma is Pillow's."""
    can = rd.available()
    if can["simplejpeg"] is not None and can["turbojpeg"] is not None:
        pytest.skip("neither simplejpeg nor PyTurboJPEG is usable here")
    blobs = [_jpeg(w, h, seed=w) for w, h in [(640, 480), (1280, 720), (301, 257), (2000, 1999)]]
    stats = rd.pixel_stats(blobs)
    for name in ("sj_gray", "tj_gray", "tj_yuv"):
        if name in stats:
            assert stats[name]["luma"]["files_identical"] == 1.0, name
