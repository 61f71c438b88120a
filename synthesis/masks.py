"""Inpainting masks from face boxes (MixCuBe paper App. A.4).

The paper prompts Segment Anything with the YuNet face boxes and feathers the mask with a Gaussian blur. Backends:

- `sam` (production): `segment_anything.SamPredictor`, all boxes of an image in one `predict_torch` call. The
  checkpoint is loaded with `map_location` (the library's own loader has none, so
  checkpoints saved from CUDA tensors fail on CPU-only machines).
- `ellipse` (embedded default): a filled ellipse around each box.
- `grabcut` (embedded default): OpenCV GrabCut seeded by each box.

Every masker returns the UNION of its per-box masks as an HxW uint8 image (255 = inpaint), feathered with
`cv2.GaussianBlur` (App. A.4: "Gaussian blur is applied after mask generation to feather the edges"). `mask_png`
encodes it for the blob store.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import threading
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, cast

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image
from pydantic import Field, field_validator

from data.clients.devices import resolve_device
from data.stage import BackendConfig, require, required_file
from data.workspace import file_sha256
from synthesis.faces import FaceBox, check_rgb

log = logging.getLogger(__name__)


class _FeatheredMask(BackendConfig["Masker"]):
    feather_kernel: int = Field(
        default=21,
        ge=1,
        description="Side of the Gaussian blur kernel that feathers the mask edge (App. A.4); odd, 1 = no feather.",
    )
    feather_sigma: float = Field(
        default=0.0, ge=0.0, description="Blur sigma; 0 lets OpenCV derive it from the kernel."
    )

    @field_validator("feather_kernel")
    @classmethod
    def _odd(cls, value: int) -> int:
        if value % 2 == 0:
            raise ValueError(f"feather_kernel must be odd (cv2.GaussianBlur needs an odd kernel), got {value}")
        return value


class SamMaskConfig(_FeatheredMask):
    """Segment Anything prompted with the face boxes, the paper's masker (App. A.4)."""

    backend: Literal["sam"] = "sam"
    checkpoint: str = Field(description="The SAM state-dict checkpoint, e.g. sam_vit_h_4b8939.pth. Required.")
    model_type: Literal["vit_h", "vit_l", "vit_b"] = Field(
        default="vit_h", description="The architecture of `checkpoint` (segment_anything.sam_model_registry key)."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="auto: CUDA when a GPU is usable, else CPU. cuda without a usable GPU is an error."
    )

    def build(self) -> SamMasker:
        """Checks the checkpoint and the device now; the model loads on first use."""
        path = required_file(
            self.checkpoint,
            "masks: SAM checkpoint",
            "SamMaskConfig.checkpoint",
            "a checkpoint file",
            f"Give the segment-anything {self.model_type} checkpoint, or use the 'ellipse' or 'grabcut' backend.",
        )
        require("segment_anything", "synthesis")
        path = path.resolve()
        # The file name and hash, never the machine path: the id goes into published tables.
        return SamMasker(self, f"sam:{self.model_type}:{path.name}:sha256-{file_sha256(path)[:12]}", checkpoint=path)


class EllipseMaskConfig(_FeatheredMask):
    """A filled ellipse per face box: offline, no model."""

    backend: Literal["ellipse"] = "ellipse"
    scale: float = Field(
        default=1.15,
        gt=0.0,
        description="Semi-axes are scale x (w/2, h/2): 1 is the ellipse inscribed in the box, ~1.41 passes through "
        "its corners. Slightly above 1 takes in the hairline and chin a tight face box cuts off.",
    )

    def build(self) -> EllipseMasker:
        return EllipseMasker(self)


class GrabCutMaskConfig(_FeatheredMask):
    """OpenCV GrabCut per face box: offline, follows the head's outline better than an ellipse."""

    backend: Literal["grabcut"] = "grabcut"
    iterations: int = Field(default=3, ge=1, description="GrabCut iterations.")
    margin: float = Field(
        default=0.25,
        ge=0.0,
        description="Band around the box, as a fraction of its longer side, that may still be foreground (hair, "
        "neck). A second band of the same width outside it is certain background.",
    )

    def build(self) -> GrabCutMasker:
        return GrabCutMasker(self)


