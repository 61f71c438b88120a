"""A harness's prediction file scored by our MixCuBe scorer (`culturebench evaluate mixcube RELEASE --predictions
FILE`): the answers another harness (VLMEvalKit, lmms-eval) got from a model, brought back so that the paper's
correctness rule (`evaluation.mixcube.task.is_correct`), tables, figures and card apply to them unchanged.

One module per format under this package, registered in `FORMATS` by name. Each module provides

- `HARNESS: str`, the harness's name as the results card shows it;
- `read_labelled(path: Path, rows: pa.Table) -> tuple[dict[str, str], str]`: `read_predictions`'s answers and what
  the file is, as the result's source names it (`PredictionSource.harness`): `HARNESS` for the harness's own file,
  else its format (a plain CSV of `sample_id` and `prediction` is a `CSV`, never VLMEvalKit's);
- `read_predictions(path: Path, rows: pa.Table) -> dict[str, str]`: our `sample_id` -> the model's answer text.
  `rows` is the release's `default` table in its order (as the export wrote it), with at least `sample_id`,
  `category` and `image_sha256` (null for a row without image bytes: the exports leave it out, so no prediction is
  expected for it). A file may answer only some rows (a partial run: lmms-eval's `--limit`, an interrupted VLMEvalKit
  run): the answered rows are scored and the result says its coverage (`PredictionsVlm.coverage`). Anything wrong
  with the file (unreadable, a column missing or given twice, no row answered, an extra or repeated row, a row that
  names another sample, an answer longer than a model's may be or that is no Unicode text: `check_answer`) raises
  `PredictionsError` naming the file, on one line. A text file is streamed and refused at its first bad row
  (`evaluation.harnesses.predictions.rows.AnswerRows`), so what it costs is bounded by the release, whatever the file
  holds;
- `model_name(path: Path) -> str | None`: the model's name as the file's name gives it (None when it does not).

`PredictionsVlm` is a `VisionLanguageModel` that answers from the file: `evaluate_images` asks it exactly as it asks
a model (the image's bytes and its App. B.2 prompt), and it looks the row up by the sha256 of those bytes and the
prompt, so a predictions run takes the scoring path of a model run."""

from __future__ import annotations

import hashlib
import importlib
import os
import re
from collections import defaultdict, deque
from pathlib import Path
from typing import Literal, Protocol, TypedDict

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from data.clients.model_ids import slug
from data.workspace import sha256_bytes
from evaluation.models.vlm.base import Answer, VlmIdentity

#: `--predictions-format` names -> the module that reads that harness's prediction files.
FORMATS: dict[str, str] = {
    "vlmevalkit": "evaluation.harnesses.predictions.vlmevalkit",
    "lmms-eval": "evaluation.harnesses.predictions.lmms_eval",
}
PredictionsFormat = Literal["vlmevalkit", "lmms-eval"]


class PredictionSource(TypedDict):
    """Where the answers came from (`PredictionsVlm.source`, the result's `settings["predictions"]`)."""

    harness: str  # the reader's HARNESS for the harness's own file, else the file's format (CSV, TSV, xlsx)
    format: PredictionsFormat
    file: str  # the file's name, printable
    sha256: str  # of its bytes


class Coverage(TypedDict):
    """How much of the release a prediction file answers (`PredictionsVlm.coverage`)."""

    answered_images: int
    release_images: int
    share: float  # answered / release images; 0 for a release without images


class PredictionsError(ValueError):
    """A prediction file that cannot be scored against the release: the message names the file and says why."""


#: A prediction file (and each member of an xlsx, decompressed) is far smaller: MixCuBe has a few thousand images,
#: and an answer a model returns is capped at 1 MiB (evaluation/models/vlm/http_limits.py).
MAX_PREDICTION_BYTES = 256 << 20
#: One answer's cap: a model's answer is capped at 1 MiB (`max_response_bytes`, evaluation/models/vlm/openai.py), and an
#: answer from a harness's file is held to the same, so a file cannot store what no model run could.
MAX_ANSWER_BYTES = 1 << 20


