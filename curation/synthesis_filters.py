"""Automatic filters for synthesized MixCuBe images (MixCuBe paper App. A.6).

Each synthesis attempt is a pair (original bytes, synthesized bytes). Two scores decide whether it goes on to human
QA:

- BRISQUE of the synthesized image (no-reference quality; higher is worse): discard when > 80 (App. A.6).
- CLIP image-image cosine similarity between original and synthesized: discard outside [0.65, 0.98] (App. A.6:
  too low and the cultural marker may be distorted, too high and the edit is no challenge).

One row per attempt, in input order, with both scores, the backends that produced them and a verdict; an image that
does not decode or cannot be scored is a row with verdict "error", never an exception. A disabled filter scores None
and names its backend "off".

BRISQUE runs on piq 0.8, whose SVM weights are fetched at runtime from GitHub into the torch hub cache. A build must
never download silently, so the weights file is resolved (and hashed) here, and piq is handed those tensors: its
`_score_svr` gets them through the module-level name `load_url`, which is swapped for a loader of our tensors under
a lock for the duration of each call (narrower than re-pointing the process-wide torch hub directory, which every
torch.hub user in the process would see). The shape of piq's source that this relies on is checked when the backend
is built, so a piq that loads its weights another way fails loudly instead of downloading.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypedDict

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, model_validator

from curation.image_embeddings import ImageEmbedder, OpenClipEmbeddingConfig
from curation.image_thumbnails import decode_normalized
from data.review_labels import ERROR, KEEP, REJECT_BRISQUE, REJECT_CLIP_HIGH, REJECT_CLIP_LOW, VERDICTS
from data.row_errors import error_text
from data.schemas import SYNTHESIS_FILTER_SCORES, FilterScoresRow, from_rows
from data.stage import BackendConfig, require, required_file
from data.workspace import file_sha256

# App. A.6: "images with either BRISQUE score of greater than 80 or CLIP similarity outside the range (65 - 98)
# are discarded".
BRISQUE_MAX = 80.0
CLIP_MIN = 0.65
CLIP_MAX = 0.98

PIQ_WEIGHTS_NAME = "brisque_svm_weights.pt"
PIQ_WEIGHTS_URL = "https://github.com/photosynthesis-team/piq/releases/download/v0.4.0/brisque_svm_weights.pt"
BRISQUE_FEATURES = 36  # 18 natural-scene statistics at each of 2 scales

OFF = "off"

# One row per attempt, in the order of the pairs given. The lead may move this next to the other schemas.

MAX_ERROR_TEXT = 300


class BrisqueConfig(BackendConfig["BrisqueScorer"]):
    """BRISQUE with piq; the SVM weights file is named or looked up in piq's cache, never downloaded here."""

    backend: Literal["piq"] = "piq"
    weights_path: str | None = Field(
        default=None,
        description="piq's BRISQUE SVM weights file (brisque_svm_weights.pt: a torch-saved (sv_coef, sv) tuple). "
        "None: piq's own cache location, torch.hub.get_dir()/checkpoints/brisque_svm_weights.pt. A missing file "
        "is an error; it is never downloaded during a build.",
    )
    max_score: float = Field(
        default=BRISQUE_MAX, description="Discard an attempt whose BRISQUE score is greater than this (App. A.6)."
    )

    def build(self) -> PiqBrisque:
        return PiqBrisque(self)


class ClipSimilarityConfig(BaseModel):
    """CLIP image-image similarity between original and synthesized image, with the project's image embedder."""

    model_config = ConfigDict(extra="forbid")

    embedder: OpenClipEmbeddingConfig = Field(description="The open_clip image tower and its weights.")
    min_similarity: float = Field(
        default=CLIP_MIN, ge=-1.0, le=1.0, description="Discard below this cosine similarity (App. A.6)."
    )
    max_similarity: float = Field(
        default=CLIP_MAX, ge=-1.0, le=1.0, description="Discard above this cosine similarity (App. A.6)."
    )

    @model_validator(mode="after")
    def _bounds_ordered(self) -> ClipSimilarityConfig:
        if not self.min_similarity < self.max_similarity:
            raise ValueError(
                f"min_similarity ({self.min_similarity}) must be less than max_similarity ({self.max_similarity})"
            )
        return self