MaskConfig = Annotated[SamMaskConfig | EllipseMaskConfig | GrabCutMaskConfig, Field(discriminator="backend")]


class Masker(Protocol):
    name: str
    model_id: str  # names the masker, its model and feathering, recorded next to each mask

    def box_masks(self, image_rgb: npt.NDArray[np.uint8], boxes: list[FaceBox]) -> npt.NDArray[np.bool_]:
        """(len(boxes), H, W) bool, one unfeathered mask per box (boxes are clipped to the image first)."""
        ...

    def mask(
        self, image_rgb: npt.NDArray[np.uint8], boxes: list[FaceBox], *, feather: bool = True
    ) -> npt.NDArray[np.uint8]:
        """HxW uint8 0..255: the union of the per-box masks, feathered unless feather=False (then 0 or 255)."""
        ...


def feather_mask(mask: npt.NDArray[np.uint8], kernel: int, sigma: float = 0.0) -> npt.NDArray[np.uint8]:
    """Soften a uint8 mask's edge with a Gaussian blur (App. A.4); kernel 1 leaves it as it is."""
    if kernel <= 1:
        return mask
    # OpenCV's stubs type every result as MatLike; a blur keeps the input's dtype.
    return cast(npt.NDArray[np.uint8], cv2.GaussianBlur(mask, (kernel, kernel), sigma))


def clip_boxes(boxes: list[FaceBox], height: int, width: int) -> list[FaceBox]:
    """The boxes cut to the image; boxes wholly outside it are dropped."""
    return [c for c in (b.clip(width, height) for b in boxes) if c is not None]


class _MaskerBase:
    """Union and feathering shared by every backend; subclasses implement `_masks` for boxes inside the image."""

    name: str
    model_id: str
    config: _FeatheredMask  # each backend's own config (below)

    def _masks(self, image: npt.NDArray[np.uint8], boxes: list[FaceBox]) -> npt.NDArray[np.bool_]:
        raise NotImplementedError

    def box_masks(self, image_rgb: npt.NDArray[np.uint8], boxes: list[FaceBox]) -> npt.NDArray[np.bool_]:
        image = check_rgb(image_rgb)
        inside = clip_boxes(list(boxes), *image.shape[:2])
        if not inside:
            return np.zeros((0, *image.shape[:2]), dtype=bool)
        return self._masks(image, inside)

    def mask(
        self, image_rgb: npt.NDArray[np.uint8], boxes: list[FaceBox], *, feather: bool = True
    ) -> npt.NDArray[np.uint8]:
        image = check_rgb(image_rgb)
        per_box = self.box_masks(image, boxes)
        union = np.zeros(image.shape[:2], dtype=np.uint8)
        if len(per_box):
            union[per_box.any(axis=0)] = 255
        if not feather:
            return union
        return feather_mask(union, self.config.feather_kernel, self.config.feather_sigma)

    @property
    def _feather_id(self) -> str:
        return f"feather={self.config.feather_kernel},{self.config.feather_sigma:g}"


def _ellipse(height: int, width: int, box: FaceBox, scale: float) -> npt.NDArray[np.bool_]:
    out = np.zeros((height, width), dtype=np.uint8)
    # 4 fractional bits: the centre of an odd-sized box sits on a half pixel.
    shift = 4
    centre = (round((box.x + box.w / 2) * 2**shift), round((box.y + box.h / 2) * 2**shift))
    axes = (max(1, round(scale * box.w / 2 * 2**shift)), max(1, round(scale * box.h / 2 * 2**shift)))
    cv2.ellipse(out, centre, axes, 0, 0, 360, 1, thickness=-1, lineType=cv2.LINE_8, shift=shift)
    return out.astype(bool)


