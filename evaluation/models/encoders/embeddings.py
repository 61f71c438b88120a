"""The `embeddings` backend: vectors computed elsewhere (another framework, an API), read from two Parquet files
and looked up by image_id and by exact query text; no model runs and no image is read.

Both files are checked when the backend is built (magic bytes, footer and schema before any data; then types,
nulls, non-finite and zero vectors, duplicate keys, one dimension), each error naming the file and the problem.

Files may say which model made them: the Parquet metadata `culturebench.model` (`MODEL_METADATA_KEY`), a small JSON
object `{"name": ..., "revision": ..., "harness": ...}` that the mteb export's runner (`run_mteb.py --save-vectors`)
writes. The identity then names that model (`name`, and `vectors_from`), so a result of such vectors says which
model it scores. The value is read as untrusted: too long, not UTF-8, not such an object, or text that is not one
printable line is an error naming the file and the key; two files naming two models are refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field, field_validator

from data.clients.model_ids import slug
from data.stage import BackendConfig
from data.workspace import sha256_bytes
from evaluation.models.encoders.base import STAGE, ImageRef, ModelIdentity, TextImageEncoder, VectorsFrom
from evaluation.models.vectors import degenerate_rows


class EmbeddingsEncoderConfig(BackendConfig[TextImageEncoder]):
    """Vectors computed elsewhere (another framework, an API), read from two Parquet files; no model runs."""

    backend: Literal["embeddings"] = "embeddings"
    image_embeddings: str = Field(
        description="Parquet file (a local path or fsspec URL) with columns image_id (string) and embedding "
        "(list of float): one row per image of the release."
    )
    text_embeddings: str = Field(
        description="Parquet file with columns text (string, the exact query text) and embedding (list of float)."
    )
    name: str | None = Field(
        default=None,
        description="What the results call the model (a config file's field; the command line's --name is the "
        "display name, which leaves the model_id alone); its filesystem-safe form is the model_id (default: the "
        "model the files' metadata names, else the image file's name without .parquet, plus the first 12 hex "
        "digits of both files' hash).",
    )

    @field_validator("name")
    @classmethod
    def _named(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("name is empty")
        return value

    def build(self) -> EmbeddingsEncoder:
        """Reads and checks both files now: a bad file fails before any scoring."""
        return EmbeddingsEncoder(self)


@dataclass(frozen=True)
class _Lookup:
    """One validated Parquet file: key -> row of a float32 matrix, and the model its metadata names (if any)."""

    path: str
    sha256: str
    rows: dict[str, int]
    matrix: npt.NDArray[np.float32]
    carried: VectorsFrom | None = None


#: Every Parquet file starts and ends with these four bytes.
PARQUET_MAGIC = b"PAR1"
#: A Parquet footer (schema and row-group index) larger than this is not an embeddings file's: refused unread.
MAX_PARQUET_FOOTER_BYTES = 64 << 20
_HASH_CHUNK = 8 << 20
#: The Parquet metadata key under which a file says which model computed its vectors (run_mteb.py writes it).
MODEL_METADATA_KEY = "culturebench.model"
#: Its value is a model's name, revision and harness: a few hundred bytes; a longer one is refused unread.
MAX_MODEL_METADATA_BYTES = 4096
#: A name, a revision or a harness read from it: one printable line of at most this many characters.
MAX_CARRIED_TEXT = 200


def _carried_text(value: object, key: str, where: str, required: bool) -> str | None:
    what = f"{where}: metadata {MODEL_METADATA_KEY!r} field {key!r}"
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be text (a non-empty string), not {type(value).__name__}.")
    if len(value) > MAX_CARRIED_TEXT:
        raise ValueError(f"{what} is {len(value)} characters long, more than {MAX_CARRIED_TEXT}.")
    if not value.isprintable():
        raise ValueError(f"{what} holds a character that is not printable (one line of text expected).")
    return value


def _carried_model(raw: bytes | None, where: str) -> VectorsFrom | None:
    """The model a file's `culturebench.model` metadata names, or None without that key; untrusted: any problem is
    one line naming the file and the key, and none of the value is echoed."""
    if raw is None:
        return None
    what = f"{where}: metadata {MODEL_METADATA_KEY!r}"
    if len(raw) > MAX_MODEL_METADATA_BYTES:
        raise ValueError(f"{what} is {len(raw)} bytes, more than {MAX_MODEL_METADATA_BYTES} (a model's name).")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8 text.") from None
    except (ValueError, RecursionError):
        raise ValueError(f"{what} is not JSON.") from None
    if not isinstance(data, dict):
        raise ValueError(f'{what} must be a JSON object {{"name": ..., "revision": ..., "harness": ...}}.')
    name = _carried_text(data.get("name"), "name", where, required=True)
    revision = _carried_text(data.get("revision"), "revision", where, required=False)
    harness = _carried_text(data.get("harness"), "harness", where, required=False)
    return VectorsFrom(name=str(name), revision=revision, harness=harness)


def _parquet_reader(handle: Any, size: int, where: str) -> pq.ParquetFile:
    """The file as a ParquetFile, from its magic bytes and its footer only (no data page is read): a file that is
    not Parquet, however large, is refused from its first and last bytes."""
    if size < 12:
        raise ValueError(f"{where} is not a readable Parquet file: {size} bytes, fewer than any Parquet file has.")
    head = handle.read(4)
    handle.seek(size - 8)
    tail = handle.read(8)
    if head != PARQUET_MAGIC or tail[4:] != PARQUET_MAGIC:
        raise ValueError(
            f"{where} is not a readable Parquet file: it does not start and end with {PARQUET_MAGIC.decode()} "
            f"(it starts with {head!r})."
        )
    footer = int.from_bytes(tail[:4], "little")
    if not 0 < footer <= min(size - 12, MAX_PARQUET_FOOTER_BYTES):
        raise ValueError(
            f"{where} is not a readable Parquet file: its footer claims {footer} bytes of a {size}-byte file "
            f"(at most {MAX_PARQUET_FOOTER_BYTES >> 20} MB are read)."
        )
    handle.seek(0)
    try:
        return pq.ParquetFile(handle)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{where} is not a readable Parquet file: {' '.join(str(exc).split())}") from None


def _file_sha256(handle: Any) -> str:
    handle.seek(0)
    digest = hashlib.sha256()
    while chunk := handle.read(_HASH_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _read_embeddings(path: str, key: str, field: str) -> _Lookup:
    """Read and check one file: the two columns and their types, no nulls, non-finite values or zero vectors, no
    duplicate keys, one dimension. The magic bytes, footer and schema are checked before any data is read. Each
    error names the file and the problem."""
    import fsspec

    where = f"{STAGE}: {field} {path!r}"
    try:
        fs, fs_path = fsspec.core.url_to_fs(path)
    except (ValueError, ImportError) as exc:
        raise ValueError(f"{where} is not a usable path or fsspec URL: {exc}") from exc
    if not fs.isfile(fs_path):
        raise FileNotFoundError(f"{where} does not exist.")
    with fs.open(fs_path, "rb") as handle:
        reader = _parquet_reader(handle, int(fs.size(fs_path)), where)
        carried = _carried_model((reader.metadata.metadata or {}).get(MODEL_METADATA_KEY.encode()), where)
        names = reader.schema_arrow.names
        missing = [name for name in (key, "embedding") if name not in names]
        if missing:
            raise ValueError(
                f"{where} lacks column(s) {', '.join(missing)}; it has {', '.join(names) or 'none'} "
                f"(expected {key}: string, embedding: list of float)."
            )
        try:
            table = reader.read(columns=[key, "embedding"])
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{where} is not a readable Parquet file: {' '.join(str(exc).split())}") from None
        digest = _file_sha256(handle)
    if table.num_rows == 0:
        raise ValueError(f"{where} has no rows.")
    keys, vectors = table[key].combine_chunks(), table["embedding"].combine_chunks()
    if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
        raise ValueError(f"{where}: column {key} must be string, not {keys.type}.")
    is_list = pa.types.is_list(vectors.type) or pa.types.is_large_list(vectors.type)
    if not (is_list or pa.types.is_fixed_size_list(vectors.type)) or not pa.types.is_floating(vectors.type.value_type):
        raise ValueError(f"{where}: column embedding must be a list of float, not {vectors.type}.")
    for name, column in ((key, keys), ("embedding", vectors)):
        if column.null_count:
            raise ValueError(f"{where}: column {name} has {column.null_count} null(s).")
    values = vectors.flatten()  # honours slices and offsets, unlike .values
    if values.null_count:
        raise ValueError(f"{where}: column embedding holds {values.null_count} null value(s) inside its lists.")
    lengths = pc.list_value_length(vectors).to_numpy(zero_copy_only=False)
    dim = int(lengths[0])
    if (lengths == 0).any():
        odd = int(np.flatnonzero(lengths == 0)[0])
        raise ValueError(f"{where}: row {odd} ({key} {keys[odd].as_py()!r}) has an empty embedding.")
    if (lengths != dim).any():
        odd = int(np.flatnonzero(lengths != dim)[0])
        raise ValueError(
            f"{where}: embeddings must share one length; row {odd} ({key} {keys[odd].as_py()!r}) has "
            f"{int(lengths[odd])} values where row 0 has {dim}."
        )
    matrix = values.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(keys), dim)
    nonfinite, zero = degenerate_rows(matrix)
    if len(nonfinite):
        raise ValueError(
            f"{where}: {len(nonfinite)} embedding(s) hold NaN or infinite values "
            f"(e.g. {key} {keys[int(nonfinite[0])].as_py()!r})."
        )
    # A zero vector has no direction: its cosine with anything is 0, so every candidate ties and the slot order
    # would decide (M_cr = 1, SP = 0 from nothing measured).
    if len(zero):
        raise ValueError(
            f"{where}: {len(zero)} embedding(s) have zero norm (all zeros, e.g. {key} "
            f"{keys[int(zero[0])].as_py()!r}); a vector without a direction cannot be scored."
        )
    names = keys.to_pylist()
    rows = {name: i for i, name in enumerate(names)}
    if len(rows) != len(names):
        counts = pc.value_counts(keys)
        dupes = [item["values"].as_py() for item in counts if item["counts"].as_py() > 1]
        raise ValueError(
            f"{where}: {len(dupes)} {key} value(s) occur more than once, e.g. {', '.join(map(repr, dupes[:3]))}."
        )
    return _Lookup(path, digest, rows, matrix, carried)


def _take(lookup: _Lookup, keys: Sequence[str], what: str) -> npt.NDArray[np.float32]:
    missing = [k for k in keys if k not in lookup.rows]
    if missing:
        examples = ", ".join(repr(k) for k in list(dict.fromkeys(missing))[:5])
        raise KeyError(
            f"{STAGE}: {len(missing)} of {len(keys)} {what} have no vector in {lookup.path!r}, e.g. {examples}"
        )
    return lookup.matrix[[lookup.rows[k] for k in keys]]  # fancy indexing: a copy, safe to modify


class EmbeddingsEncoder:
    """Looks vectors up by image_id and by exact query text; never loads an image."""

    runs_locally = False
    needs_image_bytes = False

    def __init__(self, config: EmbeddingsEncoderConfig) -> None:
        self.config = config
        self.images = _read_embeddings(config.image_embeddings, "image_id", "EmbeddingsEncoderConfig.image_embeddings")
        self.texts = _read_embeddings(config.text_embeddings, "text", "EmbeddingsEncoderConfig.text_embeddings")
        image_dim, text_dim = self.images.matrix.shape[1], self.texts.matrix.shape[1]
        if image_dim != text_dim:
            raise ValueError(
                f"{STAGE}: image embeddings {config.image_embeddings!r} are {image_dim}-d but text embeddings "
                f"{config.text_embeddings!r} are {text_dim}-d; both must come from one model's shared space."
            )
        carried = self.images.carried or self.texts.carried
        if self.texts.carried is not None and self.texts.carried != carried:
            raise ValueError(
                f"{STAGE}: image embeddings {config.image_embeddings!r} and text embeddings "
                f"{config.text_embeddings!r} name two models in their {MODEL_METADATA_KEY!r} metadata; both must "
                "come from one model's shared space."
            )
        stem = config.image_embeddings.rstrip("/").rsplit("/", 1)[-1].removesuffix(".parquet")
        name = config.name or (carried.name if carried is not None else stem)
        digest = sha256_bytes(f"{self.images.sha256}\n{self.texts.sha256}".encode())
        # Unnamed vectors are told apart by their files' hash: two sets both called IMG.parquet are two models.
        # Vectors whose files name their model (run_mteb.py's) get that model's name in place of the file's stem
        # (every mteb run writes IMG.parquet: the stem says nothing), so the folder says which model made them. The
        # id keeps `embeddings--`: they are another tool's vectors scored here, not our backend's run of that
        # model (its preprocessing and batching are its own), so never that backend's result folder or cache. And
        # it keeps the files' hash: the same name is written for other weights (mteb's local/<folder>) and for
        # another release's vectors. Files without the metadata keep the id they always had.
        self.identity = ModelIdentity(
            backend="embeddings",
            model_id=slug("embeddings", name) if config.name else slug("embeddings", name, digest[:12]),
            name=name,
            weights_sha256=digest,
            device="n/a",
            precision="n/a",
            vectors_from=carried,
        )

    def image_vectors(
        self, images: Sequence[ImageRef], progress: Callable[[int], None] | None = None
    ) -> npt.NDArray[np.float32]:
        vectors = _take(self.images, [ref.image_id for ref in images], "images")
        if progress is not None and len(images):
            progress(len(images))
        return vectors

    def text_vectors(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return _take(self.texts, list(texts), "query texts")
