"""A per-model, on-disk cache of image vectors, keyed by the sha256 of each image's bytes.

The same images recur across evaluations (RQ2 and RQ3 candidates, releases of one build, reruns), and embedding
them is the expensive part of evaluating a model. `CachedEncoder` wraps any `TextImageEncoder`:

- One folder per model: `<cache_root>/<model_id>--<weights sha256[:16] or "unhashed">--<precision>`. fp16 and fp32
  vectors differ, so the precision is part of the key; the device is not (the same weights and precision give the
  same vectors up to rounding).
- One `.npy` file per image, `<sha256[:2]>/<sha256>.npy`, float32, written to a temporary sibling and renamed into
  place: a reader sees a whole file or none, and two processes filling one folder at worst both write the same
  entry. `model.json` records the identity and the dimension.
- An entry that does not load as a finite 1-d float32 vector of the model's dimension is recomputed and rewritten,
  never an error. A torn write after a crash reads as such an entry.
- Only images that miss are loaded and embedded; their bytes must hash to the `ImageRef.sha256` they came with,
  since that hash is the key a later run trusts without loading the image. An image without a valid sha256 (not
  64 hex digits) cannot be keyed: it is embedded every time and never stored.
- Text vectors are not cached (queries are few), and an encoder that reads no image bytes (`needs_image_bytes`
  False: the `embeddings` backend, which only looks vectors up) is passed straight through.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from evaluation.models.encoders import ImageRef, ModelIdentity, TextImageEncoder, slug

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
META_FILE = "model.json"


@dataclass
class CacheStats:
    """Counters over the wrapper's lifetime, in images (a sha256 repeated within one call counts each time)."""

    requested: int = 0  # images asked for
    from_cache: int = 0  # served from disk
    embedded: int = 0  # run through the model (distinct sha256s)
    corrupt: int = 0  # unreadable or wrong-shaped entries found, recomputed and rewritten
    bypassed: int = 0  # passed straight through (a backend that only looks vectors up)
    uncacheable: int = 0  # embedded but not stored: no valid sha256 to key them by


def cache_folder_name(identity: ModelIdentity) -> str:
    """The folder a model's vectors live in: its id, weights hash and precision."""
    return slug(identity.model_id, (identity.weights_sha256 or "unhashed")[:16], identity.precision)


