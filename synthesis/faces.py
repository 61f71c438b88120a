"""Face detection for MixCuBe masking (MixCuBe paper App. A.4).

The paper feeds face boxes from OpenCV's YuNet into Segment Anything. Two backends:

- `yunet` (production): `cv2.FaceDetectorYN` on a YuNet ONNX file given by path (optionally checked against a
  sha256). A missing file is an error, never a silent fall back to another detector. `fetch_yunet` downloads the
  pinned opencv_zoo model for online users.
- `haar` (embedded default): a Haar cascade that ships inside opencv-python 4.12 (`cv2.data.haarcascades`).

Both return at most `max_faces` boxes, best first, in pixels of the original image.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Literal, Protocol

import cv2
import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from data.stage import BackendConfig, required_file
from data.workspace import file_sha256

log = logging.getLogger(__name__)

# App. A.4: "filtering out the faces with confidence score lower than 0.65 and selecting at most three faces with top
# confidence".
PAPER_MIN_CONFIDENCE = 0.65
PAPER_MAX_FACES = 3

# opencv_zoo's YuNet 2023mar, pinned to a commit; the sha256 is checked after download, so the URL may move but the
# bytes cannot change unnoticed. Git-LFS file: media.githubusercontent.com serves the content, not the pointer.
YUNET_FILE = "face_detection_yunet_2023mar.onnx"
YUNET_URL = (
    "https://media.githubusercontent.com/media/opencv/opencv_zoo/82b38c8f98e7b52aa171400f3e4c722352d0669f/"
    f"models/face_detection_yunet/{YUNET_FILE}"
)
YUNET_SHA256 = "8f2383e4dd3cfbb4553ea8718107fc0423210dc964f9f4280604804ed2552fa4"
YUNET_SIZE = 232_589


class FaceBox(BaseModel):
    """One face: an integer box in pixels of the original image, and the detector's confidence."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    x: int = Field(ge=0)
    y: int = Field(ge=0)
    w: int = Field(ge=1)
    h: int = Field(ge=1)
    score: float

    def xyxy(self) -> tuple[int, int, int, int]:
        """(x0, y0, x1, y1) with x1 = x + w exclusive, the box format SAM prompts take."""
        return self.x, self.y, self.x + self.w, self.y + self.h

    @property
    def area(self) -> int:
        return self.w * self.h

    def clip(self, width: int, height: int) -> FaceBox | None:
        """This box cut to a width x height image, or None when nothing of it lies inside."""
        x0, y0, x1, y1 = max(0, self.x), max(0, self.y), min(width, self.x + self.w), min(height, self.y + self.h)
        if x1 <= x0 or y1 <= y0:
            return None
        return FaceBox(x=x0, y=y0, w=x1 - x0, h=y1 - y0, score=self.score)


def box_from_float(x: float, y: float, w: float, h: float, score: float, width: int, height: int) -> FaceBox | None:
    """A detector's float box as whole pixels (floor/ceil, so the box still covers the face), clipped to the image."""
    x0, y0 = max(0, math.floor(x)), max(0, math.floor(y))
    x1, y1 = min(width, math.ceil(x + w)), min(height, math.ceil(y + h))
    if x1 <= x0 or y1 <= y0:
        return None
    return FaceBox(x=x0, y=y0, w=x1 - x0, h=y1 - y0, score=float(score))


def select_faces(boxes: Iterable[FaceBox], min_confidence: float, max_faces: int) -> list[FaceBox]:
    """The App. A.4 rule: drop boxes under `min_confidence`, keep the `max_faces` most confident.

    Ties (Haar gives every box 1.0) go to the larger box, then top-left first, so the order is deterministic.
    Scores are compared in float32, the detectors' own precision: 0.65 as a float32 score must pass a 0.65 bar.
    """
    bar = np.float32(min_confidence)
    kept = [b for b in boxes if np.float32(b.score) >= bar]
    kept.sort(key=lambda b: (-b.score, -b.area, b.y, b.x))
    return kept[:max_faces]