class SynthesisFilterConfig(BaseModel):
    """Both automatic filters; None switches one off (its score is then null and its backend "off")."""

    model_config = ConfigDict(extra="forbid")

    brisque: BrisqueConfig | None = Field(
        default_factory=BrisqueConfig, description="The BRISQUE filter, or None to skip it."
    )
    clip: ClipSimilarityConfig | None = Field(
        default=None, description="The CLIP similarity filter, or None to skip it (it needs trained CLIP weights)."
    )
    chunk_size: int = Field(
        default=32, ge=1, description="Pairs decoded and scored together; bounds the decoded images held in memory."
    )


class BrisqueScorer(Protocol):
    backend_id: str  # names the implementation and the weights' content, recorded in every row

    def score(self, image: Image.Image) -> float:
        """BRISQUE of one RGB image (lower is better); raises when the image cannot be scored."""
        ...


def default_piq_weights_path() -> Path:
    """Where piq itself caches the file (torch.hub.load_state_dict_from_url's location)."""
    torch = require("torch", "synthesis")
    return Path(torch.hub.get_dir()) / "checkpoints" / PIQ_WEIGHTS_NAME


def resolve_brisque_weights(config: BrisqueConfig) -> Path:
    """The weights file, which must exist: piq would otherwise fetch it from GitHub inside the build."""
    if config.weights_path is not None:
        path = required_file(
            config.weights_path,
            "BRISQUE: weights file",
            "BrisqueConfig.weights_path",
            "a file",
            f"It is piq's {PIQ_WEIGHTS_NAME}, a torch-saved (sv_coef, sv) tuple of the LIVE BRISQUE SVM.",
        )
        return path.resolve()
    path = default_piq_weights_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"BRISQUE: piq's SVM weights are not in its cache ({path}) and builds never download them. Fetch them "
            f"once on a machine with internet access ({PIQ_WEIGHTS_URL}, e.g. "
            f"`python -c \"import torch; torch.hub.load_state_dict_from_url('{PIQ_WEIGHTS_URL}')\"`) and copy the "
            "file there, or set BrisqueConfig.weights_path to a copy of it (or switch the filter off with "
            "brisque: null)."
        )
    return path


def load_brisque_weights(path: Path) -> tuple[Any, Any]:
    """(sv_coef (N,), sv (N, 36)) float tensors, checked, so a wrong file fails at build time with its name."""
    torch = require("torch", "synthesis")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or non-torch file
        raise ValueError(f"BRISQUE: {path.name} is not a torch-saved weights file ({type(exc).__name__})") from exc
    ok = (
        isinstance(loaded, tuple | list)
        and len(loaded) == 2
        and all(isinstance(t, torch.Tensor) for t in loaded)
        and loaded[0].ndim == 1
        and loaded[1].shape == (loaded[0].shape[0], BRISQUE_FEATURES)
    )
    if not ok:
        raise ValueError(
            f"BRISQUE: {path.name} does not hold piq's (sv_coef[N], sv[N, {BRISQUE_FEATURES}]) tensor tuple."
        )
    return loaded[0].float(), loaded[1].float()


def _piq_brisque_module() -> Any:
    """piq's brisque *module* (`piq.brisque` as an attribute is the function), checked for the hook we use."""
    require("piq", "synthesis")
    module = importlib.import_module("piq.brisque")
    score_svr = getattr(module, "_score_svr", None)
    if not hasattr(module, "load_url") or score_svr is None or "load_url" not in score_svr.__code__.co_names:
        version = getattr(importlib.import_module("piq"), "__version__", "?")
        raise RuntimeError(
            f"BRISQUE: piq {version} no longer loads its SVM weights through piq.brisque.load_url; this backend was "
            "written against piq 0.8 and will not let piq download weights. Pin piq==0.8.0 or update "
            "curation/synthesis_filters.py."
        )
    return module


_piq_lock = threading.Lock()  # the swapped module global is process-wide


