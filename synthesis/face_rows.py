"""The MixCuBe faces stage, one shard at a time (MixCuBe paper App. A.4).

Every collected original must show at least one detectable face: each original is one MIXCUBE_FACES row, its boxes
or why it has none (`not_an_image`, `detector_error`, `no_face`). A failing image or model is that original's row,
never the stage's end.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from PIL import Image

from data import schemas
from data.row_errors import error_text
from data.schemas import STATUS_FAILED, STATUS_OK, str_cell
from synthesis.faces import FaceDetector


def decode_rgb(data: bytes) -> npt.NDArray[np.uint8]:
    """An image blob as the HxWx3 uint8 RGB array the detectors and maskers take."""
    with Image.open(io.BytesIO(data)) as image:
        return np.array(image.convert("RGB"))


def faces_table(
    originals: Sequence[Mapping[str, object]], detector: Callable[[], FaceDetector], load_blob: Callable[[str], bytes]
) -> pa.Table:
    """MIXCUBE_FACES rows for `originals` (MIXCUBE_ORIGINALS rows: `original_id`, `sha256`), in order.

    `detector` gives the (lazily built) detector: a shard without originals never builds it."""
    rows = []
    for original in originals:
        row = schemas.blank_row(
            schemas.MIXCUBE_FACES, original_id=original["original_id"], detector=detector().model_id
        )
        try:
            pixels = decode_rgb(load_blob(str_cell(original, "sha256")))
        except Exception as exc:  # Pillow raises many types; the class is the detail
            rows.append({**row, "status": STATUS_FAILED, "error": "not_an_image", "detail": error_text(exc)})
            continue
        try:
            boxes = detector().detect(pixels)
        except Exception as exc:  # a failing model is this original's row, not the stage's end
            rows.append({**row, "status": STATUS_FAILED, "error": "detector_error", "detail": error_text(exc)})
            continue
        if not boxes:
            rows.append({**row, "status": STATUS_FAILED, "error": "no_face", "detail": "no face detected"})
            continue
        rows.append({**row, "status": STATUS_OK, "boxes": [b.model_dump() for b in boxes]})
    return schemas.from_rows(rows, schemas.MIXCUBE_FACES)
