"""The open_clip image-embedding backend, on a tiny random open_clip config built and saved by the tests."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import open_clip
import pytest
import torch
from PIL import Image
from pydantic import ValidationError

from curation import image_embeddings
from curation.image_embeddings import (
    OpenClipEmbedder,
    OpenClipEmbeddingConfig,
    build_embedder,
)
from data.clients.devices import DeviceError
from tests.support.tiny_models import build_tiny_open_clip

NAME = "tiny-clip-embed-test"


def noise_images(n: int, seed: int = 0, size: tuple[int, int] = (48, 40)) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)) for _ in range(n)]


def tiny_config(configs: Path, weights: Path | str, **overrides: object) -> OpenClipEmbeddingConfig:
    values = {"model_name": NAME, "pretrained": str(weights), "model_config_dir": str(configs), "device": "cpu"}
    return OpenClipEmbeddingConfig(**{**values, **overrides})


def reference_embeddings(configs: Path, weights: Path, images: list[Image.Image]) -> np.ndarray:
    """The same weights run through open_clip directly, in float64, independently of the backend."""
    open_clip.add_model_config(configs)
    model, _, preprocess = open_clip.create_model_and_transforms(NAME, pretrained=None)
    model.load_state_dict(torch.load(weights, weights_only=True))
    model.eval()
    with torch.no_grad():
        feats = model.encode_image(torch.stack([preprocess(im) for im in images])).double().numpy()
    return feats / np.linalg.norm(feats, axis=1, keepdims=True)


def test_embeddings_shape_dtype_norm_and_weights(tmp_path: Path) -> None:
    configs, weights = build_tiny_open_clip(tmp_path, NAME, seed=1)
    embedder = build_embedder(tiny_config(configs, weights))
    assert isinstance(embedder, OpenClipEmbedder)
    assert embedder.dim == 32
    images = noise_images(5)
    vectors = embedder.embed(images)
    assert vectors.shape == (5, 32) and vectors.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(vectors.astype(np.float32), axis=1), 1.0, atol=2e-3)
    # The saved weights are the ones used: equal to open_clip's own output for that state_dict ...
    expected = reference_embeddings(configs, weights, images)
    np.testing.assert_allclose(vectors.astype(np.float64), expected, atol=2e-3)
    # ... and not to those of a model built from another seed (what random weights would give).
    _, other = build_tiny_open_clip(tmp_path, NAME, seed=2)
    assert np.abs(reference_embeddings(configs, other, images) - expected).max() > 0.05


def test_identical_images_have_cosine_one_and_different_ones_less(tmp_path: Path) -> None:
    configs, weights = build_tiny_open_clip(tmp_path, NAME)
    embedder = build_embedder(tiny_config(configs, weights))
    a, b = noise_images(2, seed=3)
    vectors = embedder.embed([a, b, a.copy()]).astype(np.float32)
    sims = vectors @ vectors.T
    assert sims[0, 2] == pytest.approx(1.0, abs=2e-3)
    assert sims[0, 1] < sims[0, 2] - 1e-3


def test_batching_and_modes_do_not_change_results(tmp_path: Path) -> None:
    configs, weights = build_tiny_open_clip(tmp_path, NAME)
    images = noise_images(7, seed=4)
    whole = build_embedder(tiny_config(configs, weights, batch_size=64)).embed(images)
    batched = build_embedder(tiny_config(configs, weights, batch_size=3)).embed(images)
    np.testing.assert_allclose(batched.astype(np.float32), whole.astype(np.float32), atol=2e-3)
    # A non-RGB image is converted, giving the embedding of its RGB version.
    rgba = images[0].convert("RGBA")
    one = build_embedder(tiny_config(configs, weights)).embed([rgba])
    np.testing.assert_allclose(one[0].astype(np.float32), whole[0].astype(np.float32), atol=2e-3)


def test_empty_input_gives_zero_rows(tmp_path: Path) -> None:
    configs, weights = build_tiny_open_clip(tmp_path, NAME)
    out = build_embedder(tiny_config(configs, weights)).embed([])
    assert out.shape == (0, 32) and out.dtype == np.float16


def test_model_is_in_eval_mode(tmp_path: Path) -> None:
    configs, weights = build_tiny_open_clip(tmp_path, NAME)
    config = tiny_config(configs, weights)
    embedder = build_embedder(config)
    embedder.embed(noise_images(1))
    loaded = image_embeddings._load(config, embedder.weights, "cpu", "fp32")
    assert not loaded.visual.training
    assert not any(module.training for module in loaded.visual.modules())


def test_model_id_names_architecture_file_and_content(tmp_path: Path) -> None:
    configs, weights = build_tiny_open_clip(tmp_path, NAME, seed=1)
    _, other = build_tiny_open_clip(tmp_path, NAME, seed=2)
    first = build_embedder(tiny_config(configs, weights)).model_id
    assert first.startswith(f"open_clip:{NAME}:{weights.name}:sha256-")
    assert str(tmp_path) not in first  # no machine path in a published table
    # Same name, other bytes: another id.
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / weights.name).write_bytes(other.read_bytes())
    assert build_embedder(tiny_config(configs, copy / weights.name)).model_id != first


def test_missing_weights_file_is_a_clear_error(tmp_path: Path) -> None:
    configs, _ = build_tiny_open_clip(tmp_path, NAME)
    missing = tmp_path / "nowhere" / "open_clip_pytorch_model.bin"
    with pytest.raises(FileNotFoundError, match="pretrained") as info:
        build_embedder(tiny_config(configs, missing))
    assert str(missing) in str(info.value)
    with pytest.raises(FileNotFoundError, match="folder"):
        build_embedder(tiny_config(configs, tmp_path))
    # A bare name that is not a tag of the architecture is not downloaded or guessed either.
    with pytest.raises(ValueError, match="neither an existing file nor an open_clip pretrained tag"):
        build_embedder(tiny_config(configs, "not_a_tag"))


def test_unset_weights_are_refused(tmp_path: Path) -> None:
    configs, _ = build_tiny_open_clip(tmp_path, NAME)
    with pytest.raises(ValueError, match="pretrained is not set"):
        build_embedder(tiny_config(configs, "", pretrained=None))


def test_unknown_architecture_and_missing_config_folder(tmp_path: Path) -> None:
    configs, weights = build_tiny_open_clip(tmp_path, NAME)
    with pytest.raises(ValueError, match="unknown open_clip architecture"):
        build_embedder(tiny_config(configs, weights, model_name="no-such-arch"))
    with pytest.raises(FileNotFoundError, match="model_config_dir"):
        build_embedder(tiny_config(tmp_path / "no-configs", weights))


def test_weights_of_another_architecture_fail_loudly(tmp_path: Path) -> None:
    configs, _ = build_tiny_open_clip(tmp_path, NAME)
    wrong = tmp_path / "wrong.pt"
    torch.save({"visual.conv1.weight": torch.zeros(1)}, wrong)
    embedder = build_embedder(tiny_config(configs, wrong))
    with pytest.raises(RuntimeError, match="loading state_dict"):
        embedder.embed(noise_images(1))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
def test_cuda_without_gpu_is_a_clear_error(tmp_path: Path) -> None:
    configs, weights = build_tiny_open_clip(tmp_path, NAME)
    with pytest.raises(DeviceError, match="device is 'cuda'"):
        build_embedder(tiny_config(configs, weights, device="cuda"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
def test_fp16_on_cpu_falls_back_to_fp32_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    configs, weights = build_tiny_open_clip(tmp_path, NAME)
    images = noise_images(2)
    with caplog.at_level(logging.WARNING, logger="curation.image_embeddings"):
        half = build_embedder(tiny_config(configs, weights, device="auto", precision="fp16"))
    assert half.precision == "fp32" and half.device == "cpu"
    assert "fp16 needs CUDA" in caplog.text
    full = build_embedder(tiny_config(configs, weights))
    np.testing.assert_array_equal(half.embed(images), full.embed(images))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_fp16_matches_cpu_fp32(tmp_path: Path) -> None:
    configs, weights = build_tiny_open_clip(tmp_path, NAME)
    images = noise_images(4)
    gpu = build_embedder(tiny_config(configs, weights, device="cuda", precision="fp16"))
    assert gpu.device == "cuda" and gpu.precision == "fp16"
    cpu = build_embedder(tiny_config(configs, weights))
    np.testing.assert_allclose(gpu.embed(images).astype(np.float32), cpu.embed(images).astype(np.float32), atol=2e-2)


def test_config_is_strict() -> None:
    with pytest.raises(ValidationError, match="open_clip"):  # the one backend it names
        OpenClipEmbeddingConfig(backend="clip", pretrained="x.pt")
    with pytest.raises(ValidationError):
        OpenClipEmbeddingConfig(pretrained="x.pt", weights="x.pt")
    with pytest.raises(ValidationError):
        OpenClipEmbeddingConfig(pretrained="x.pt", batch_size=0)
    for name, field in OpenClipEmbeddingConfig.model_fields.items():
        assert name == "backend" or field.description, name
