"""Face detection (YuNet on a tiny exported ONNX, Haar on the astronaut) and face masks (ellipse, GrabCut, tiny SAM)."""

from __future__ import annotations

import hashlib
import io
import math
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image
from pydantic import TypeAdapter, ValidationError
from skimage import data as skdata

from data.clients.devices import DeviceError
from synthesis.faces import (
    PAPER_MAX_FACES,
    PAPER_MIN_CONFIDENCE,
    FaceBox,
    FaceConfig,
    HaarFaceConfig,
    YuNetFaceConfig,
    build_face_detector,
    fetch_yunet,
    select_faces,
)
from synthesis.masks import (
    EllipseMaskConfig,
    GrabCutMaskConfig,
    MaskConfig,
    SamMaskConfig,
    build_masker,
    load_sam_checkpoint,
    mask_from_png,
    mask_png,
    sam_masker_from_model,
)
from tests.support.tiny_vision_models import (
    BBOX_LOG_SIZE,
    BBOX_OFFSET,
    FakeFace,
    build_tiny_sam,
    build_tiny_yunet_onnx,
    make_tiny_sam,
)

FOUR_FACES = (
    FakeFace(16, 1, 1, 0.95),  # one big face top-left, and three small ones in the other corners
    FakeFace(8, 6, 6, 0.8),
    FakeFace(8, 1, 6, 0.7),
    FakeFace(8, 6, 1, 0.5),
)


def expected_xywh(face: FakeFace) -> tuple[float, float, float, float]:
    """OpenCV's YuNet decoding: centre = (cell + offset) * stride, side = exp(log size) * stride."""
    side = math.exp(BBOX_LOG_SIZE) * face.stride
    cx, cy = (face.col + BBOX_OFFSET) * face.stride, (face.row + BBOX_OFFSET) * face.stride
    return cx - side / 2, cy - side / 2, side, side


def assert_box_matches(box: FaceBox, xywh: tuple[float, float, float, float], width: int, height: int) -> None:
    """Each edge within a pixel of the decoded float box clipped to the image."""
    x, y, w, h = xywh
    want = (max(0.0, x), max(0.0, y), min(float(width), x + w), min(float(height), y + h))
    for got, expected in zip(box.xyxy(), want, strict=True):
        assert abs(got - expected) <= 1.0, (box, want)


def scene(height: int = 64, width: int = 64) -> np.ndarray:
    return (np.random.default_rng(1).random((height, width, 3)) * 255).astype(np.uint8)


# --- YuNet ---------------------------------------------------------------------------------------------------------


def test_yunet_returns_the_face_the_fake_network_encodes(tmp_path: Path) -> None:
    model = build_tiny_yunet_onnx(tmp_path / "yunet.onnx")
    detector = build_face_detector(YuNetFaceConfig(model_path=str(model)))
    faces = detector.detect(scene())
    assert len(faces) == 1
    assert_box_matches(faces[0], expected_xywh(FakeFace(16, 1, 1, 1.0)), 64, 64)
    assert faces[0].score == pytest.approx(1.0, abs=1e-6)
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    assert detector.name == "yunet"
    assert detector.model_id == f"yunet:yunet.onnx:sha256-{digest[:12]}"
    assert str(tmp_path) not in detector.model_id  # the id is published: no machine paths


def test_yunet_keeps_the_most_confident_faces_over_the_bar(tmp_path: Path) -> None:
    model = str(build_tiny_yunet_onnx(tmp_path / "yunet.onnx", FOUR_FACES))
    ranked = sorted(FOUR_FACES, key=lambda f: -f.score)

    # App. A.4 defaults: score >= 0.65, at most 3, by confidence.
    config = YuNetFaceConfig(model_path=model)
    assert (config.min_confidence, config.max_faces) == (PAPER_MIN_CONFIDENCE, PAPER_MAX_FACES) == (0.65, 3)
    faces = build_face_detector(config).detect(scene())
    kept = [f for f in ranked if f.score >= 0.65][:3]
    assert [round(b.score, 4) for b in faces] == [f.score for f in kept]
    for box, face in zip(faces, kept, strict=True):
        assert_box_matches(box, expected_xywh(face), 64, 64)

    two = build_face_detector(YuNetFaceConfig(model_path=model, max_faces=2)).detect(scene())
    assert two == faces[:2]
    everything = build_face_detector(YuNetFaceConfig(model_path=model, min_confidence=0.3, max_faces=10)).detect(
        scene()
    )
    assert [round(b.score, 4) for b in everything] == [f.score for f in ranked]