def read_prediction_bytes(path: Path, what: str = "prediction file") -> bytes:
    """The file's bytes; PredictionsError names the file when it cannot be read or is larger than any real one."""
    chunks: list[bytes] = []
    read = 0
    try:
        with path.open("rb") as handle:
            # a chunk at a time: read(cap + 1) would first take the cap's memory, whatever the file's size
            while read <= MAX_PREDICTION_BYTES and (chunk := handle.read(1 << 20)):
                chunks.append(chunk)
                read += len(chunk)
    except OSError as exc:
        raise PredictionsError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if read > MAX_PREDICTION_BYTES:
        raise PredictionsError(f"{path}: larger than {MAX_PREDICTION_BYTES >> 20} MiB; not a {what}")
    return b"".join(chunks)


def prediction_digest(path: Path, what: str = "prediction file") -> str:
    """sha256 of the file's bytes, read a chunk at a time (never held whole); PredictionsError as
    `read_prediction_bytes` gives it."""
    digest = hashlib.sha256()
    read = 0
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                read += len(chunk)
                if read > MAX_PREDICTION_BYTES:
                    raise PredictionsError(f"{path}: larger than {MAX_PREDICTION_BYTES >> 20} MiB; not a {what}")
                digest.update(chunk)
    except OSError as exc:
        raise PredictionsError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    return digest.hexdigest()


#: A lone surrogate (U+D800..U+DFFF): a JSON "\ud800" or an xlsx "_xD800_" gives one; no UTF-8 text holds one.
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_answer(path: Path, where: str, answer: str, field: str = "the answer") -> str:
    """`answer` as it is, or PredictionsError naming the file, `where` (its row or line, and sample) and `field` (the
    column or key that holds it) when it is longer than `MAX_ANSWER_BYTES` in UTF-8, or holds a lone surrogate (no
    Unicode text: nothing could write it out, and no model returns it)."""
    surrogate = _SURROGATE.search(answer)
    if surrogate is not None:
        raise PredictionsError(
            f"{path}: {where}: {field} holds U+{ord(surrogate.group()):04X} (character {surrogate.start() + 1}), "
            "a lone surrogate: not Unicode text, so not an answer a model returns"
        )
    # A str of n characters is at most 4n bytes: only a long one is encoded to be measured.
    if len(answer) * 4 > MAX_ANSWER_BYTES and len(answer.encode("utf-8")) > MAX_ANSWER_BYTES:
        raise PredictionsError(
            f"{path}: {where}: the answer is longer than {MAX_ANSWER_BYTES >> 20} MiB, the cap on a model's answer "
            "(max_response_bytes); not an answer a model run would keep"
        )
    return answer


def shown(text: str, limit: int = 24) -> str:
    """A value from the file as a message shows it: short, whatever its length, and printable (a lone surrogate,
    e.g. from a file name that is not UTF-8, as its escape)."""
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8") if _SURROGATE.search(text) else text


def printable_name(path: Path) -> str:
    """The file's name as text that can be written out: a name that is not UTF-8 (its bytes kept as lone
    surrogates by the file system's decoding) with those bytes escaped."""
    name = path.name
    return os.fsencode(name).decode("utf-8", "backslashreplace") if _SURROGATE.search(name) else name


class PredictionsReader(Protocol):
    HARNESS: str
    #: Why `model_name` found none, for the one-line error that asks for `--predictions-model`.
    NO_MODEL_NAME: str

    def read_predictions(self, path: Path, rows: pa.Table) -> dict[str, str]: ...

    def read_labelled(self, path: Path, rows: pa.Table) -> tuple[dict[str, str], str]: ...

    def model_name(self, path: Path) -> str | None: ...


def reader(format: str) -> PredictionsReader:
    if format not in FORMATS:
        raise PredictionsError(f"--predictions-format {format!r}: not one of {', '.join(sorted(FORMATS))}")
    module: PredictionsReader = importlib.import_module(FORMATS[format])
    return module


def read_predictions(path: Path, rows: pa.Table, format: str) -> dict[str, str]:
    """`sample_id` -> answer text of the prediction file `path` in `format` (see the module docstring)."""
    return reader(format).read_predictions(path, rows)