class PiqBrisque:
    """piq.brisque on one image at a time, with the weights from `resolve_brisque_weights`.

    One at a time, not batched: piq's float32 scores move by ~0.005 with the batch's other images (seen here), and a
    resumed build must score an attempt the same whatever it is batched with; on CPU batching saved little anyway.
    """

    def __init__(self, config: BrisqueConfig) -> None:
        self.config = config
        self.module = _piq_brisque_module()
        path = resolve_brisque_weights(config)
        self.sv_coef, self.sv = load_brisque_weights(path)
        version = getattr(importlib.import_module("piq"), "__version__", "?")
        # The file name and content hash, never the machine path: the id goes into tables.
        self.backend_id = f"piq-{version}:{path.name}:sha256-{file_sha256(path)[:12]}"

    def _load_url(self, url: str, map_location: Any = None, **_: Any) -> tuple[Any, Any]:
        if not url.endswith("/" + PIQ_WEIGHTS_NAME):
            raise RuntimeError(f"BRISQUE: piq asked for unexpected weights {url!r}; refusing to download")
        # Copies: piq transposes sv in place (sv.t_()).
        device = map_location if map_location is not None else "cpu"
        return self.sv_coef.clone().to(device), self.sv.clone().to(device)

    def score(self, image: Image.Image) -> float:
        torch = require("torch", "synthesis")
        pixels = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
        x = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))[None]
        with _piq_lock, torch.inference_mode():
            original = self.module.load_url
            self.module.load_url = self._load_url
            try:
                value = float(self.module.brisque(x, data_range=1.0, reduction="none")[0])
            finally:
                self.module.load_url = original
        if not math.isfinite(value):
            raise ValueError(f"BRISQUE is {value}")
        return value


def _row(
    filters: SynthesisFilter, brisque: float | None, clip: float | None, verdict: str, reason: str | None
) -> FilterScoresRow:
    return {
        "brisque": brisque,
        "clip_similarity": clip,
        "brisque_backend": filters.brisque_backend,
        "clip_backend": filters.clip_backend,
        "verdict": verdict,
        "reason": reason,
    }


