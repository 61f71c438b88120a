"""Concept dedup stage: merge concepts that name the same thing (3XCM paper §3.2.1 uses BGE-M3, cos >= 0.92).

Backends: `lexical` (embedded default), the cosine of character n-gram TF-IDF vectors of the normalised names;
`bge-m3`, the paper's method, the cosine of BGE-M3 dense vectors (needs the `embed` extra and the weights).
Every concept gets a decision row; a merged concept names the kept one and its score to it. The earlier concept
(lower id) is kept.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Protocol, TypedDict

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pydantic import Field

from data.concept_names import normalize
from data.schemas import CONCEPT_DEDUP, from_rows
from data.stage import BackendConfig, require
from data.unionfind import UnionFind


class LexicalConceptDedupConfig(BackendConfig["ConceptEmbedder"]):
    #: No model: nothing to hold the build's GPU slot for.
    holds_gpu_slot: ClassVar[bool] = False

    backend: Literal["lexical"] = "lexical"
    threshold: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="Cosine of character 2-4-gram TF-IDF vectors at or above which two concepts merge.",
    )
    ngram_range: tuple[int, int] = (2, 4)

    def build(self) -> LexicalEmbedder:
        return LexicalEmbedder(self)


class BgeM3ConceptDedupConfig(BackendConfig["ConceptEmbedder"]):
    """The paper's concept dedup (§3.2.1): BGE-M3 dense vectors, two concepts merge at cosine >= 0.92."""

    #: Inside a Prefect run the model holds the build's GPU concurrency slot, so builds sharing a GPU take turns.
    holds_gpu_slot: ClassVar[bool] = True

    backend: Literal["bge-m3"] = "bge-m3"
    model: str = Field(
        default="BAAI/bge-m3",
        description="A local folder with the weights, or a Hugging Face hub id (looked up in the local hub cache).",
    )
    device: str = Field(default="cpu", description="Torch device, e.g. cpu or cuda:0 (one device: no worker pool).")
    use_fp16: bool | None = Field(
        default=None, description="Half-precision weights; None means on for CUDA devices, off elsewhere."
    )
    threshold: float = Field(default=0.92, gt=0, le=1, description="Cosine at or above which two concepts merge.")
    batch_size: int = Field(default=64, ge=1)
    max_length: int = Field(default=64, ge=8, description="Tokens per concept name; names are a few words.")
    local_files_only: bool = Field(
        default=True,
        description="Never download: a hub id must already be in the local cache. Off lets FlagEmbedding download.",
    )

    @property
    def fp16(self) -> bool:
        return self.use_fp16 if self.use_fp16 is not None else self.device.startswith("cuda")

    def build(self) -> BgeM3Embedder:
        return BgeM3Embedder(self)


ConceptDedupConfig = Annotated[LexicalConceptDedupConfig | BgeM3ConceptDedupConfig, Field(discriminator="backend")]


class ConceptEmbedder(Protocol):
    method: str

    def similarity(self, names: list[str]) -> npt.NDArray[np.floating]:
        """A symmetric (n, n) similarity matrix with 1.0 on the diagonal."""
        ...


class LexicalEmbedder:
    method = "lexical_char_ngram"

    def __init__(self, config: LexicalConceptDedupConfig) -> None:
        self.config = config

    def similarity(self, names: list[str]) -> npt.NDArray[np.float64]:
        from sklearn.feature_extraction.text import TfidfVectorizer

        vectors = TfidfVectorizer(analyzer="char_wb", ngram_range=self.config.ngram_range).fit_transform(
            [normalize(n) for n in names]
        )
        similarity: npt.NDArray[np.float64] = (vectors @ vectors.T).toarray()
        return similarity


class BgeM3Embedder:
    """Cosine of L2-normalised BGE-M3 dense vectors; the model is loaded once per process and config."""

    def __init__(self, config: BgeM3ConceptDedupConfig) -> None:
        self.config = config
        # A folder is named by its last part: a machine path has no place in a published table.
        is_folder = _looks_like_path(config.model) or Path(config.model).expanduser().is_dir()
        label = Path(config.model).name if is_folder else config.model
        self.method = f"bge-m3:{label}"
        self.model_path = resolve_model_path(config)  # a missing model fails when built, not at the first batch

    def vectors(self, names: list[str]) -> npt.NDArray[np.float32]:
        model = _load_bge_m3(self.model_path, self.config.device, self.config.fp16)
        out = model.encode(
            list(names),
            batch_size=self.config.batch_size,
            max_length=self.config.max_length,
            return_dense=True,
            return_sparse=False,
            return_colbert_vecs=False,
        )
        vectors = np.asarray(out["dense_vecs"], dtype=np.float32).reshape(len(names), -1)
        # The model normalises already; again in float32 because fp16 vectors drift from unit length.
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit: npt.NDArray[np.float32] = vectors / np.maximum(norms, 1e-12)
        return unit

    def similarity(self, names: list[str]) -> npt.NDArray[np.float32]:
        vectors = self.vectors(names)
        sim: npt.NDArray[np.float32] = vectors @ vectors.T  # ~150 concepts: one small matmul, no Python loop over pairs
        sim = np.clip((sim + sim.T) / 2, -1.0, 1.0)  # exactly symmetric, rounding kept inside [-1, 1]
        np.fill_diagonal(sim, 1.0)
        return sim


