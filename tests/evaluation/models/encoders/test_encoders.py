"""The 3XCM evaluation's model backends and image-vector cache, on tiny random models the tests build offline.

Every model check compares the backend with the library called directly on the same inputs, so nothing here
depends on particular numbers: shapes, agreement, determinism, batching, identities, and the errors a bad config
must give before any image is embedded.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from pydantic import TypeAdapter, ValidationError

from data.clients.devices import DeviceError
from evaluation.models import encoders
from evaluation.models.embedding_cache import CachedEncoder, cache_folder_name
from evaluation.models.encoders import (
    EmbeddingsEncoderConfig,
    EncoderConfig,
    ImageRef,
    ModelIdentity,
    OpenClipEncoderConfig,
    SentenceTransformersEncoderConfig,
    TransformersEncoderConfig,
)
from tests.support.tiny_models import build_tiny_open_clip
from tests.support.tiny_text_image_models import build_tiny_hf_clip, build_tiny_st_image_model, build_tiny_st_text_model

torch = pytest.importorskip("torch")
open_clip = pytest.importorskip("open_clip")

OPEN_CLIP_NAME = "tiny-eval-clip"
SAFE_ID = re.compile(encoders.MODEL_ID_PATTERN)
TEXTS = ["a photo of a cat", "xin chào thế giới", "ข้าวเหนียวมะม่วง", "a red apple on a table", "Bonjour"]


# -- inputs -------------------------------------------------------------------------------------------------------


def png_bytes(seed: int, size: tuple[int, int] = (48, 40), mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def ref(image_id: str, data: bytes, calls: list[str] | None = None) -> ImageRef:
    def load() -> bytes:
        if calls is not None:
            calls.append(image_id)
        return data

    return ImageRef(image_id, hashlib.sha256(data).hexdigest(), load)


def refs(n: int, start: int = 0) -> list[ImageRef]:
    # Varied sizes and one palette image: the backends must convert and resize like the library does.
    sizes = [(48, 40), (32, 32), (70, 50), (40, 64)]
    return [
        ref(f"img-{i}", png_bytes(i, sizes[i % len(sizes)], "P" if i == start + 1 else "RGB"))
        for i in range(start, start + n)
    ]


def pil(image: ImageRef) -> Image.Image:
    return Image.open(io.BytesIO(image.load())).convert("RGB")


# -- tiny models, built once per module ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-text-image")
    configs, weights = build_tiny_open_clip(root / "open_clip", OPEN_CLIP_NAME, seed=0)
    _, weights_other = build_tiny_open_clip(root / "open_clip", OPEN_CLIP_NAME, seed=1)
    clip = build_tiny_hf_clip(root / "hf-clip", seed=0)
    return {
        "oc_configs": configs,
        "oc_weights": weights,
        "oc_weights_other": weights_other,
        "hf_clip": clip,
        "st_image": build_tiny_st_image_model(root / "st-image", clip),
        "st_text": build_tiny_st_text_model(root / "st-text", out_dim=24),
        "st_text_16": build_tiny_st_text_model(root / "st-text-16", out_dim=16),
    }


def open_clip_config(models: dict[str, Path], **overrides: object) -> OpenClipEncoderConfig:
    values = {
        "model_name": OPEN_CLIP_NAME,
        "pretrained": str(models["oc_weights"]),
        "model_config_dir": str(models["oc_configs"]),
        "device": "cpu",
    }
    return OpenClipEncoderConfig(**{**values, **overrides})


def hf_config(models: dict[str, Path], **overrides: object) -> TransformersEncoderConfig:
    return TransformersEncoderConfig(**{"model": str(models["hf_clip"]), "device": "cpu", **overrides})


def st_config(models: dict[str, Path], **overrides: object) -> SentenceTransformersEncoderConfig:
    values = {"image_model": str(models["st_image"]), "text_model": str(models["st_text"]), "device": "cpu"}
    return SentenceTransformersEncoderConfig(**{**values, **overrides})


def model_configs(models: dict[str, Path]) -> dict[str, Callable[..., object]]:
    return {"open_clip": open_clip_config, "transformers": hf_config, "sentence-transformers": st_config}


BACKENDS = ["open_clip", "transformers", "sentence-transformers"]


def config_for(backend: str, models: dict[str, Path], **overrides: object) -> object:
    return model_configs(models)[backend](models, **overrides)


# -- the library called directly ----------------------------------------------------------------------------------


def direct_open_clip(models: dict[str, Path], images: Sequence[ImageRef], texts: Sequence[str]) -> tuple:
    open_clip.add_model_config(models["oc_configs"])
    model, _, preprocess = open_clip.create_model_and_transforms(OPEN_CLIP_NAME, pretrained=None)
    model.load_state_dict(torch.load(models["oc_weights"], weights_only=True))
    model.eval()
    tokenizer = open_clip.get_tokenizer(OPEN_CLIP_NAME)
    with torch.no_grad():
        image = model.encode_image(torch.stack([preprocess(pil(im)) for im in images]))
        text = model.encode_text(tokenizer(list(texts)))
    return image.numpy(), text.numpy()


def direct_transformers(models: dict[str, Path], images: Sequence[ImageRef], texts: Sequence[str]) -> tuple:
    from transformers import AutoProcessor, CLIPModel

    model = CLIPModel.from_pretrained(models["hf_clip"]).eval()
    processor = AutoProcessor.from_pretrained(models["hf_clip"])
    with torch.no_grad():
        image = model.get_image_features(**processor(images=[pil(im) for im in images], return_tensors="pt"))
        text = model.get_text_features(**processor(text=list(texts), padding=True, return_tensors="pt"))
    pooled = [out if isinstance(out, torch.Tensor) else out.pooler_output for out in (image, text)]
    return pooled[0].numpy(), pooled[1].numpy()


def direct_sentence_transformers(models: dict[str, Path], images: Sequence[ImageRef], texts: Sequence[str]) -> tuple:
    from sentence_transformers import SentenceTransformer

    image_model = SentenceTransformer(str(models["st_image"]), device="cpu")
    text_model = SentenceTransformer(str(models["st_text"]), device="cpu")
    return image_model.encode([pil(im) for im in images]), text_model.encode(list(texts))


DIRECT = {
    "open_clip": direct_open_clip,
    "transformers": direct_transformers,
    "sentence-transformers": direct_sentence_transformers,
}


# -- the three model backends -------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_vectors_match_the_library_and_are_deterministic(backend: str, models: dict[str, Path]) -> None:
    images = refs(5)
    encoder = config_for(backend, models).build()
    image_vectors, text_vectors = encoder.image_vectors(images), encoder.text_vectors(TEXTS)
    assert image_vectors.dtype == np.float32 and text_vectors.dtype == np.float32
    assert image_vectors.shape[0] == 5 and text_vectors.shape == (5, image_vectors.shape[1])
    expected_images, expected_texts = DIRECT[backend](models, images, TEXTS)
    np.testing.assert_allclose(image_vectors, expected_images, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(text_vectors, expected_texts, rtol=1e-4, atol=1e-5)
    # Another build of the same config gives the same vectors (loaded weights, eval mode: no dropout).
    again = config_for(backend, models).build()
    np.testing.assert_array_equal(again.image_vectors(images), image_vectors)
    np.testing.assert_array_equal(again.text_vectors(TEXTS), text_vectors)
    # Distinct inputs give distinct vectors (not one constant row).
    assert np.abs(image_vectors[0] - image_vectors[2]).max() > 0
    assert np.abs(text_vectors[0] - text_vectors[1]).max() > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_batches_give_the_same_vectors_and_report_progress(backend: str, models: dict[str, Path]) -> None:
    images = refs(5)
    whole = config_for(backend, models, batch_size=64).build().image_vectors(images)
    done: list[int] = []
    small = config_for(backend, models, batch_size=2).build()
    np.testing.assert_allclose(small.image_vectors(images, progress=done.append), whole, rtol=1e-5, atol=1e-6)
    assert done == [2, 2, 1]
    texts = config_for(backend, models, batch_size=64).build().text_vectors(TEXTS)
    np.testing.assert_allclose(small.text_vectors(TEXTS), texts, rtol=1e-5, atol=1e-5)
    # Row i is images[i]: a reversed input gives reversed rows.
    np.testing.assert_allclose(small.image_vectors(images[::-1]), whole[::-1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_inputs_give_zero_rows_of_the_model_dimension(backend: str, models: dict[str, Path]) -> None:
    encoder = config_for(backend, models).build()
    dim = encoder.text_vectors(TEXTS[:1]).shape[1]
    assert encoder.image_vectors([]).shape == (0, dim)
    assert encoder.text_vectors([]).shape == (0, dim)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp16_on_cpu_warns_and_runs_in_fp32(
    backend: str, models: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        encoder = config_for(backend, models, precision="fp16", device="auto").build()
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: fp16 really applies")
    assert "fp16 needs CUDA" in caplog.text
    assert (encoder.identity.device, encoder.identity.precision) == ("cpu", "fp32")
    fp32 = config_for(backend, models).build()
    np.testing.assert_array_equal(encoder.text_vectors(TEXTS[:2]), fp32.text_vectors(TEXTS[:2]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cuda_without_a_gpu_is_an_error(backend: str, models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="device is 'cuda' but torch sees no usable CUDA device"):
        config_for(backend, models, device="cuda").build()


def test_open_clip_identity_names_the_weights(models: dict[str, Path]) -> None:
    identity = open_clip_config(models).build().identity
    assert identity.backend == "open_clip"
    assert identity.model_id == f"open_clip--{OPEN_CLIP_NAME}--{models['oc_weights'].stem}"
    assert SAFE_ID.match(identity.model_id)
    assert identity.name == f"{OPEN_CLIP_NAME}/{models['oc_weights'].name}"
    assert identity.weights_sha256 == hashlib.sha256(models["oc_weights"].read_bytes()).hexdigest()
    assert (identity.device, identity.precision) == ("cpu", "fp32")
    other = open_clip_config(models, pretrained=str(models["oc_weights_other"])).build()
    assert other.identity.weights_sha256 != identity.weights_sha256
    # Other weights, other vectors: the file really is what runs.
    images = refs(2)
    first = open_clip_config(models).build().image_vectors(images)
    assert np.abs(other.image_vectors(images) - first).max() > 1e-3


def test_open_clip_preprocess_tag_changes_preprocessing_and_id(
    models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tiny architecture has no tags: give it one whose pretrained cfg sets SigLIP's preprocessing (mean/std 0.5,
    # squash resize), and check that a weights file run with it is preprocessed that way and named apart.
    tag_cfg = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5), "interpolation": "bicubic", "resize_mode": "squash"}
    real = open_clip.get_pretrained_cfg
    monkeypatch.setattr(
        open_clip,
        "get_pretrained_cfg",
        lambda m, t: tag_cfg if (m, t) == (OPEN_CLIP_NAME, "fake_webli") else real(m, t),
    )
    plain = open_clip_config(models).build()
    tagged = open_clip_config(models, preprocess_tag="fake_webli").build()
    assert tagged.identity.model_id == f"{plain.identity.model_id}--pp-fake_webli"
    assert tagged.identity.weights_sha256 == plain.identity.weights_sha256
    images = refs(2)
    _, _, squash = open_clip.create_model_and_transforms(
        OPEN_CLIP_NAME, pretrained=None, image_mean=(0.5,) * 3, image_std=(0.5,) * 3, image_resize_mode="squash"
    )
    model = open_clip.create_model(OPEN_CLIP_NAME, pretrained=str(models["oc_weights"])).eval()
    with torch.no_grad():
        expected = model.encode_image(torch.stack([squash(pil(im)) for im in images])).numpy()
    np.testing.assert_allclose(tagged.image_vectors(images), expected, rtol=1e-4, atol=1e-5)
    assert np.abs(plain.image_vectors(images) - expected).max() > 1e-4
    with pytest.raises(ValueError, match="preprocess_tag='nope' is not an open_clip pretrained tag"):
        open_clip_config(models, preprocess_tag="nope").build()
    with pytest.raises(ValueError, match="preprocess_tag applies to a weights file"):
        OpenClipEncoderConfig(model_name="ViT-B-32", pretrained="laion2b_s34b_b79k", preprocess_tag="openai").build()


def test_open_clip_weight_errors(models: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"OpenClipEncoderConfig\.pretrained\) does not exist"):
        open_clip_config(models, pretrained=str(tmp_path / "missing.pt")).build()
    with pytest.raises(ValueError, match="neither an existing file nor an open_clip pretrained tag"):
        open_clip_config(models, pretrained="laion2b_not_a_tag").build()
    with pytest.raises(ValueError, match="unknown open_clip architecture"):
        open_clip_config(models, model_name="no-such-architecture").build()
    with pytest.raises(ValidationError, match="pretrained"):
        OpenClipEncoderConfig(model_name=OPEN_CLIP_NAME)  # no weights named: no random fallback
    with pytest.raises(ValidationError, match="batch_size"):
        open_clip_config(models, batch_size=0)
    # A tag of a built-in architecture is accepted without downloading anything at build.
    tagged = OpenClipEncoderConfig(model_name="ViT-B-32", pretrained="laion2b_s34b_b79k", device="cpu").build()
    assert tagged.identity.model_id == "open_clip--ViT-B-32--laion2b_s34b_b79k"


def test_open_clip_tag_is_hashed_when_its_file_is_cached(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    real = open_clip.get_pretrained_cfg
    tag_cfg = {"hf_hub": "tiny-org/tiny-open-clip/"}  # open_clip's default file name, safetensors preferred
    monkeypatch.setattr(
        open_clip, "get_pretrained_cfg", lambda m, t: tag_cfg if (m, t) == (OPEN_CLIP_NAME, "tiny_tag") else real(m, t)
    )
    tagged = open_clip_config(models, pretrained="tiny_tag")
    assert tagged.build().identity.weights_sha256 is None  # not downloaded: nothing local to hash
    repo = tmp_path / "hub" / "models--tiny-org--tiny-open-clip"
    commit = "1" * 40
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    cached = repo / "snapshots" / commit / "open_clip_model.safetensors"
    cached.write_bytes(models["oc_weights"].read_bytes())
    identity = tagged.build().identity
    assert identity.weights_sha256 == hashlib.sha256(cached.read_bytes()).hexdigest()
    assert (
        identity.model_id == f"open_clip--{OPEN_CLIP_NAME}--tiny_tag" and identity.name == f"{OPEN_CLIP_NAME}/tiny_tag"
    )


def test_open_clip_weights_that_do_not_fit_fail_at_load(models: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt"
    torch.save({"not": torch.zeros(1)}, bad)
    encoder = open_clip_config(models, pretrained=str(bad)).build()
    with pytest.raises(RuntimeError):
        encoder.image_vectors(refs(1))


def test_transformers_identity_hashes_the_folder(models: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    identity = hf_config(models).build().identity
    assert identity.backend == "transformers"
    assert identity.model_id == f"transformers--{models['hf_clip'].name}" and SAFE_ID.match(identity.model_id)
    assert identity.weights_sha256 == encoders.folder_sha256(models["hf_clip"])
    copy = shutil.copytree(models["hf_clip"], tmp_path / models["hf_clip"].name)
    assert hf_config(models, model=str(copy)).build().identity.weights_sha256 == identity.weights_sha256
    build_tiny_hf_clip(copy, seed=5)  # same files, other weights
    changed = hf_config(models, model=str(copy)).build()
    assert changed.identity.weights_sha256 != identity.weights_sha256
    images = refs(2)
    assert np.abs(changed.image_vectors(images) - hf_config(models).build().image_vectors(images)).max() > 1e-4


def test_transformers_source_errors(models: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"TransformersEncoderConfig\.model\) does not exist"):
        hf_config(models, model=str(tmp_path / "missing")).build()
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"has no config\.json"):
        hf_config(models, model=str(tmp_path / "empty")).build()
    with pytest.raises(ValueError, match="revision applies to hub ids only"):
        hf_config(models, revision="main").build()


def test_transformers_hub_ids_use_the_cache_or_stay_unhashed(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # Not cached: built without any network, no hash, an id naming the hub id.
    absent = hf_config(models, model="tiny-org/tiny-clip").build().identity
    assert (absent.model_id, absent.weights_sha256) == ("transformers--tiny-org--tiny-clip", None)
    pinned = hf_config(models, model="tiny-org/tiny-clip", revision="v1.0").build().identity
    assert pinned.model_id == "transformers--tiny-org--tiny-clip--rev-v1.0"
    # Cached (the hub cache's layout: refs/main names the snapshot): loaded from there and hashed.
    repo = cache / "models--tiny-org--tiny-clip"
    commit = "0" * 40
    shutil.copytree(models["hf_clip"], repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    cached = hf_config(models, model="tiny-org/tiny-clip").build()
    assert cached.identity.weights_sha256 == encoders.folder_sha256(models["hf_clip"])
    assert cached.identity.model_id == "transformers--tiny-org--tiny-clip"
    images = refs(2)
    np.testing.assert_array_equal(cached.image_vectors(images), hf_config(models).build().image_vectors(images))


def test_sentence_transformers_identity_and_dimension_check(models: dict[str, Path], tmp_path: Path) -> None:
    identity = st_config(models).build().identity
    assert identity.backend == "sentence-transformers"
    assert identity.model_id == "sentence-transformers--st-image--st-text" and SAFE_ID.match(identity.model_id)
    expected = hashlib.sha256(
        f"{encoders.folder_sha256(models['st_image'])}\n{encoders.folder_sha256(models['st_text'])}".encode()
    ).hexdigest()
    assert identity.weights_sha256 == expected
    other_text = st_config(models, text_model=str(models["st_text_16"])).build()
    assert other_text.identity.weights_sha256 != identity.weights_sha256
    # The text model's 16-d vectors cannot be compared with the image model's 24-d ones: an error at first use.
    with pytest.raises(ValueError, match=r"gives 24-d vectors but the text model .* gives 16-d"):
        other_text.text_vectors(TEXTS)
    with pytest.raises(FileNotFoundError, match=r"SentenceTransformersEncoderConfig\.image_model\) does not exist"):
        st_config(models, image_model=str(tmp_path / "missing")).build()
    # One CLIP for both sides: one model, named once.
    both = st_config(models, text_model=str(models["st_image"])).build()
    assert both.identity.model_id == "sentence-transformers--st-image"
    assert both.text_vectors(TEXTS[:2]).shape == (2, 24)


def test_missing_extra_names_the_pip_extra(models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # makes the import fail
    with pytest.raises(ImportError, match=r"culturebench\[embed\]"):
        st_config(models).build()
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"culturebench\[synthesis\]"):
        hf_config(models).build()


def test_exif_orientation_is_applied(models: dict[str, Path]) -> None:
    from PIL import ImageOps

    image = Image.open(io.BytesIO(png_bytes(7, (48, 24))))
    exif = image.getexif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to display
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", exif=exif.tobytes())
    rotated = ref("rotated", buffer.getvalue())
    encoder = open_clip_config(models).build()
    open_clip.add_model_config(models["oc_configs"])
    _, _, preprocess = open_clip.create_model_and_transforms(OPEN_CLIP_NAME, pretrained=None)
    model = open_clip.create_model(OPEN_CLIP_NAME, pretrained=str(models["oc_weights"])).eval()
    upright = ImageOps.exif_transpose(Image.open(io.BytesIO(rotated.load()))).convert("RGB")
    assert upright.size == (24, 48)
    with torch.no_grad():
        expected = model.encode_image(preprocess(upright)[None]).numpy()
        as_stored = model.encode_image(preprocess(image.convert("RGB"))[None]).numpy()
    np.testing.assert_allclose(encoder.image_vectors([rotated]), expected, rtol=1e-4, atol=1e-5)
    assert np.abs(expected - as_stored).max() > 1e-4


def test_undecodable_image_is_named(models: dict[str, Path]) -> None:
    broken = ref("broken-1", b"not an image")
    with pytest.raises(ValueError, match=r"image 'broken-1'.*cannot be decoded"):
        open_clip_config(models).build().image_vectors([*refs(2), broken])


def test_config_union_picks_the_backend(models: dict[str, Path]) -> None:
    adapter = TypeAdapter(EncoderConfig)
    parsed = adapter.validate_python({"backend": "transformers", "model": str(models["hf_clip"])})
    assert isinstance(parsed, TransformersEncoderConfig) and parsed.batch_size == 64 and parsed.device == "auto"
    with pytest.raises(ValidationError, match="open_clip"):
        adapter.validate_python({"backend": "nope"})
    with pytest.raises(ValidationError, match="extra"):
        adapter.validate_python({"backend": "transformers", "model": "x", "typo_field": 1})


def test_model_identity_rejects_unsafe_ids() -> None:
    fields = {"backend": "x", "name": "n", "weights_sha256": None, "device": "cpu", "precision": "fp32"}
    for bad in ("a/b", "../up", ".hidden", "", "with space"):
        with pytest.raises(ValidationError):
            ModelIdentity(model_id=bad, **fields)
    assert encoders.slug("open_clip", "../x/y", "a b") == "open_clip--x--y--a-b"
    long = encoders.slug("m" * 400)
    assert SAFE_ID.match(long) and long != encoders.slug("m" * 399)


# -- the embeddings backend ---------------------------------------------------------------------------------------


def write_embeddings(path: Path, key: str, keys: list, vectors: list | None, **columns: object) -> str:
    data = {key: keys} if keys is not None else {}
    if vectors is not None:
        data["embedding"] = vectors
    data.update(columns)
    pq.write_table(pa.table(data), path)
    return str(path)


@pytest.fixture
def embedding_files(tmp_path: Path) -> tuple[str, str, dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    images = {f"img-{i}": rng.normal(size=6).astype(np.float32) for i in range(5)}
    texts = {text: rng.normal(size=6).astype(np.float32) for text in TEXTS}
    image_file = write_embeddings(
        tmp_path / "my-model IMG.parquet", "image_id", list(images), [v.tolist() for v in images.values()]
    )
    text_file = write_embeddings(tmp_path / "TXT.parquet", "text", list(texts), [v.tolist() for v in texts.values()])
    return image_file, text_file, images, texts


def test_embeddings_round_trip_without_loading_images(embedding_files: tuple, tmp_path: Path) -> None:
    image_file, text_file, images, texts = embedding_files
    encoder = EmbeddingsEncoderConfig(image_embeddings=image_file, text_embeddings=text_file).build()
    calls: list[str] = []
    wanted = [ref(image_id, b"unused", calls) for image_id in ["img-3", "img-0", "img-3", "img-4"]]
    done: list[int] = []
    vectors = encoder.image_vectors(wanted, progress=done.append)
    np.testing.assert_array_equal(vectors, np.stack([images[r.image_id] for r in wanted]))
    assert vectors.dtype == np.float32 and calls == [] and sum(done) == 4
    np.testing.assert_array_equal(encoder.text_vectors(TEXTS[::-1]), np.stack([texts[t] for t in TEXTS[::-1]]))
    assert encoder.image_vectors([]).shape == (0, 6) and encoder.text_vectors([]).shape == (0, 6)
    identity = encoder.identity
    assert (identity.backend, identity.device, identity.precision) == ("embeddings", "n/a", "n/a")
    assert identity.name == "my-model IMG"
    assert identity.model_id == f"embeddings--my-model-IMG--{identity.weights_sha256[:12]}"  # unnamed: the hash tells
    # fsspec URLs work too, and a name overrides the file's.
    named = EmbeddingsEncoderConfig(
        image_embeddings=f"file://{image_file}", text_embeddings=text_file, name="Vendor/API v2"
    ).build()
    assert named.identity.model_id == "embeddings--Vendor--API-v2"
    assert named.identity.weights_sha256 == identity.weights_sha256
    # Other vectors in a file, another hash.
    write_embeddings(Path(text_file), "text", list(texts), [(v + 1).tolist() for v in texts.values()])
    changed = EmbeddingsEncoderConfig(image_embeddings=image_file, text_embeddings=text_file).build()
    assert changed.identity.weights_sha256 != identity.weights_sha256


def test_embeddings_missing_keys_are_counted(embedding_files: tuple) -> None:
    image_file, text_file, _, _ = embedding_files
    encoder = EmbeddingsEncoderConfig(image_embeddings=image_file, text_embeddings=text_file).build()
    with pytest.raises(KeyError, match=r"2 of 3 images have no vector .* e\.g\. 'x-1', 'x-2'"):
        encoder.image_vectors([ref("img-0", b""), ref("x-1", b""), ref("x-2", b"")])
    with pytest.raises(KeyError, match="1 of 2 query texts"):
        encoder.text_vectors([TEXTS[0], TEXTS[0].upper()])  # exact text only


BAD_IMAGE_FILES = {
    "missing column": ({"image_id": ["a"]}, r"lacks column\(s\) embedding"),
    "key type": ({"image_id": [1], "embedding": [[1.0, 2.0]]}, "column image_id must be string, not int64"),
    "embedding type": ({"image_id": ["a"], "embedding": ["1,2"]}, "column embedding must be a list of float"),
    "int embedding": ({"image_id": ["a"], "embedding": [[1, 2]]}, r"must be a list of float, not list<.*int64>"),
    "null key": ({"image_id": ["a", None], "embedding": [[1.0], [2.0]]}, "column image_id has 1 null"),
    "null embedding": ({"image_id": ["a", "b"], "embedding": [[1.0], None]}, "column embedding has 1 null"),
    "null value": ({"image_id": ["a"], "embedding": [[1.0, None]]}, "1 null value.* inside its lists"),
    "ragged": ({"image_id": ["a", "b"], "embedding": [[1.0, 2.0], [1.0]]}, r"row 1 \(image_id 'b'\) has 1 values"),
    "empty vector": (
        {"image_id": ["a"], "embedding": pa.array([[]], pa.list_(pa.float32()))},
        "has an empty embedding",
    ),
    "duplicate": ({"image_id": ["a", "b", "a"], "embedding": [[1.0]] * 3}, r"1 image_id value\(s\) .* 'a'"),
    "nan": ({"image_id": ["a", "b"], "embedding": [[1.0], [float("nan")]]}, "1 embedding.* NaN .* 'b'"),
    "no rows": ({"image_id": pa.array([], pa.string()), "embedding": pa.array([], pa.list_(pa.float32()))}, "no rows"),
}


@pytest.mark.parametrize("case", list(BAD_IMAGE_FILES))
def test_embeddings_validation_errors_name_file_and_problem(case: str, tmp_path: Path) -> None:
    columns, message = BAD_IMAGE_FILES[case]
    image_file = tmp_path / "IMG.parquet"
    pq.write_table(pa.table(columns), image_file)
    text_file = write_embeddings(tmp_path / "TXT.parquet", "text", ["t"], [[1.0]])
    with pytest.raises(ValueError, match=message) as info:
        EmbeddingsEncoderConfig(image_embeddings=str(image_file), text_embeddings=text_file).build()
    assert "EmbeddingsEncoderConfig.image_embeddings" in str(info.value) and str(image_file) in str(info.value)


def test_embeddings_file_level_errors(tmp_path: Path) -> None:
    image_file = write_embeddings(tmp_path / "IMG.parquet", "image_id", ["a"], [[1.0, 2.0]])
    text_file = write_embeddings(tmp_path / "TXT.parquet", "text", ["t"], [[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match=r"are 2-d but text embeddings .* are 3-d"):
        EmbeddingsEncoderConfig(image_embeddings=image_file, text_embeddings=text_file).build()
    with pytest.raises(FileNotFoundError, match=r"text_embeddings '.*nope.parquet' does not exist"):
        EmbeddingsEncoderConfig(image_embeddings=image_file, text_embeddings=str(tmp_path / "nope.parquet")).build()
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        EmbeddingsEncoderConfig(image_embeddings=image_file, text_embeddings=str(tmp_path / "junk.parquet")).build()
    bad_text = write_embeddings(tmp_path / "T2.parquet", "query", ["t"], [[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"text_embeddings .* lacks column\(s\) text; it has query, embedding"):
        EmbeddingsEncoderConfig(image_embeddings=image_file, text_embeddings=bad_text).build()
    # float16 and fixed-size lists are accepted and come back as float32.
    vectors = pa.array([[1.0, 2.0]], pa.list_(pa.float16(), 2))
    pq.write_table(pa.table({"text": ["t"], "embedding": vectors}), tmp_path / "T3.parquet")
    encoder = EmbeddingsEncoderConfig(image_embeddings=image_file, text_embeddings=str(tmp_path / "T3.parquet"))
    np.testing.assert_array_equal(encoder.build().text_vectors(["t"]), np.array([[1.0, 2.0]], np.float32))


# -- the cache ----------------------------------------------------------------------------------------------------


class FakeEncoder:
    """Vectors derived from each image's bytes; records which images it was asked to embed."""

    runs_locally = needs_image_bytes = True

    def __init__(self, model_id: str = "fake--model", weights: str | None = "ab" * 32, dim: int = 8) -> None:
        self.identity = ModelIdentity(
            backend="fake", model_id=model_id, name=model_id, weights_sha256=weights, device="cpu", precision="fp32"
        )
        self.dim = dim
        self.embedded: list[str] = []

    def image_vectors(self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None) -> np.ndarray:
        self.embedded.extend(image.image_id for image in images)
        rows = [
            np.random.default_rng(int(hashlib.sha256(image.load()).hexdigest()[:8], 16)).normal(size=self.dim)
            for image in images
        ]
        if progress is not None and images:
            progress(len(images))
        return np.array(rows, dtype=np.float32).reshape(len(images), self.dim)

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        return np.ones((len(texts), self.dim), dtype=np.float32)