class EllipseMasker(_MaskerBase):
    name = "ellipse"
    config: EllipseMaskConfig

    def __init__(self, config: EllipseMaskConfig) -> None:
        self.config = config
        self.model_id = f"ellipse:scale={config.scale:g}:{self._feather_id}"

    def _masks(self, image: npt.NDArray[np.uint8], boxes: list[FaceBox]) -> npt.NDArray[np.bool_]:
        height, width = image.shape[:2]
        return np.stack([_ellipse(height, width, b, self.config.scale) for b in boxes])


class GrabCutMasker(_MaskerBase):
    name = "grabcut"
    config: GrabCutMaskConfig

    def __init__(self, config: GrabCutMaskConfig) -> None:
        self.config = config
        self.model_id = f"grabcut:iterations={config.iterations}:margin={config.margin:g}:{self._feather_id}"

    def _one(self, bgr: npt.NDArray[np.uint8], box: FaceBox) -> npt.NDArray[np.bool_]:
        """GrabCut on a crop around the box, so the cost follows the face's size, not the photo's.

        Seeds: the middle of the box (half-size ellipse) is certain face, the rest of the box probable face, the
        margin band probable background, and the outer band certain background.
        """
        height, width = bgr.shape[:2]
        band = max(2, round(self.config.margin * max(box.w, box.h)))
        x0, y0 = max(0, box.x - 2 * band), max(0, box.y - 2 * band)
        x1, y1 = min(width, box.x + box.w + 2 * band), min(height, box.y + box.h + 2 * band)
        seeds = np.full((y1 - y0, x1 - x0), cv2.GC_BGD, dtype=np.uint8)
        ix0, iy0 = max(0, box.x - band) - x0, max(0, box.y - band) - y0
        ix1, iy1 = min(width, box.x + box.w + band) - x0, min(height, box.y + box.h + band) - y0
        seeds[iy0:iy1, ix0:ix1] = cv2.GC_PR_BGD
        bx, by = box.x - x0, box.y - y0
        seeds[by : by + box.h, bx : bx + box.w] = cv2.GC_PR_FGD
        local = FaceBox(x=bx, y=by, w=box.w, h=box.h, score=box.score)
        seeds[_ellipse(seeds.shape[0], seeds.shape[1], local, 0.5)] = cv2.GC_FGD
        out = np.zeros((height, width), dtype=bool)
        if not np.isin(seeds, (cv2.GC_BGD, cv2.GC_PR_BGD)).any():
            # The box fills the whole image: GrabCut has no background to learn from.
            log.warning("grabcut: box %s leaves no background in a %dx%d image; using its ellipse", box, width, height)
            return _ellipse(height, width, box, 1.0)
        bgd, fgd = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
        crop = np.ascontiguousarray(bgr[y0:y1, x0:x1])
        seeds, _, _ = cv2.grabCut(  # type: ignore[call-overload]  # rect None: unused with a mask; stubs want one
            crop, seeds, None, bgd, fgd, self.config.iterations, cv2.GC_INIT_WITH_MASK
        )
        out[y0:y1, x0:x1] = (seeds == cv2.GC_FGD) | (seeds == cv2.GC_PR_FGD)
        return out

    def _masks(self, image: npt.NDArray[np.uint8], boxes: list[FaceBox]) -> npt.NDArray[np.bool_]:
        bgr = cast(npt.NDArray[np.uint8], cv2.cvtColor(image, cv2.COLOR_RGB2BGR))  # (stubs: MatLike)
        return np.stack([self._one(bgr, b) for b in boxes])


def load_sam_checkpoint(sam: Any, path: str | Path) -> Any:
    """Load a state-dict checkpoint into a built `Sam` and return it in eval mode.

    `map_location="cpu"`: a checkpoint saved from CUDA tensors then loads on a CPU-only machine (segment_anything's
    own loader calls torch.load without it). `weights_only=True` refuses pickled code in the file.
    """
    torch = require("torch", "synthesis")
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ValueError(
            f"masks: {path.name} (SamMaskConfig.checkpoint) is not a plain state-dict checkpoint: {exc}"
        ) from None
    if not isinstance(state, dict):
        raise ValueError(
            f"masks: {path.name} (SamMaskConfig.checkpoint) holds a {type(state).__name__}, not a state dict"
        )
    try:
        sam.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise ValueError(
            f"masks: {path.name} (SamMaskConfig.checkpoint) does not fit this SAM architecture; check "
            f"SamMaskConfig.model_type. {' '.join(first[:3])}"
        ) from None
    return sam.eval()