def test_yunet_min_confidence_above_the_score_drops_the_face(tmp_path: Path) -> None:
    model = str(build_tiny_yunet_onnx(tmp_path / "yunet.onnx", (FakeFace(16, 1, 1, 0.9),)))
    assert len(build_face_detector(YuNetFaceConfig(model_path=model, min_confidence=0.85)).detect(scene())) == 1
    assert build_face_detector(YuNetFaceConfig(model_path=model, min_confidence=0.95)).detect(scene()) == []


def test_yunet_sets_the_input_size_per_image_and_clips_boxes(tmp_path: Path) -> None:
    model = str(build_tiny_yunet_onnx(tmp_path / "yunet.onnx", FOUR_FACES))
    detector = build_face_detector(YuNetFaceConfig(model_path=model, min_confidence=0.3, max_faces=10))
    # 50 wide, 40 high (YuNet pads it to 64x64): the big face runs past the bottom edge, the face centred at
    # (52, 12) is cut at the right edge, and those centred at (52, 52) and (12, 52) lie wholly outside.
    faces = detector.detect(scene(height=40, width=50))
    ranked = sorted(FOUR_FACES, key=lambda f: -f.score)
    inside = [f for f in ranked if expected_xywh(f)[0] < 50 and expected_xywh(f)[1] < 40]
    assert len(inside) == 2  # the layout this test is about
    assert [round(b.score, 4) for b in faces] == [f.score for f in inside]
    for box, face in zip(faces, inside, strict=True):
        assert box.x + box.w <= 50 and box.y + box.h <= 40
        assert_box_matches(box, expected_xywh(face), 50, 40)
    assert faces[0].y + faces[0].h == 40  # clipped, not dropped
    # The same detector on a full-size image afterwards: the input size follows the image.
    assert len(detector.detect(scene())) == len(FOUR_FACES)


def test_yunet_model_file_errors_are_clear(tmp_path: Path) -> None:
    model = build_tiny_yunet_onnx(tmp_path / "yunet.onnx")
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    assert build_face_detector(YuNetFaceConfig(model_path=str(model), model_sha256=digest.upper())).detect(scene())

    with pytest.raises(ValueError, match="model_sha256") as info:
        build_face_detector(YuNetFaceConfig(model_path=str(model), model_sha256="0" * 64))
    assert digest in str(info.value)

    with pytest.raises(FileNotFoundError, match=r"YuNetFaceConfig\.model_path"):
        build_face_detector(YuNetFaceConfig(model_path=str(tmp_path / "missing.onnx")))
    with pytest.raises(FileNotFoundError, match="folder"):
        build_face_detector(YuNetFaceConfig(model_path=str(tmp_path)))

    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not an onnx model")
    with pytest.raises(ValueError, match=r"YuNetFaceConfig\.model_path"):
        build_face_detector(YuNetFaceConfig(model_path=str(garbage)))

    with pytest.raises(ValidationError):
        YuNetFaceConfig()  # type: ignore[call-arg]  # the model path is required: no implicit model
    with pytest.raises(ValidationError):
        YuNetFaceConfig(model_path=str(model), model_sha256="abc")


def test_fetch_yunet_verifies_the_download(tmp_path: Path) -> None:
    # A file:// URL stands in for the pinned https one: the same urllib path, no network.
    source = build_tiny_yunet_onnx(tmp_path / "source.onnx")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    models = tmp_path / "models"
    models.mkdir()
    fetched = fetch_yunet(models, url=source.as_uri(), sha256=digest)
    assert fetched == models / "face_detection_yunet_2023mar.onnx"
    assert fetched.read_bytes() == source.read_bytes()
    assert build_face_detector(YuNetFaceConfig(model_path=str(fetched), model_sha256=digest)).detect(scene())
    assert fetch_yunet(fetched, url="file:///nowhere/at/all.onnx", sha256=digest) == fetched  # kept, not refetched

    with pytest.raises(ValueError, match="sha256"):
        fetch_yunet(tmp_path / "other.onnx", url=source.as_uri(), sha256="0" * 64)
    assert not (tmp_path / "other.onnx").exists() and not (tmp_path / "other.onnx.part").exists()