def test_cache_second_run_embeds_nothing(tmp_path: Path) -> None:
    images = refs(5)
    first = CachedEncoder(FakeEncoder(), tmp_path)
    done: list[int] = []
    vectors = first.image_vectors(images, progress=done.append)
    assert first.stats.embedded == 5 and first.stats.from_cache == 0 and sum(done) == 5
    # A new process (a new wrapper and encoder), another benchmark's order: nothing is embedded or even loaded.
    inner = FakeEncoder()
    calls: list[str] = []
    reordered = [ref(image.image_id, image.load(), calls) for image in images[::-1]]
    second = CachedEncoder(inner, tmp_path)
    done.clear()
    np.testing.assert_array_equal(second.image_vectors(reordered, progress=done.append), vectors[::-1])
    assert inner.embedded == [] and calls == [] and done == [5]
    assert (second.stats.from_cache, second.stats.embedded) == (5, 0)
    assert second.text_vectors(["q"]).shape == (1, 8)
    assert second.identity == inner.identity


def test_cache_embeds_only_new_images_once(tmp_path: Path) -> None:
    images = refs(4)
    CachedEncoder(FakeEncoder(), tmp_path).image_vectors(images[:3])
    inner = FakeEncoder()
    cached = CachedEncoder(inner, tmp_path)
    duplicate = ref("img-3-copy", images[3].load())  # same bytes under another id
    done: list[int] = []
    vectors = cached.image_vectors([*images, duplicate], progress=done.append)
    assert inner.embedded == ["img-3"] and sum(done) == 5
    assert (cached.stats.from_cache, cached.stats.embedded, cached.stats.requested) == (3, 1, 5)
    np.testing.assert_array_equal(vectors[3], vectors[4])
    np.testing.assert_array_equal(vectors, FakeEncoder().image_vectors([*images, duplicate]))


