"""The automatic synthesis filters (MixCuBe App. A.6): BRISQUE with piq on offline-built weights, CLIP similarity on
a tiny random open_clip model, verdicts, failure rows and disabled filters."""

from __future__ import annotations

import hashlib
import importlib
import io
import shutil
import socket
import threading
from pathlib import Path

import numpy as np
import piq
import pyarrow as pa
import pytest
import skimage.data as skimage_data
import torch
from PIL import Image, ImageFilter
from pydantic import ValidationError

import curation.synthesis_filters as synthesis_filters
from curation.image_embeddings import OpenClipEmbeddingConfig, build_embedder
from curation.synthesis_filters import (
    BRISQUE_MAX,
    CLIP_MAX,
    CLIP_MIN,
    SYNTHESIS_FILTER_SCORES,
    BrisqueConfig,
    ClipSimilarityConfig,
    SynthesisFilterConfig,
    build_synthesis_filter,
    filter_table,
    score_attempts,
    verdict_counts,
)
from data.row_errors import error_text
from tests.support.tiny_models import build_tiny_open_clip

CLIP_NAME = "tiny-clip-synthesis-filter-test"


# ---------------------------------------------------------------- fixtures and images


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Every way out of the process in this code path fails the test (and is recorded, in case it is caught)."""
    attempts: list[tuple] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    return attempts


@pytest.fixture
def hub_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """torch.hub.get_dir() pointed at an empty folder of this test (piq's default weights location)."""
    folder = tmp_path / "torch-hub"
    monkeypatch.setattr(torch.hub, "_hub_dir", str(folder))
    return folder


def png(image: Image.Image | np.ndarray) -> bytes:
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def astronaut() -> np.ndarray:
    return skimage_data.astronaut()


def degraded(pixels: np.ndarray) -> np.ndarray:
    """Heavily blurred and noisy: what BRISQUE is built to score as poor."""
    blurred = np.asarray(Image.fromarray(pixels).filter(ImageFilter.GaussianBlur(4)), dtype=np.float32)
    noise = np.random.default_rng(0).normal(0.0, 20.0, blurred.shape)
    return np.clip(blurred + noise, 0, 255).astype(np.uint8)


def brisque_only(weights: Path | None, **overrides: object) -> SynthesisFilterConfig:
    values = {"weights_path": None if weights is None else str(weights), **overrides}
    return SynthesisFilterConfig(brisque=BrisqueConfig(**values), clip=None)


def clip_config(tmp_path: Path, **overrides: object) -> ClipSimilarityConfig:
    configs, weights = build_tiny_open_clip(tmp_path, CLIP_NAME)
    embedder = OpenClipEmbeddingConfig(
        model_name=CLIP_NAME, pretrained=str(weights), model_config_dir=str(configs), device="cpu"
    )
    return ClipSimilarityConfig(embedder=embedder, **overrides)


def piq_reference(pixels: np.ndarray, weights: Path, hub: Path) -> float:
    """piq's own path, unpatched: the weights file placed in its torch hub cache, piq.brisque called directly."""
    (hub / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copy(weights, hub / "checkpoints" / "brisque_svm_weights.pt")
    x = torch.from_numpy(pixels.astype(np.float32) / 255.0).permute(2, 0, 1)[None]
    return float(piq.brisque(x, data_range=1.0, reduction="none")[0])


# ---------------------------------------------------------------- BRISQUE


@pytest.mark.slow
def test_brisque_scores_sharp_photo_below_degraded_and_threshold_decides(
    tmp_path: Path, brisque_weights_file: Path, hub_dir: Path, no_network: list[tuple]
) -> None:
    sharp, bad = astronaut(), degraded(astronaut())
    pairs = [(png(sharp), png(sharp)), (png(sharp), png(bad))]
    rows = score_attempts(brisque_only(brisque_weights_file), pairs)
    good_score, bad_score = rows[0]["brisque"], rows[1]["brisque"]
    assert good_score < bad_score
    # The scores are piq's own (the weights handed over are the ones piq would read from its cache).
    assert good_score == pytest.approx(piq_reference(sharp, brisque_weights_file, hub_dir), abs=1e-4)
    assert bad_score == pytest.approx(piq_reference(bad, brisque_weights_file, hub_dir), abs=1e-4)

    threshold = (good_score + bad_score) / 2
    rows = score_attempts(brisque_only(brisque_weights_file, max_score=threshold), pairs)
    assert [row["verdict"] for row in rows] == ["keep", "reject_brisque"]
    assert rows[0]["reason"] is None
    assert rows[1]["reason"].startswith("brisque ") and f"> {threshold:g}" in rows[1]["reason"]
    # Above the threshold is rejected, not at it (App. A.6: "greater than 80").
    at = score_attempts(brisque_only(brisque_weights_file, max_score=bad_score), pairs[1:])
    assert at[0]["verdict"] == "keep"
    assert all(row["clip_similarity"] is None and row["clip_backend"] == "off" for row in rows)
    assert no_network == []


@pytest.mark.slow
def test_weights_path_is_the_model_used(tmp_path: Path, brisque_weights_file: Path, no_network: list[tuple]) -> None:
    # Zero coefficients leave only the SVR's bias: every image scores -rho = 153.591 (piq's MATLAB model constant).
    sv_coef, sv = torch.load(brisque_weights_file, weights_only=True)
    zeros = tmp_path / "zero_coef.pt"
    torch.save((torch.zeros_like(sv_coef), sv), zeros)
    pairs = [(png(astronaut()), png(astronaut())), (png(astronaut()), png(skimage_data.coffee()))]
    rows = score_attempts(brisque_only(zeros), pairs)
    assert [row["brisque"] for row in rows] == pytest.approx([153.591, 153.591], abs=1e-3)
    assert [row["verdict"] for row in rows] == ["reject_brisque", "reject_brisque"]
    real = score_attempts(brisque_only(brisque_weights_file), pairs[:1])[0]
    assert real["brisque"] < 100 and real["brisque_backend"] != rows[0]["brisque_backend"]
    assert no_network == []


def test_default_location_is_piqs_torch_hub_cache(
    tmp_path: Path, brisque_weights_file: Path, hub_dir: Path, no_network: list[tuple]
) -> None:
    (hub_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(brisque_weights_file, hub_dir / "checkpoints" / "brisque_svm_weights.pt")
    pair = [(png(astronaut()), png(astronaut()))]
    from_cache = score_attempts(SynthesisFilterConfig(), pair)[0]  # the embedded default: BRISQUE on, CLIP off
    named = score_attempts(brisque_only(brisque_weights_file), pair)[0]
    assert from_cache == named
    assert from_cache["verdict"] == "keep" and from_cache["clip_backend"] == "off"
    assert no_network == []


def test_missing_weights_are_a_clear_error_without_any_download(
    tmp_path: Path, hub_dir: Path, no_network: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fetch(*args: object, **kwargs: object) -> None:
        no_network.append(args)
        raise AssertionError("piq's weights download was called")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", no_fetch)
    monkeypatch.setattr(importlib.import_module("piq.brisque"), "load_url", no_fetch)
    pair = [(png(astronaut()), png(astronaut()))]
    # Default location (piq's cache), empty: the error names the place, the URL and the way out.
    with pytest.raises(FileNotFoundError) as info:
        score_attempts(SynthesisFilterConfig(), pair)
    message = str(info.value)
    assert str(hub_dir / "checkpoints" / "brisque_svm_weights.pt") in message
    assert "never download" in message and "weights_path" in message
    # A named file that is not there.
    missing = tmp_path / "nowhere" / "brisque_svm_weights.pt"
    with pytest.raises(FileNotFoundError, match="weights_path") as info:
        build_synthesis_filter(brisque_only(missing))
    assert str(missing) in str(info.value)
    # A file that is not the model.
    wrong = tmp_path / "wrong.pt"
    wrong.write_bytes(b"not torch")
    with pytest.raises(ValueError, match="not a torch-saved"):
        build_synthesis_filter(brisque_only(wrong))
    torch.save({"sv": torch.zeros(3)}, wrong)
    with pytest.raises(ValueError, match="sv_coef"):
        build_synthesis_filter(brisque_only(wrong))
    assert no_network == []


def test_backend_id_names_piq_and_the_weights_content(tmp_path: Path, brisque_weights_file: Path) -> None:
    digest = hashlib.sha256(brisque_weights_file.read_bytes()).hexdigest()
    filters = build_synthesis_filter(brisque_only(brisque_weights_file))
    assert filters.brisque_backend == f"piq-{piq.__version__}:brisque_svm_weights.pt:sha256-{digest[:12]}"
    assert str(brisque_weights_file.parent) not in filters.brisque_backend  # no machine path in tables
    row = filters.score([(png(astronaut()), png(astronaut()))])[0]
    assert row["brisque_backend"] == filters.brisque_backend


def test_unscorable_image_is_an_error_row_and_piq_is_left_as_found(
    tmp_path: Path, brisque_weights_file: Path, no_network: list[tuple]
) -> None:
    module = importlib.import_module("piq.brisque")
    before = module.load_url
    flat = np.full((64, 64, 3), 128, np.uint8)  # no texture: piq's statistics are undefined (its asserts fire)
    pairs = [(png(astronaut()), png(flat)), (png(astronaut()), png(astronaut()))]
    rows = score_attempts(brisque_only(brisque_weights_file), pairs)
    assert rows[0]["verdict"] == "error" and rows[0]["brisque"] is None
    assert rows[0]["reason"].startswith("brisque: AssertionError")
    assert rows[1]["verdict"] == "keep" and rows[1]["brisque"] is not None
    assert module.load_url is before
    assert no_network == []


@pytest.mark.slow
def test_concurrent_scoring_matches_serial(tmp_path: Path, brisque_weights_file: Path) -> None:
    filters = build_synthesis_filter(brisque_only(brisque_weights_file))
    photos = [skimage_data.astronaut()[::2, ::2], skimage_data.coffee()[::2, ::2], skimage_data.chelsea()]
    pairs = [(png(p), png(p)) for p in photos]
    serial = filters.score(pairs)
    results: dict[int, list[dict]] = {}

    def work(i: int) -> None:
        results[i] = filters.score(pairs[i % 3 :] + pairs[: i % 3])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, rows in results.items():
        assert rows == serial[i % 3 :] + serial[: i % 3]
    assert importlib.import_module("piq.brisque").load_url is torch.hub.load_state_dict_from_url


# ---------------------------------------------------------------- CLIP similarity


def test_identical_images_are_too_similar(tmp_path: Path, no_network: list[tuple]) -> None:
    config = SynthesisFilterConfig(brisque=None, clip=clip_config(tmp_path))
    photo = png(astronaut())
    row = score_attempts(config, [(photo, photo)])[0]
    assert row["clip_similarity"] == pytest.approx(1.0, abs=1e-3)
    assert row["verdict"] == "reject_clip_high" and f"> {CLIP_MAX:g}" in row["reason"]
    assert row["brisque"] is None and row["brisque_backend"] == "off"
    assert row["clip_backend"].startswith(f"open_clip:{CLIP_NAME}:")
    assert no_network == []


def test_similarity_bounds_decide_low_keep_high(tmp_path: Path) -> None:
    clip = clip_config(tmp_path)
    a, b, c = (png(p) for p in (astronaut(), skimage_data.chelsea(), np.full((64, 64, 3), 90, np.uint8)))
    pairs = [(a, a), (a, b), (a, c)]
    observed = [row["clip_similarity"] for row in score_attempts(SynthesisFilterConfig(brisque=None, clip=clip), pairs)]
    # The similarity is the cosine of the embedder's own vectors for the two images.
    vectors = build_embedder(clip.embedder).embed([Image.open(io.BytesIO(x)).convert("RGB") for x in (a, b, c)])
    vectors = vectors.astype(np.float32)
    assert observed == pytest.approx([vectors[0] @ vectors[i] for i in range(3)], abs=3e-3)

    order = np.argsort(observed)
    low, mid, high = (observed[i] for i in order)
    assert mid - low > 2e-3 and high - mid > 2e-3, observed  # distinct enough to place thresholds between them
    bounds = clip.model_copy(update={"min_similarity": (low + mid) / 2, "max_similarity": (mid + high) / 2})
    rows = score_attempts(SynthesisFilterConfig(brisque=None, clip=bounds), pairs)
    assert [rows[i]["verdict"] for i in order] == ["reject_clip_low", "keep", "reject_clip_high"]
    assert [row["clip_similarity"] for row in rows] == pytest.approx(observed, abs=1e-6)


@pytest.mark.slow
def test_chunking_and_shared_originals_do_not_change_rows(tmp_path: Path) -> None:
    clip = clip_config(tmp_path)
    a, b = png(astronaut()), png(skimage_data.coffee())
    pairs = [(a, b), (a, a), (b, a), (a, b), (b, b)]
    whole = score_attempts(SynthesisFilterConfig(brisque=None, clip=clip), pairs)
    one_by_one = score_attempts(SynthesisFilterConfig(brisque=None, clip=clip, chunk_size=1), pairs)
    assert [r["verdict"] for r in whole] == [r["verdict"] for r in one_by_one]
    assert [r["clip_similarity"] for r in whole] == pytest.approx([r["clip_similarity"] for r in one_by_one], abs=1e-6)
    assert whole[0]["clip_similarity"] == pytest.approx(whole[3]["clip_similarity"], abs=1e-6)


def test_exif_orientation_is_applied_before_comparing(tmp_path: Path) -> None:
    clip = clip_config(tmp_path, max_similarity=0.999)
    upright = Image.fromarray(skimage_data.chelsea())
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # what a camera writes, with orientation 6 to undo it
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    stored.save(out, format="PNG", exif=exif)
    config = SynthesisFilterConfig(brisque=None, clip=clip)
    rotated, plain = score_attempts(config, [(png(upright), out.getvalue()), (png(upright), png(stored))])
    assert rotated["clip_similarity"] == pytest.approx(1.0, abs=1e-3)
    assert plain["clip_similarity"] < rotated["clip_similarity"] - 1e-3


# ---------------------------------------------------------------- failures, disabled filters, config


def test_undecodable_images_are_error_rows_in_place(tmp_path: Path) -> None:
    config = SynthesisFilterConfig(brisque=None, clip=clip_config(tmp_path))
    good = png(astronaut())
    truncated = png(skimage_data.coffee())[:2000]
    pairs = [(good, b"not an image"), (good, png(skimage_data.chelsea())), (b"\x89PNG junk", good), (good, truncated)]
    rows = score_attempts(config, pairs)
    assert [row["verdict"] == "error" for row in rows] == [True, False, True, True]
    assert rows[1]["clip_similarity"] is not None
    assert rows[0]["reason"].startswith("synthesized: UnidentifiedImageError")
    assert rows[2]["reason"].startswith("original: UnidentifiedImageError")
    assert rows[3]["reason"].startswith("synthesized: OSError")  # truncated
    for row in (rows[0], rows[2], rows[3]):
        assert row["brisque"] is None and row["clip_similarity"] is None
        assert row["clip_backend"].startswith("open_clip:")  # the row still says what would have scored it
    assert verdict_counts(rows)["error"] == 3


def test_disabled_filters_score_nothing_and_say_off(tmp_path: Path) -> None:
    rows = score_attempts(SynthesisFilterConfig(brisque=None, clip=None), [(png(astronaut()), png(astronaut()))] * 2)
    assert (
        rows
        == [
            {
                "brisque": None,
                "clip_similarity": None,
                "brisque_backend": "off",
                "clip_backend": "off",
                "verdict": "keep",
                "reason": None,
            }
        ]
        * 2
    )
    table = filter_table(rows)
    assert table.schema == SYNTHESIS_FILTER_SCORES and table.num_rows == 2
    assert score_attempts(SynthesisFilterConfig(brisque=None), []) == []


def test_rows_fit_the_schema(tmp_path: Path) -> None:
    config = SynthesisFilterConfig(brisque=None, clip=clip_config(tmp_path))
    rows = score_attempts(config, [(png(astronaut()), png(astronaut())), (png(astronaut()), b"")])
    table = filter_table(rows)
    assert table.column("verdict").to_pylist() == ["reject_clip_high", "error"]
    assert table.schema.field("clip_similarity").type == pa.float32()


def test_config_defaults_validation_and_strictness(tmp_path: Path) -> None:
    # App. A.6 thresholds are the defaults.
    assert BrisqueConfig().max_score == BRISQUE_MAX == 80.0
    embedder = OpenClipEmbeddingConfig(pretrained="x.pt")
    clip = ClipSimilarityConfig(embedder=embedder)
    assert (clip.min_similarity, clip.max_similarity) == (CLIP_MIN, CLIP_MAX) == (0.65, 0.98)
    assert SynthesisFilterConfig().brisque == BrisqueConfig() and SynthesisFilterConfig().clip is None
    with pytest.raises(ValidationError, match="less than"):
        ClipSimilarityConfig(embedder=embedder, min_similarity=0.9, max_similarity=0.9)
    with pytest.raises(ValidationError):
        ClipSimilarityConfig(embedder=embedder, min_similarity=-2.0)
    with pytest.raises(ValidationError):
        BrisqueConfig(backend="opencv")
    with pytest.raises(ValidationError):
        SynthesisFilterConfig(brisque_max=80)
    with pytest.raises(ValidationError):
        SynthesisFilterConfig(chunk_size=0)


def test_failure_reasons_use_the_shared_error_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """One way to name a failure in a row (`data.stage.error_text`), prefixed with what failed; no private copy."""
    failure = ValueError("bad header\nat byte 12")

    def decode(data: bytes) -> Image.Image:
        raise failure

    monkeypatch.setattr(synthesis_filters, "decode_normalized", decode)
    (row,) = score_attempts(SynthesisFilterConfig(brisque=None, clip=None), [(b"original", b"synthesized")])
    assert row["verdict"] == "error"
    assert row["reason"] == f"synthesized: {error_text(failure, synthesis_filters.MAX_ERROR_TEXT)}"
    assert not hasattr(synthesis_filters, "_error_text")