def test_select_faces_applies_the_bar_inclusively_then_ranks(tmp_path: Path) -> None:
    def box(x: int, side: int, score: float) -> FaceBox:
        return FaceBox(x=x, y=0, w=side, h=side, score=score)

    on_bar = box(0, 10, float(np.float32(0.65)))  # a float32 detector score of exactly 0.65
    below = box(10, 50, 0.6499)
    small_tie, big_tie, best = box(20, 10, 0.8), box(40, 30, 0.8), box(60, 5, 0.99)
    picked = select_faces([on_bar, below, small_tie, big_tie, best], 0.65, 3)
    assert picked == [best, big_tie, small_tie]  # ties go to the larger box
    assert select_faces([on_bar, below], 0.65, 3) == [on_bar]
    assert select_faces([], 0.65, 3) == []


# --- Haar ----------------------------------------------------------------------------------------------------------


def test_haar_finds_the_astronauts_face(tmp_path: Path) -> None:
    image = skdata.astronaut()  # 512x512 RGB, one face
    height, width = image.shape[:2]
    detector = build_face_detector(HaarFaceConfig())
    faces = detector.detect(image)
    assert len(faces) == 1
    face = faces[0]
    assert face.score == 1.0  # a cascade has no confidence
    cx, cy = face.x + face.w / 2, face.y + face.h / 2
    assert width * 0.25 < cx < width * 0.75 and cy < height * 0.45  # the face is in the upper centre
    assert 0.05 * width < face.w < 0.5 * width

    # Located another way: OpenCV's eye cascade, run on its own, finds two eyes, both inside the face box, in its
    # upper half.
    eyes = cv2.CascadeClassifier(os.path.join(cv2.data.haarcascades, "haarcascade_eye.xml")).detectMultiScale(
        cv2.cvtColor(image, cv2.COLOR_RGB2GRAY), 1.1, 5, minSize=(8, 8)
    )
    assert len(eyes) >= 2
    for ex, ey, ew, eh in eyes:
        ecx, ecy = ex + ew / 2, ey + eh / 2
        assert face.x < ecx < face.x + face.w and face.y < ecy < face.y + face.h / 2 + face.h * 0.1

    # The RGB input is honoured: the same photo saved and read back through PIL gives the same box.
    path = tmp_path / "astronaut.png"
    Image.fromarray(image).save(path)
    assert detector.detect(np.asarray(Image.open(path).convert("RGB"))) == faces
    assert detector.model_id.startswith("haar:haarcascade_frontalface_default.xml:sha256-")


def test_haar_finds_nothing_on_flat_grey_and_checks_its_cascade(tmp_path: Path) -> None:
    detector = build_face_detector(HaarFaceConfig())
    assert detector.detect(np.full((200, 240, 3), 128, dtype=np.uint8)) == []
    with pytest.raises(FileNotFoundError, match=r"HaarFaceConfig\.cascade"):
        build_face_detector(HaarFaceConfig(cascade="no_such_cascade.xml"))
    copied = tmp_path / "frontal.xml"
    copied.write_bytes(Path(cv2.data.haarcascades, "haarcascade_frontalface_default.xml").read_bytes())
    assert build_face_detector(HaarFaceConfig(cascade=str(copied))).detect(skdata.astronaut())
    bad = tmp_path / "bad.xml"
    bad.write_text("<opencv_storage></opencv_storage>")
    with pytest.raises(ValueError, match="not a loadable Haar cascade"):
        build_face_detector(HaarFaceConfig(cascade=str(bad)))
    with pytest.raises(ValueError, match="HxWx3 uint8"):
        detector.detect(np.zeros((20, 20), dtype=np.uint8))