def test_cache_keeps_models_apart(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    images = refs(3)
    CachedEncoder(FakeEncoder(), root).image_vectors(images)
    for other in (
        FakeEncoder(model_id="other--model"),
        FakeEncoder(weights="cd" * 32),
        FakeEncoder(weights=None),
    ):
        cached = CachedEncoder(other, root)
        cached.image_vectors(images)
        assert other.embedded == [image.image_id for image in images]
    fp16 = FakeEncoder()
    fp16.identity = fp16.identity.model_copy(update={"precision": "fp16"})
    assert cache_folder_name(fp16.identity) != cache_folder_name(FakeEncoder().identity)
    assert len([p for p in root.iterdir() if p.is_dir()]) == 4
    assert (root / "fake--model--abababababababab--fp32" / "model.json").is_file()
    assert (root / "fake--model--unhashed--fp32").is_dir()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong dim", "nan", "float64"])
def test_cache_recomputes_damaged_entries(damage: str, tmp_path: Path) -> None:
    images = refs(3)
    first = CachedEncoder(FakeEncoder(), tmp_path)
    expected = first.image_vectors(images)
    entry = first.folder / images[1].sha256[:2] / f"{images[1].sha256}.npy"
    if damage == "garbage":
        entry.write_bytes(b"\x00garbage")
    elif damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:-5])
    elif damage == "wrong dim":
        np.save(entry, np.ones(3, np.float32))
    elif damage == "nan":
        np.save(entry, np.full(8, np.nan, np.float32))
    else:
        np.save(entry, np.ones(8, np.float64))
    inner = FakeEncoder()
    cached = CachedEncoder(inner, tmp_path)
    np.testing.assert_array_equal(cached.image_vectors(images), expected)
    assert inner.embedded == ["img-1"] and cached.stats.corrupt == 1
    # Rewritten: the next run reads it.
    again = FakeEncoder()
    CachedEncoder(again, tmp_path).image_vectors(images)
    assert again.embedded == []


