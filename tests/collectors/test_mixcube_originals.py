"""MixCuBe originals: the offline demo scenes and the import of a labelled folder, failures as rows."""

from __future__ import annotations

import io
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from collectors.mixcube_originals import (
    DemoOriginalsConfig,
    LocalOriginalsConfig,
    collect_originals,
)
from data.reference import default_pack
from data.schemas import STATUS_OK
from data.workspace import Workspace


def haar_faces(data: bytes) -> int:
    gray = cv2.cvtColor(np.array(Image.open(io.BytesIO(data)).convert("RGB")), cv2.COLOR_RGB2GRAY)
    cascade = cv2.CascadeClassifier(os.path.join(cv2.data.haarcascades, "haarcascade_frontalface_default.xml"))
    return len(cascade.detectMultiScale(gray, scaleFactor=1.1, minNeighbors=5, minSize=(24, 24)))


@pytest.mark.slow
def test_demo_originals_cover_every_cell_with_labels_and_a_detectable_face(tmp_path: Path) -> None:
    ws = Workspace(str(tmp_path), "mixcube-demo")
    table = collect_originals(DemoOriginalsConfig(per_cell=2), ws.blobs.put, default_pack().mixcube())
    mix = default_pack().mixcube()
    assert table.num_rows == len(mix.cultures) * len(mix.categories) * 2
    assert set(table["status"].to_pylist()) == {STATUS_OK} and set(table["source"].to_pylist()) == {"demo"}
    cells = {(r["culture"], r["category"]) for r in table.to_pylist()}
    assert cells == {(c.name, k) for c in mix.cultures for k in mix.categories}
    for row in table.to_pylist():
        assert row["country"] == next(c.adjective for c in mix.cultures if c.name == row["culture"])
        assert (row["food_label"] is not None) == (row["category"] == "Food")
        assert haar_faces(ws.blobs.get(row["sha256"])) >= 1, row["original_id"]
    assert len(set(table["sha256"].to_pylist())) == table.num_rows  # no two demo scenes alike


def test_local_import_keeps_labels_and_reports_every_bad_row(tmp_path: Path) -> None:
    root = tmp_path / "originals"
    root.mkdir()
    Image.new("RGB", (320, 240), (200, 120, 40)).save(root / "kimchi.jpg")
    Image.new("RGB", (64, 48)).save(root / "tiny.jpg")
    (root / "page.jpg").write_bytes(b"<!DOCTYPE html><html>403</html>")
    labels = tmp_path / "labels.csv"
    labels.write_text(
        "image_file,culture,category,food_label\n"
        'kimchi.jpg,Korean,food,"김치, Kimchi"\n'
        "tiny.jpg,South Korea,Food,\n"
        "page.jpg,UK,Clothes,\n"
        "gone.jpg,US,Festival,\n"
        "kimchi.jpg,Atlantis,Food,\n"
    )
    ws = Workspace(str(tmp_path / "ws"), "mixcube-local")
    table = collect_originals(
        LocalOriginalsConfig(root=str(root), labels_csv=str(labels)), ws.blobs.put, default_pack().mixcube()
    )
    rows = table.to_pylist()
    assert rows[0]["status"] == STATUS_OK and rows[0]["culture"] == "South Korea" and rows[0]["country"] == "Korean"
    assert rows[0]["category"] == "Food" and rows[0]["food_label"] == "김치, Kimchi"
    assert ws.blobs.get(rows[0]["sha256"]) == (root / "kimchi.jpg").read_bytes()
    errors = [r["error"].split(":")[0] if r["error"] else None for r in rows]
    assert errors == [None, "too_small", "not_an_image", "missing_file", "bad_label"]


def test_local_import_needs_the_label_columns(tmp_path: Path) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text("file,country\nx.jpg,UK\n")
    with pytest.raises(ValueError, match=r"missing columns \['category', 'culture', 'image_file'\]"):
        collect_originals(
            LocalOriginalsConfig(root=str(tmp_path), labels_csv=str(labels)), lambda data: "", default_pack().mixcube()
        )
