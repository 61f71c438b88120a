"""The MixCuBe masks stage, one shard at a time (MixCuBe paper App. A.4).

One MIXCUBE_MASKS row per original whose faces were found: the mask over its face boxes, stored as a PNG blob with
the share of the image it covers, or why there is none (`masker_error`, `empty_mask`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import pyarrow as pa

from data import schemas
from data.row_errors import error_text
from data.schemas import STATUS_FAILED, STATUS_OK, str_cell
from synthesis.face_rows import decode_rgb
from synthesis.faces import FaceBox
from synthesis.masks import Masker, mask_png


def masks_table(
    faces: Sequence[Mapping[str, object]],
    masker: Callable[[], Masker],
    original_sha256: Mapping[str, str],
    load_blob: Callable[[str], bytes],
    put_blob: Callable[[bytes], str],
    device_slot: Callable[[], AbstractContextManager[None]] = nullcontext,
) -> pa.Table:
    """MIXCUBE_MASKS rows for `faces` (MIXCUBE_FACES rows with their boxes), in order.

    `masker` gives the (lazily built) masker; `original_sha256` maps an original id to its image blob. The whole
    shard runs inside `device_slot` (a Prefect concurrency slot on the GPU)."""
    rows = []
    with device_slot():
        for face in faces:
            row = schemas.blank_row(schemas.MIXCUBE_MASKS, original_id=face["original_id"], masker=masker().model_id)
            try:
                boxes = [FaceBox(**b) for b in _listed(face["boxes"])]
                mask = masker().mask(decode_rgb(load_blob(original_sha256[str_cell(face, "original_id")])), boxes)
            except Exception as exc:
                rows.append({**row, "status": STATUS_FAILED, "error": "masker_error", "detail": error_text(exc)})
                continue
            coverage = float((mask > 0).mean())
            if coverage == 0.0:
                rows.append({**row, "status": STATUS_FAILED, "error": "empty_mask", "detail": "mask is empty"})
                continue
            mask_sha = put_blob(mask_png(mask))
            rows.append({**row, "status": STATUS_OK, "mask_sha256": mask_sha, "coverage": coverage})
    return schemas.from_rows(rows, schemas.MIXCUBE_MASKS)


def _listed(boxes: object) -> list[Any]:
    """A MIXCUBE_FACES row's `boxes` (a list of {x, y, w, h, score}); the TypeError iterating anything else gives."""
    if not isinstance(boxes, list):
        raise TypeError(f"'{type(boxes).__name__}' object is not iterable")
    return boxes