def check_rgb(image_rgb: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """The image as a contiguous HxWx3 uint8 array, or a ValueError saying what it is instead."""
    if not isinstance(image_rgb, np.ndarray) or image_rgb.dtype != np.uint8 or image_rgb.ndim != 3:
        raise ValueError(f"expected an HxWx3 uint8 RGB array, got {getattr(image_rgb, 'dtype', type(image_rgb))}")
    if image_rgb.shape[2] != 3 or min(image_rgb.shape[:2]) < 1:
        raise ValueError(f"expected an HxWx3 uint8 RGB array, got shape {image_rgb.shape}")
    return np.ascontiguousarray(image_rgb)


class YuNetFaceConfig(BackendConfig["FaceDetector"]):
    """OpenCV YuNet (`cv2.FaceDetectorYN`), the detector the paper uses (App. A.4)."""

    backend: Literal["yunet"] = "yunet"
    model_path: str = Field(
        description=f"The YuNet ONNX file, e.g. opencv_zoo's {YUNET_FILE} (`fetch_yunet` downloads it). Required: a "
        "missing file is an error, never a fall back to another detector."
    )
    model_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-fA-F]{64}$",
        description=f"When set, the file's sha256 must match (opencv_zoo 2023mar: {YUNET_SHA256}).",
    )
    min_confidence: float = Field(default=PAPER_MIN_CONFIDENCE, ge=0.0, le=1.0, description="App. A.4: 0.65.")
    max_faces: int = Field(default=PAPER_MAX_FACES, ge=1, description="App. A.4: at most 3, by confidence.")
    nms_threshold: float = Field(default=0.3, ge=0.0, le=1.0, description="IoU above which YuNet's NMS merges boxes.")

    def build(self) -> YuNetFaceDetector:
        """The model file is checked and loaded now, so a bad path fails before any image."""
        return YuNetFaceDetector(self)


class HaarFaceConfig(BackendConfig["FaceDetector"]):
    """A Haar cascade shipped with opencv-python: the offline default. It gives no confidence (every box scores 1.0)."""

    backend: Literal["haar"] = "haar"
    cascade: str = Field(
        default="haarcascade_frontalface_default.xml",
        description="A file name in cv2.data.haarcascades (opencv-python 4.12 ships them; 5.0 wheels do not), or "
        "an absolute path to a cascade XML.",
    )
    scale_factor: float = Field(default=1.1, gt=1.0, description="Pyramid step between detection scales.")
    min_neighbors: int = Field(default=5, ge=0, description="Overlapping hits a box needs to be kept.")
    min_size: int = Field(default=24, ge=1, description="Smallest face side in pixels.")
    max_faces: int = Field(default=PAPER_MAX_FACES, ge=1, description="At most this many, largest first.")

    def build(self) -> HaarFaceDetector:
        """The cascade file is checked and loaded now, so a bad path fails before any image."""
        return HaarFaceDetector(self)


FaceConfig = Annotated[YuNetFaceConfig | HaarFaceConfig, Field(discriminator="backend")]


class FaceDetector(Protocol):
    name: str
    model_id: str  # names the detector and its model file, recorded next to each mask

    def detect(self, image_rgb: npt.NDArray[np.uint8]) -> list[FaceBox]:
        """At most max_faces boxes in pixels of `image_rgb` (HxWx3 uint8 RGB), best first."""
        ...


class YuNetFaceDetector:
    name = "yunet"

    def __init__(self, config: YuNetFaceConfig) -> None:
        self.config = config
        path = required_file(
            config.model_path,
            "face detection: YuNet model",
            "YuNetFaceConfig.model_path",
            "an ONNX file",
            f"Download {YUNET_FILE} (synthesis.faces.fetch_yunet, or {YUNET_URL}) or use the 'haar' backend.",
        )
        digest = file_sha256(path.resolve())
        if config.model_sha256 is not None and digest != config.model_sha256.lower():
            raise ValueError(
                f"face detection: YuNet model {path.name} has sha256 {digest}, but YuNetFaceConfig.model_sha256 is "
                f"{config.model_sha256.lower()}: wrong or corrupted file."
            )
        # The file name and hash, never the machine path: the id goes into published tables.
        self.model_id = f"yunet:{path.name}:sha256-{digest[:12]}"
        # OpenCV keeps scores strictly above its threshold (NMSBoxes); the App. A.4 bar is inclusive, so OpenCV gets
        # a hair less and select_faces applies the exact bar. top_k bounds the candidates before NMS.
        threshold = float(np.nextafter(np.float32(config.min_confidence), np.float32(0)))
        try:
            self._detector = cv2.FaceDetectorYN.create(
                str(path), "", (320, 320), score_threshold=threshold, nms_threshold=config.nms_threshold, top_k=5000
            )
        except cv2.error as exc:
            raise ValueError(
                f"face detection: OpenCV cannot load {path.name} (YuNetFaceConfig.model_path) as a YuNet ONNX model: "
                f"{str(exc).strip().splitlines()[-1]}"
            ) from None
        self._lock = threading.Lock()  # setInputSize + detect mutate the one detector

    def detect(self, image_rgb: npt.NDArray[np.uint8]) -> list[FaceBox]:
        image = check_rgb(image_rgb)
        height, width = image.shape[:2]
        bgr = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
        with self._lock:
            self._detector.setInputSize((width, height))  # must match each image, or detect() asserts
            _, faces = self._detector.detect(bgr)
        if faces is None:
            return []
        # Rows: x, y, w, h, 5 landmarks (x, y), score. Boxes may reach past the border: clip them.
        rows: npt.NDArray[np.integer | np.floating] = faces  # (its stubs type a row of it as a scalar)
        boxes = (box_from_float(row[0], row[1], row[2], row[3], row[14], width, height) for row in rows)
        return select_faces((b for b in boxes if b is not None), self.config.min_confidence, self.config.max_faces)