def test_face_configs_are_a_discriminated_union(tmp_path: Path) -> None:
    adapter = TypeAdapter(FaceConfig)
    assert isinstance(adapter.validate_python({"backend": "haar"}), HaarFaceConfig)
    yunet = adapter.validate_python({"backend": "yunet", "model_path": str(tmp_path / "m.onnx")})
    assert isinstance(yunet, YuNetFaceConfig) and yunet.nms_threshold == 0.3
    with pytest.raises(ValidationError):
        adapter.validate_python({"backend": "haar", "min_confidence": 0.5})  # extra fields are refused


# --- Ellipse and GrabCut masks ---------------------------------------------------------------------------------------

BOX_A = FaceBox(x=20, y=30, w=30, h=30, score=1.0)
BOX_B = FaceBox(x=100, y=50, w=30, h=40, score=0.9)


def centre(box: FaceBox) -> tuple[int, int]:
    """(row, col) of the box's centre pixel."""
    return box.y + box.h // 2, box.x + box.w // 2


def assert_union_feathered(masker: object, image: np.ndarray) -> None:
    """The behaviour every masker shares: union of the boxes, feathered edge, nothing far away."""
    hard = masker.mask(image, [BOX_A, BOX_B], feather=False)  # type: ignore[attr-defined]
    soft = masker.mask(image, [BOX_A, BOX_B])  # type: ignore[attr-defined]
    assert hard.shape == soft.shape == image.shape[:2] and hard.dtype == soft.dtype == np.uint8
    assert set(np.unique(hard)) <= {0, 255}
    only_a = masker.mask(image, [BOX_A], feather=False)  # type: ignore[attr-defined]
    only_b = masker.mask(image, [BOX_B], feather=False)  # type: ignore[attr-defined]
    assert np.array_equal(hard, np.maximum(only_a, only_b))
    for box in (BOX_A, BOX_B):
        assert soft[centre(box)] == 255
    assert soft[:10, -10:].max() == 0 and soft[-8:, :10].max() == 0  # far from both boxes
    # Feathering: intermediate values along the hard mask's edge, none at the centres.
    edge = cv2.morphologyEx(hard, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8)) > 0
    assert ((soft[edge] > 0) & (soft[edge] < 255)).mean() > 0.9
    assert masker.mask(image, []).max() == 0  # type: ignore[attr-defined]
    assert masker.mask(image, [FaceBox(x=500, y=500, w=10, h=10, score=1.0)]).max() == 0  # type: ignore[attr-defined]


def test_ellipse_mask_is_a_feathered_union_of_enlarged_ellipses(tmp_path: Path) -> None:
    image = np.full((120, 160, 3), 90, dtype=np.uint8)
    masker = build_masker(EllipseMaskConfig())
    assert_union_feathered(masker, image)
    hard = masker.mask(image, [BOX_A], feather=False)
    row = centre(BOX_A)[0]
    assert hard[row, BOX_A.x + BOX_A.w + 1] == 255  # scale 1.15 reaches past the box's side...
    assert hard[BOX_A.y, BOX_A.x] == 0  # ...but an ellipse leaves the box's corner out
    inscribed = build_masker(EllipseMaskConfig(scale=1.0)).mask(image, [BOX_A], feather=False)
    assert inscribed[row, BOX_A.x + BOX_A.w + 1] == 0
    assert masker.model_id == "ellipse:scale=1.15:feather=21,0"
    png = tmp_path / "mask.png"
    png.write_bytes(mask_png(masker.mask(image, [BOX_A, BOX_B])))
    assert Image.open(png).mode == "L"