class CachedEncoder:
    """A `TextImageEncoder` whose image vectors are read from, and written to, a per-model folder."""

    def __init__(self, encoder: TextImageEncoder, cache_root: str | Path) -> None:
        self.encoder = encoder
        self.stats = CacheStats()
        self.bypass = not encoder.needs_image_bytes
        self.folder = Path(cache_root).expanduser() / cache_folder_name(encoder.identity)
        self._dim: int | None = None  # from model.json, or the first vector computed

    @property
    def identity(self) -> ModelIdentity:
        return self.encoder.identity

    @property
    def runs_locally(self) -> bool:
        return self.encoder.runs_locally

    @property
    def needs_image_bytes(self) -> bool:
        return self.encoder.needs_image_bytes

    def text_vectors(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.encoder.text_vectors(texts)

    def image_vectors(
        self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None
    ) -> npt.NDArray[np.float32]:
        """Cached rows from disk, the rest from the wrapped encoder (each distinct sha256 once), in input order.
        `progress` hears of the cached images first, then of each batch the encoder runs."""
        if self.bypass or not images:  # nothing to cache; the encoder knows its dimension for zero rows
            self.stats.bypassed += len(images)
            return self.encoder.image_vectors(images, progress)
        self.stats.requested += len(images)
        # An image without a usable hash gets a key of its own that no file is named by: embedded, never stored.
        shas = [sha if _SHA256.match(sha := ref.sha256.lower()) else f"nohash:{i}" for i, ref in enumerate(images)]
        self._dim = self._dim or self._read_dim()
        found: dict[str, npt.NDArray[np.float32]] = {}
        first_ref: dict[str, ImageRef] = {}
        corrupt = 0
        for sha, ref in zip(shas, images, strict=True):
            if sha in found or sha in first_ref:
                continue
            if sha.startswith("nohash:"):
                first_ref[sha] = ref
                continue
            vector, damaged = self._read(sha)
            corrupt += damaged
            if vector is None:
                first_ref[sha] = ref
            else:
                found[sha] = vector
        if corrupt:
            log.warning("embedding cache %s: %d damaged entries, recomputing them", self.folder, corrupt)
            self.stats.corrupt += corrupt
        hits = sum(sha in found for sha in shas)
        self.stats.from_cache += hits
        if progress is not None and hits:
            progress(hits)
        if first_ref:
            misses = list(first_ref)
            keyed = [_verified(first_ref[sha]) if not sha.startswith("nohash:") else first_ref[sha] for sha in misses]
            computed = self.encoder.image_vectors(keyed, progress)
            if computed.ndim != 2 or computed.shape[0] != len(misses):
                raise RuntimeError(
                    f"embedding cache: the encoder returned shape {computed.shape} for {len(misses)} images"
                )
            self._remember_dim(computed.shape[1])
            for sha, vector in zip(misses, computed, strict=True):
                vector = np.ascontiguousarray(vector, dtype=np.float32)
                if sha.startswith("nohash:"):
                    self.stats.uncacheable += 1
                else:
                    self._write(sha, vector)
                found[sha] = vector
            self.stats.embedded += len(misses)
            repeats = len(shas) - hits - len(misses)  # later copies of an image embedded in this call
            if progress is not None and repeats:
                progress(repeats)
        return np.stack([found[sha] for sha in shas]).astype(np.float32, copy=False)

    # -- disk -----------------------------------------------------------------------------------------------------

    def _entry(self, sha: str) -> Path:
        return self.folder / sha[:2] / f"{sha}.npy"

    def _read(self, sha: str) -> tuple[npt.NDArray[np.float32] | None, int]:
        """(vector or None, 1 if the entry exists but is damaged)."""
        path = self._entry(sha)
        try:
            vector = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            return None, 0
        except (OSError, ValueError, EOFError):
            return None, 1
        ok = (
            isinstance(vector, np.ndarray)
            and vector.ndim == 1
            and vector.dtype == np.float32
            and vector.size > 0
            and (self._dim is None or vector.size == self._dim)
            and bool(np.isfinite(vector).all())
        )
        if not ok:
            return None, 1
        if self._dim is None:
            self._dim = vector.size  # no model.json (removed): the first good entry sets the dimension
        return vector, 0

    def _write(self, sha: str, vector: npt.NDArray[np.float32]) -> None:
        path = self._entry(sha)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", suffix=".npy", delete=False) as handle:
            np.save(handle, vector, allow_pickle=False)
        os.replace(handle.name, path)  # atomic: readers see the old entry or the new one, never half of one

    def _read_dim(self) -> int | None:
        try:
            meta = json.loads((self.folder / META_FILE).read_text())
            return int(meta["dim"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing or damaged: the entries themselves set the dimension

    def _remember_dim(self, dim: int) -> None:
        if self._dim is not None and self._dim != dim:
            raise RuntimeError(
                f"embedding cache {self.folder} holds {self._dim}-d vectors but {self.identity.model_id} gives "
                f"{dim}-d ones: the folder belongs to another model; remove it."
            )
        if self._dim is None or not (self.folder / META_FILE).is_file():
            self.folder.mkdir(parents=True, exist_ok=True)
            # (a display name is a label: the cache's record is the same whatever a run calls the model)
            meta = {"dim": dim, "identity": self.identity.model_dump(mode="json", exclude={"display_name"})}
            with tempfile.NamedTemporaryFile("w", dir=self.folder, prefix=".tmp-", delete=False) as handle:
                json.dump(meta, handle, indent=2, sort_keys=True)
            os.replace(handle.name, self.folder / META_FILE)
        self._dim = dim


def _verified(ref: ImageRef) -> ImageRef:
    """`ref` whose loader checks the bytes against its sha256: a wrong hash would file a vector under another
    image's key, and every later run would trust it."""

    def load() -> bytes:
        data = ref.load()
        digest = hashlib.sha256(data).hexdigest()
        if digest != ref.sha256.lower():
            raise ValueError(
                f"embedding cache: image {ref.image_id!r} was given sha256 {ref.sha256[:12]}… but its bytes hash "
                f"to {digest[:12]}…"
            )
        return data

    return ImageRef(ref.image_id, ref.sha256, load)