def release_rows(default_folder: Path, batch_rows: int = 256) -> pa.Table:
    """The release's `default` rows in order as the readers take them: `sample_id`, `category` and `image_sha256` (of
    the released bytes; null without bytes), read a batch at a time (the image bytes are never all in memory)."""
    from evaluation.mixcube.task import _image_bytes

    files = sorted(p for p in default_folder.glob("*.parquet") if p.is_file())
    ids: list[str] = []
    categories: list[str] = []
    hashes: list[str | None] = []
    for file in files:
        for batch in pq.ParquetFile(file).iter_batches(
            batch_size=batch_rows, columns=["sample_id", "category", "image"]
        ):
            rows = pa.Table.from_batches([batch])
            ids += rows.column("sample_id").to_pylist()
            categories += rows.column("category").to_pylist()
            hashes += [None if b is None else sha256_bytes(b) for b in _image_bytes(rows).to_pylist()]
    return pa.table(
        {"sample_id": ids, "category": categories, "image_sha256": hashes},
        schema=pa.schema([("sample_id", pa.string()), ("category", pa.string()), ("image_sha256", pa.string())]),
    )


class PredictionsConfig(BaseModel):
    """A prediction file to score instead of asking a model."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="The harness's prediction file (VLMEvalKit: <model>_MixCuBe.xlsx or .tsv; lmms-eval: its samples "
        "log), or a plain CSV or TSV of sample_id and prediction (format vlmevalkit)."
    )
    format: PredictionsFormat = Field(default="vlmevalkit", description="Which harness wrote it.")
    model_name: str | None = Field(
        default=None, description="The model that answered; default: from the file's name (VLMEvalKit's <model>_...)."
    )

    def build(self, default_folder: Path, prompts: dict[str, str]) -> PredictionsVlm:
        """Read and check the file against the release's `default` rows (in `default_folder`); `prompts`: the App.
        B.2 prompt of each category, as the release's reference pack holds them."""
        path = Path(self.path)
        module = reader(self.format)
        digest = prediction_digest(path)  # streamed: the bytes are never all in memory
        rows = release_rows(default_folder)
        answers, label = module.read_labelled(path, rows)
        name = self.model_name or module.model_name(path)
        if not name:
            raise PredictionsError(f"{path}: {module.NO_MODEL_NAME}; pass --predictions-model NAME")
        source: PredictionSource = {
            "harness": label,
            "format": self.format,
            "file": printable_name(path),
            "sha256": digest,
        }
        return PredictionsVlm(rows, answers, prompts, name=name, source=source)


class PredictionsVlm:
    """A `VisionLanguageModel` whose answers are a prediction file's: `ask(prompt, image)` returns the answer of the
    release row whose image bytes and App. B.2 prompt these are. Rows that share both (the same image asked the same
    question twice) are answered in row order, as `evaluate_images` asks them with one worker."""

    runs_locally = False

    def __init__(
        self, rows: pa.Table, answers: dict[str, str], prompts: dict[str, str], *, name: str, source: PredictionSource
    ) -> None:
        self.identity = VlmIdentity(backend="predictions", model_id=slug(source["format"], name), name=name)
        self.source = source
        self._queues: dict[tuple[str, str], deque[str]] = defaultdict(deque)
        for sample_id, category, digest in zip(
            rows.column("sample_id").to_pylist(),
            rows.column("category").to_pylist(),
            rows.column("image_sha256").to_pylist(),
            strict=True,
        ):
            if digest is not None and category in prompts and sample_id in answers:
                self._queues[(digest, prompts[category])].append(answers[sample_id])
        self._file = source["file"]
        image_rows = [s for s, d in zip(rows.column("sample_id").to_pylist(), rows.column("image_sha256").to_pylist(),
                                        strict=True) if d is not None]  # fmt: skip
        #: The rows the file answers; a partial run's result is scored on them alone.
        self.answered: frozenset[str] = frozenset(s for s in image_rows if s in answers)
        self.coverage: Coverage = {
            "answered_images": len(self.answered),
            "release_images": len(image_rows),
            "share": len(self.answered) / len(image_rows) if image_rows else 0.0,
        }

    @property
    def partial(self) -> bool:
        """Whether the file answers only some of the release's images (then only those are scored)."""
        return len(self.answered) < self.coverage["release_images"]

    def ask(self, prompt: str, image: bytes | None = None) -> Answer:
        queue = self._queues.get((sha256_bytes(image), prompt)) if image is not None else None
        if not queue:
            return Answer(None, "bad_request", f"{self._file} has no answer for this image and question", 0, False)
        text = queue.popleft() if len(queue) > 1 else queue[0]
        if not text.strip():
            return Answer(text, "empty", f"{self._file}: an empty prediction", 0, False)
        return Answer(text, None, None, 0, False)