_models: dict[tuple[str, str, int, int, str], Any] = {}
_models_lock = threading.Lock()


def _load_sam(model_type: str, path: Path, device: str) -> Any:
    """One SAM per (architecture, checkpoint, device) in this process."""
    stat = os.stat(path)
    key = (model_type, str(path), stat.st_size, stat.st_mtime_ns, device)  # a rewritten file is loaded again
    with _models_lock:
        if key not in _models:
            segment_anything = require("segment_anything", "synthesis")
            # checkpoint=None: the library's loader has no map_location; load_sam_checkpoint does it instead.
            sam = segment_anything.sam_model_registry[model_type](checkpoint=None)
            _models[key] = load_sam_checkpoint(sam, path).to(device)
        return _models[key]


class SamMasker(_MaskerBase):
    name = "sam"
    config: SamMaskConfig

    def __init__(self, config: SamMaskConfig, model_id: str, sam: Any = None, checkpoint: Path | None = None) -> None:
        self.config = config
        self.model_id = f"{model_id}:{self._feather_id}"
        self.device, _ = resolve_device(config.device, owner="masks: SamMaskConfig", extra="synthesis")
        self._sam = sam.to(self.device).eval() if sam is not None else None
        self._checkpoint = checkpoint
        self._predictor: Any = None
        self._lock = threading.Lock()  # the predictor holds one image's embedding at a time

    def _get_predictor(self) -> Any:
        if self._predictor is None:
            segment_anything = require("segment_anything", "synthesis")
            if self._sam is None:
                assert self._checkpoint is not None
                self._sam = _load_sam(self.config.model_type, self._checkpoint, self.device)
            self._predictor = segment_anything.SamPredictor(self._sam)
        return self._predictor

    def _masks(self, image: npt.NDArray[np.uint8], boxes: list[FaceBox]) -> npt.NDArray[np.bool_]:
        torch = require("torch", "synthesis")
        with self._lock, torch.inference_mode():
            predictor = self._get_predictor()
            predictor.set_image(image, image_format="RGB")
            try:
                # All boxes in one decoder call: XYXY in original pixels, mapped to SAM's input frame.
                xyxy = torch.tensor([b.xyxy() for b in boxes], dtype=torch.float, device=predictor.device)
                prompts = predictor.transform.apply_boxes_torch(xyxy, image.shape[:2])
                masks, _, _ = predictor.predict_torch(
                    point_coords=None, point_labels=None, boxes=prompts, multimask_output=False
                )
            finally:
                predictor.reset_image()  # frees the image embedding between calls
        found: npt.NDArray[np.bool_] = masks[:, 0].cpu().numpy().astype(bool)
        return found


def sam_masker_from_model(sam: Any, config: SamMaskConfig, model_id: str = "sam:in-memory") -> SamMasker:
    """A SAM masker around an already built `Sam` (tests, notebooks); `config.checkpoint` is not read."""
    return SamMasker(config, model_id, sam=sam)


def build_masker(config: SamMaskConfig | EllipseMaskConfig | GrabCutMaskConfig) -> Masker:
    """`config.build()`: the masker. SAM checks its checkpoint and device now and loads the model on first use."""
    return config.build()


def mask_png(mask: npt.NDArray[np.uint8]) -> bytes:
    """A uint8 HxW mask as PNG bytes (mode L), for the blob store."""
    if not isinstance(mask, np.ndarray) or mask.dtype != np.uint8 or mask.ndim != 2:
        raise ValueError(f"mask_png: expected an HxW uint8 array, got {getattr(mask, 'shape', type(mask))}")
    buffer = io.BytesIO()
    Image.fromarray(mask).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def mask_from_png(data: bytes) -> npt.NDArray[np.uint8]:
    """The HxW uint8 mask of a `mask_png` blob."""
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("L"), dtype=np.uint8).copy()