def resolve_cascade(config: HaarFaceConfig) -> Path:
    """The cascade XML: an absolute path as given, a bare name inside cv2.data.haarcascades."""
    path = Path(config.cascade).expanduser()
    if not path.is_absolute():
        folder = getattr(getattr(cv2, "data", None), "haarcascades", "")
        path = Path(folder) / config.cascade
    if not path.is_file():
        folder = path.parent
        shipped = sorted(p.name for p in folder.glob("haarcascade_*.xml")) if folder.is_dir() else []
        raise FileNotFoundError(
            f"face detection: Haar cascade {config.cascade!r} (HaarFaceConfig.cascade) not found at {path}. "
            f"Shipped with this OpenCV: {', '.join(shipped) or 'none (opencv-python 5.0 wheels ship no cascades)'}."
        )
    return path


class HaarFaceDetector:
    name = "haar"

    def __init__(self, config: HaarFaceConfig) -> None:
        self.config = config
        path = resolve_cascade(config)
        problem = f"face detection: {path.name} (HaarFaceConfig.cascade) is not a loadable Haar cascade."
        try:
            self._cascade = cv2.CascadeClassifier(str(path))
        except (cv2.error, SystemError):  # a malformed XML raises from inside the binding
            raise ValueError(problem) from None
        if self._cascade.empty():  # a well-formed XML that holds no cascade
            raise ValueError(problem)
        self.model_id = f"haar:{path.name}:sha256-{file_sha256(path.resolve())[:12]}"
        self._lock = threading.Lock()  # one classifier object shared by callers

    def detect(self, image_rgb: npt.NDArray[np.uint8]) -> list[FaceBox]:
        image = check_rgb(image_rgb)
        height, width = image.shape[:2]
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
        size = self.config.min_size
        with self._lock:
            found = self._cascade.detectMultiScale(
                gray, scaleFactor=self.config.scale_factor, minNeighbors=self.config.min_neighbors, minSize=(size, size)
            )
        # A cascade has no calibrated confidence: every box scores 1.0, so select_faces keeps the largest boxes
        # (the most prominent people, the intent of App. A.4) and min_confidence 0 never drops one.
        boxes = (  # `found` is `()` when none
            box_from_float(float(x), float(y), float(w), float(h), 1.0, width, height) for x, y, w, h in found
        )
        return select_faces((b for b in boxes if b is not None), 0.0, self.config.max_faces)


def build_face_detector(config: YuNetFaceConfig | HaarFaceConfig) -> FaceDetector:
    """`config.build()`: the detector, with its model file checked and loaded now, so a bad path fails before any
    image."""
    return config.build()


def fetch_yunet(dest: str | Path, url: str = YUNET_URL, sha256: str = YUNET_SHA256, timeout: float = 60.0) -> Path:
    """Download the pinned YuNet model to `dest` (a file path, or a folder to put YUNET_FILE in) and check its sha256.

    For online users; an existing file with the right hash is kept. The download goes to a `.part` file that is
    renamed only after the hash matches, so `dest` never holds a partial or wrong model.
    """
    dest = Path(dest).expanduser()
    if dest.is_dir():
        dest = dest / YUNET_FILE
    if dest.is_file() and file_sha256(dest.resolve()) == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=timeout) as response, part.open("wb") as handle:
        for chunk in iter(lambda: response.read(1 << 16), b""):
            digest.update(chunk)
            handle.write(chunk)
    if digest.hexdigest() != sha256:
        part.unlink(missing_ok=True)
        raise ValueError(f"fetch_yunet: {url} gave sha256 {digest.hexdigest()}, expected {sha256}")
    os.replace(part, dest)
    log.info("fetched %s to %s", YUNET_FILE, dest)
    return dest