def two_disc_scene() -> tuple[np.ndarray, np.ndarray]:
    """Dark noisy background with a red disc in BOX_A and a blue ellipse in BOX_B; returns (image, disc mask)."""
    rng = np.random.default_rng(0)
    image = (rng.random((120, 160, 3)) * 60).astype(np.uint8)
    truth = np.zeros((120, 160), np.uint8)
    for box, colour in ((BOX_A, (220, 40, 40)), (BOX_B, (40, 60, 230))):
        axes = (box.w // 2 - 2, box.h // 2 - 2)
        cv2.ellipse(image, (box.x + box.w // 2, box.y + box.h // 2), axes, 0, 0, 360, colour, -1)
        cv2.ellipse(truth, (box.x + box.w // 2, box.y + box.h // 2), axes, 0, 0, 360, 1, -1)
    return image, truth.astype(bool)


def test_grabcut_mask_follows_the_object_in_each_box(tmp_path: Path) -> None:
    image, truth = two_disc_scene()
    masker = build_masker(GrabCutMaskConfig())
    assert_union_feathered(masker, image)
    hard = masker.mask(image, [BOX_A, BOX_B], feather=False) > 0
    iou = (hard & truth).sum() / (hard | truth).sum()
    assert iou > 0.8
    box_fill = np.zeros_like(truth)
    for box in (BOX_A, BOX_B):
        box_fill[box.y : box.y + box.h, box.x : box.x + box.w] = True
    assert iou > (box_fill & truth).sum() / (box_fill | truth).sum()  # the discs, not the boxes
    # A box over the whole image leaves GrabCut no background: it falls back to the inscribed ellipse.
    whole = masker.mask(image, [FaceBox(x=0, y=0, w=160, h=120, score=1.0)], feather=False)
    assert whole[60, 80] == 255 and whole[0, 0] == 0
    Image.fromarray(np.where(hard, 255, 0).astype(np.uint8)).save(tmp_path / "grabcut.png")


def test_mask_configs_check_the_kernel_and_discriminate(tmp_path: Path) -> None:
    for make in (
        lambda k: EllipseMaskConfig(feather_kernel=k),
        lambda k: GrabCutMaskConfig(feather_kernel=k),
        lambda k: SamMaskConfig(checkpoint=str(tmp_path / "sam.pth"), feather_kernel=k),
    ):
        assert make(5).feather_kernel == 5
        with pytest.raises(ValidationError, match="odd"):
            make(20)
        with pytest.raises(ValidationError):
            make(0)
    adapter = TypeAdapter(MaskConfig)
    assert isinstance(adapter.validate_python({"backend": "grabcut", "iterations": 2}), GrabCutMaskConfig)
    assert isinstance(adapter.validate_python({"backend": "ellipse"}), EllipseMaskConfig)
    with pytest.raises(ValidationError):
        adapter.validate_python({"backend": "sam"})  # the checkpoint is required
    # Kernel 1 means no feathering at all.
    image = np.zeros((40, 40, 3), np.uint8)
    box = FaceBox(x=10, y=10, w=20, h=20, score=1.0)
    sharp = build_masker(EllipseMaskConfig(feather_kernel=1))
    assert np.array_equal(sharp.mask(image, [box]), sharp.mask(image, [box], feather=False))


def test_mask_png_round_trip(tmp_path: Path) -> None:
    mask = build_masker(EllipseMaskConfig()).mask(np.zeros((50, 70, 3), np.uint8), [BOX_A])
    blob = mask_png(mask)
    (tmp_path / "m.png").write_bytes(blob)
    with Image.open(io.BytesIO(blob)) as decoded:
        assert decoded.mode == "L" and decoded.size == (70, 50)
    assert np.array_equal(mask_from_png(blob), mask)
    with pytest.raises(ValueError):
        mask_png(mask.astype(np.float32))


# --- SAM -----------------------------------------------------------------------------------------------------------

SAM_BOXES = [
    FaceBox(x=10, y=20, w=50, h=80, score=0.9),
    FaceBox(x=0, y=0, w=45, h=60, score=0.8),
    FaceBox(x=30, y=30, w=59, h=89, score=0.7),
]


def sam_image() -> np.ndarray:
    return (np.random.default_rng(0).random((120, 90, 3)) * 255).astype(np.uint8)  # H=120, W=90


def test_sam_prompts_all_boxes_in_one_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from segment_anything import SamPredictor

    calls: list[tuple[int, ...]] = []
    real = SamPredictor.predict_torch

    def spy(self: SamPredictor, *args: object, **kwargs: object) -> object:
        calls.append(tuple(kwargs["boxes"].shape))  # type: ignore[union-attr]
        assert kwargs["multimask_output"] is False
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SamPredictor, "predict_torch", spy)
    masker = sam_masker_from_model(make_tiny_sam(seed=1), SamMaskConfig(checkpoint=str(tmp_path / "unused.pth")))
    image = sam_image()
    mask = masker.mask(image, SAM_BOXES)
    assert calls == [(3, 4)]
    assert mask.shape == image.shape[:2] and mask.dtype == np.uint8
    assert masker.box_masks(image, SAM_BOXES).shape == (3, *image.shape[:2])
    calls.clear()
    assert masker.mask(image, []).max() == 0 and calls == []  # no boxes: no model call


def test_sam_mask_is_the_union_of_the_box_masks(tmp_path: Path) -> None:
    masker = sam_masker_from_model(make_tiny_sam(seed=1), SamMaskConfig(checkpoint=str(tmp_path / "unused.pth")))
    image = sam_image()
    per_box = masker.box_masks(image, SAM_BOXES[:2])
    together = masker.mask(image, SAM_BOXES[:2], feather=False)
    assert np.array_equal(together > 0, per_box[0] | per_box[1])
    for box in SAM_BOXES[:2]:
        alone = masker.mask(image, [box], feather=False)
        assert (together >= alone).all()
        assert (together > alone).any()  # the two boxes' masks differ, so the union adds to each
    soft = masker.mask(image, SAM_BOXES[:2])
    assert soft.shape == together.shape and soft.dtype == np.uint8


def test_sam_checkpoint_loads_through_the_production_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import segment_anything
    import torch

    checkpoint = tmp_path / "sam_tiny.pth"
    trained = build_tiny_sam(checkpoint, seed=1, cuda_tagged=True)  # as if saved on a GPU machine
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(checkpoint, weights_only=True)  # the pitfall map_location avoids

    built: list[object] = []

    def tiny_vit_b(checkpoint: object = None) -> object:
        built.append(checkpoint)
        return make_tiny_sam(seed=99)  # random weights, different from the checkpoint's

    # The registry's architectures are far too big for a test: stand the tiny one in for "vit_b".
    monkeypatch.setitem(segment_anything.sam_model_registry, "vit_b", tiny_vit_b)
    config = SamMaskConfig(checkpoint=str(checkpoint), model_type="vit_b")
    masker = build_masker(config)
    digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert masker.model_id == f"sam:vit_b:sam_tiny.pth:sha256-{digest[:12]}:feather=21,0"
    assert built == []  # loaded on first use, not at build time

    image = sam_image()
    loaded = masker.box_masks(image, SAM_BOXES)
    assert built == [None]  # built without the library's own checkpoint loading
    expected = sam_masker_from_model(trained, config).box_masks(image, SAM_BOXES)
    untrained = sam_masker_from_model(make_tiny_sam(seed=99), config).box_masks(image, SAM_BOXES)
    assert np.array_equal(loaded, expected)
    assert not np.array_equal(loaded, untrained)


def test_sam_checkpoint_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"SamMaskConfig\.checkpoint"):
        build_masker(SamMaskConfig(checkpoint=str(tmp_path / "missing.pth")))
    checkpoint = tmp_path / "sam_tiny.pth"
    build_tiny_sam(checkpoint)
    other_architecture = make_tiny_sam(enc_dim=48)
    with pytest.raises(ValueError, match=r"SamMaskConfig\.model_type"):
        load_sam_checkpoint(other_architecture, checkpoint)
    assert load_sam_checkpoint(make_tiny_sam(seed=5), checkpoint).training is False


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the behaviour without a GPU")
def test_sam_cuda_without_a_gpu_is_an_error(tmp_path: Path) -> None:
    checkpoint = tmp_path / "sam_tiny.pth"
    build_tiny_sam(checkpoint)
    with pytest.raises(DeviceError, match=r"SamMaskConfig\.device is .cuda."):
        build_masker(SamMaskConfig(checkpoint=str(checkpoint), device="cuda"))