def resolve_model_path(config: BgeM3ConceptDedupConfig) -> str:
    """A folder holding the weights; with `local_files_only` a missing folder or uncached hub id is an error here,
    not a silent download attempt deep inside FlagEmbedding."""
    path = Path(config.model).expanduser()
    if path.is_dir():
        return str(path)
    if _looks_like_path(config.model):
        raise FileNotFoundError(
            f"BGE-M3 weights not found: folder {config.model!r} does not exist. Point concept_dedup.model at a "
            "folder holding the model (e.g. `huggingface-cli download BAAI/bge-m3 --local-dir <folder>`)."
        )
    if not config.local_files_only:
        return config.model  # FlagEmbedding downloads a hub id itself
    hub = require("huggingface_hub", "embed")
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return str(hub.snapshot_download(config.model, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError) as exc:
        raise FileNotFoundError(
            f"BGE-M3 weights not found: {config.model!r} is neither a local folder nor in the Hugging Face cache, "
            "and local_files_only is set. Download it first (`huggingface-cli download BAAI/bge-m3`), point "
            "concept_dedup.model at a folder, or set concept_dedup.local_files_only: false."
        ) from exc


def _looks_like_path(model: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else that names a location is a path."""
    return model.startswith((".", "/", "~")) or "\\" in model or model.count("/") > 1


_models: dict[tuple[str, str, bool], Any] = {}
_models_lock = threading.Lock()


def _load_bge_m3(path: str, device: str, fp16: bool) -> Any:
    """One model per (weights, device, precision) in this process, so a rerun in the same process is cheap."""
    key = (path, device, fp16)
    with _models_lock:
        if key not in _models:
            flag_embedding = require("FlagEmbedding", "embed")
            _models[key] = flag_embedding.BGEM3FlagModel(path, use_fp16=fp16, devices=device, normalize_embeddings=True)
        return _models[key]


class ConceptDedupRow(TypedDict):
    """A CONCEPT_DEDUP row: a concept, whether it is kept, and what it merges into."""

    concept_id: int
    concept: str
    normalized: str
    keep: bool
    duplicate_of: int | None
    score: float | None
    nearest_id: int | None
    method: str
    reason: str | None


def decide_concept_merges(
    concept_ids: list[int], names: list[str], similarity: npt.NDArray[np.floating], threshold: float, method: str
) -> list[ConceptDedupRow]:
    """Union concepts at or above `threshold`; each group keeps its lowest id."""
    n = len(names)
    groups = UnionFind(n)
    sim = similarity.copy()
    np.fill_diagonal(sim, -np.inf)
    rows_i, cols_j = np.nonzero(np.triu(sim >= threshold, k=1))
    for i, j in zip(rows_i.tolist(), cols_j.tolist(), strict=True):
        groups.union(i, j)
    keeper: dict[int, int] = {}
    for i in sorted(range(n), key=lambda k: concept_ids[k]):
        keeper.setdefault(groups.find(i), i)
    rows: list[ConceptDedupRow] = []
    for i in range(n):
        kept = keeper[groups.find(i)]
        nearest = int(np.argmax(sim[i])) if n > 1 else None
        merged = kept != i
        rows.append(
            {
                "concept_id": concept_ids[i],
                "concept": names[i],
                "normalized": normalize(names[i]),
                "keep": not merged,
                "duplicate_of": concept_ids[kept] if merged else None,
                "score": float(similarity[i, kept])
                if merged
                else (float(sim[i, nearest]) if nearest is not None else None),
                "nearest_id": concept_ids[nearest] if nearest is not None else None,
                "method": method,
                "reason": f"duplicate_concept(>= {threshold})" if merged else None,
            }
        )
    return rows


def run_concept_dedup(config: ConceptDedupConfig, concepts: pa.Table) -> pa.Table:
    embedder = config.build()
    ids = concepts["concept_id"].to_pylist()
    names = concepts["concept"].to_pylist()
    if not names:
        return from_rows([], CONCEPT_DEDUP)
    rows = decide_concept_merges(ids, names, embedder.similarity(names), config.threshold, embedder.method)
    return from_rows(rows, CONCEPT_DEDUP)