def test_cache_checks_the_bytes_and_the_hash(tmp_path: Path) -> None:
    liar = ImageRef("img-x", hashlib.sha256(b"other").hexdigest(), lambda: png_bytes(1))
    with pytest.raises(ValueError, match=r"'img-x' was given sha256 .* but its bytes hash to"):
        CachedEncoder(FakeEncoder(), tmp_path).image_vectors([liar])
    assert CachedEncoder(FakeEncoder(), tmp_path).image_vectors([]).shape[0] == 0
    # Without a usable sha256 an image is embedded each time and never stored (and never names a path).
    data = png_bytes(2)
    unkeyed = [ImageRef("img-y", "../../etc", lambda: data), ImageRef("img-z", "", lambda: data)]
    for _ in range(2):
        inner = FakeEncoder()
        cached = CachedEncoder(inner, tmp_path / "cache")
        vectors = cached.image_vectors(unkeyed)
        assert inner.embedded == ["img-y", "img-z"] and cached.stats.uncacheable == 2
        np.testing.assert_array_equal(vectors[0], vectors[1])
    assert not list((tmp_path / "cache").rglob("*.npy"))

    # The wrapped encoder's own loader errors still reach the caller.
    def no_bytes() -> bytes:
        raise ValueError("release carries no image bytes")

    failing = ImageRef("img-w", "", no_bytes)
    with pytest.raises(ValueError, match="release carries no image bytes"):
        CachedEncoder(FakeEncoder(), tmp_path / "cache").image_vectors([failing])