class SynthesisFilter:
    """Both filters built once (weights checked, hashed; CLIP loaded on first use); `score` gives the rows."""

    def __init__(self, config: SynthesisFilterConfig) -> None:
        self.config = config
        self.brisque: BrisqueScorer | None = config.brisque.build() if config.brisque else None
        self.embedder: ImageEmbedder | None = config.clip.embedder.build() if config.clip else None
        self.brisque_backend = self.brisque.backend_id if self.brisque else OFF
        self.clip_backend = self.embedder.model_id if self.embedder else OFF

    def score(self, pairs: Sequence[tuple[bytes, bytes]]) -> list[FilterScoresRow]:
        """One row of SYNTHESIS_FILTER_SCORES per (original bytes, synthesized bytes), in input order."""
        rows: list[FilterScoresRow] = []
        originals: dict[str, npt.NDArray[np.float32]] = {}  # one original serves many attempts: embed it once per call
        step = self.config.chunk_size
        for start in range(0, len(pairs), step):
            rows.extend(self._score_chunk(pairs[start : start + step], originals))
        return rows

    def _score_chunk(
        self, pairs: Sequence[tuple[bytes, bytes]], originals: dict[str, npt.NDArray[np.float32]]
    ) -> list[FilterScoresRow]:
        decoded: list[tuple[str, Image.Image | None, Image.Image] | None] = []
        rows: list[FilterScoresRow | None] = []
        pending: set[str] = set()  # originals decoded in this chunk, embedded with it
        for original_bytes, synthesized_bytes in pairs:
            try:
                synthesized = decode_normalized(synthesized_bytes)
            except Exception as exc:  # any decoder failure is this attempt's row
                decoded.append(None)
                rows.append(_row(self, None, None, ERROR, f"synthesized: {error_text(exc, MAX_ERROR_TEXT)}"))
                continue
            original = None
            key = hashlib.sha256(original_bytes).hexdigest()
            if self.embedder is not None and key not in originals and key not in pending:
                # Only CLIP looks at the original; with CLIP off an undecodable original does not matter.
                try:
                    original = decode_normalized(original_bytes)
                except Exception as exc:
                    decoded.append(None)
                    rows.append(_row(self, None, None, ERROR, f"original: {error_text(exc, MAX_ERROR_TEXT)}"))
                    continue
                pending.add(key)
            decoded.append((key, original, synthesized))
            rows.append(None)

        similarities = self._similarities(decoded, originals)
        for i, item in enumerate(decoded):
            if item is None:
                continue
            brisque, brisque_error = None, None
            if self.brisque is not None:
                try:
                    brisque = self.brisque.score(item[2])
                except Exception as exc:  # e.g. piq's asserts on a flat image
                    brisque_error = f"brisque: {error_text(exc, MAX_ERROR_TEXT)}"
            rows[i] = self._decide(brisque, brisque_error, similarities[i])
        return [row for row in rows if row is not None]

    def _similarities(
        self,
        decoded: list[tuple[str, Image.Image | None, Image.Image] | None],
        originals: dict[str, npt.NDArray[np.float32]],
    ) -> list[float | None]:
        if self.embedder is None:
            return [None] * len(decoded)
        new: dict[str, Image.Image] = {}
        for item in decoded:
            if item is not None and item[1] is not None and item[0] not in originals:
                new[item[0]] = item[1]
        synthesized = [item[2] for item in decoded if item is not None]
        vectors = _unit(self.embedder.embed([*new.values(), *synthesized]))
        originals.update(zip(new, vectors[: len(new)], strict=True))
        synth_vectors = iter(vectors[len(new) :])
        out: list[float | None] = []
        for item in decoded:
            if item is None:
                out.append(None)
                continue
            # Both unit length: the dot product is the cosine; clipped against float16 rounding past +-1.
            out.append(float(np.clip(originals[item[0]] @ next(synth_vectors), -1.0, 1.0)))
        return out

    def _decide(self, brisque: float | None, brisque_error: str | None, clip: float | None) -> FilterScoresRow:
        if brisque_error is not None:
            return _row(self, None, clip, ERROR, brisque_error)
        reasons: list[tuple[str, str]] = []
        if self.config.brisque is not None and brisque is not None and brisque > self.config.brisque.max_score:
            reasons.append((REJECT_BRISQUE, f"brisque {brisque:.2f} > {self.config.brisque.max_score:g}"))
        bounds = self.config.clip
        if bounds is not None and clip is not None:
            if clip < bounds.min_similarity:
                reasons.append((REJECT_CLIP_LOW, f"clip similarity {clip:.4f} < {bounds.min_similarity:g}"))
            elif clip > bounds.max_similarity:
                reasons.append((REJECT_CLIP_HIGH, f"clip similarity {clip:.4f} > {bounds.max_similarity:g}"))
        if not reasons:
            return _row(self, brisque, clip, KEEP, None)
        # The first failed filter names the verdict (BRISQUE first, as App. A.6 lists it); the reason lists all.
        return _row(self, brisque, clip, reasons[0][0], "; ".join(text for _, text in reasons))


def _unit(vectors: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
    """float16 unit rows from the embedder, renormalised in float32 so identical images give 1.0 within 1e-6."""
    vectors = vectors.astype(np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit: npt.NDArray[np.float32] = vectors / np.maximum(norms, 1e-12)
    return unit


def build_synthesis_filter(config: SynthesisFilterConfig) -> SynthesisFilter:
    """Check and hash the weights now (a missing file is an error here, before any attempt is scored)."""
    return SynthesisFilter(config)


def score_attempts(config: SynthesisFilterConfig, pairs: Sequence[tuple[bytes, bytes]]) -> list[FilterScoresRow]:
    """Rows of SYNTHESIS_FILTER_SCORES, one per (original bytes, synthesized bytes) pair, in input order."""
    return build_synthesis_filter(config).score(pairs)


def filter_table(rows: Sequence[FilterScoresRow]) -> pa.Table:
    return from_rows(rows, SYNTHESIS_FILTER_SCORES)


class Verdict(TypedDict):
    """What `verdict_counts` reads of a row (a FilterScoresRow, or its `verdict` column alone)."""

    verdict: str


def verdict_counts(rows: Sequence[Verdict]) -> dict[str, int]:
    """Rows per verdict, every verdict present (zeros included), for stage stats."""
    counts = dict.fromkeys(VERDICTS, 0)
    for row in rows:
        counts[row["verdict"]] += 1
    return counts