def test_cache_passes_the_embeddings_backend_through(embedding_files: tuple, tmp_path: Path) -> None:
    image_file, text_file, images, _ = embedding_files
    encoder = EmbeddingsEncoderConfig(image_embeddings=image_file, text_embeddings=text_file).build()
    cached = CachedEncoder(encoder, tmp_path / "cache")
    vectors = cached.image_vectors([ref("img-1", b"unused")])
    np.testing.assert_array_equal(vectors[0], images["img-1"])
    assert cached.stats.bypassed == 1 and not (tmp_path / "cache").exists()


def test_cache_over_a_real_model_returns_its_vectors(models: dict[str, Path], tmp_path: Path) -> None:
    images = refs(4)
    plain = open_clip_config(models).build().image_vectors(images)
    first = CachedEncoder(open_clip_config(models, batch_size=3).build(), tmp_path)
    computed = first.image_vectors(images)
    np.testing.assert_allclose(computed, plain, rtol=1e-5, atol=1e-6)
    second = CachedEncoder(open_clip_config(models).build(), tmp_path)
    np.testing.assert_array_equal(second.image_vectors(images), computed)  # exactly what was stored
    assert (second.stats.from_cache, second.stats.embedded) == (4, 0)
    assert second.folder.name.startswith(f"open_clip--{OPEN_CLIP_NAME}--")
