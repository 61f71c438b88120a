"""lmms-eval's samples log of the exported MixCuBe task (`evaluation.harnesses.exports.lmms_eval`, task
`culturebench_mixcube`):
what lmms-eval 0.7.3 writes with `--log_samples --output_path OUT`, `OUT[/<model>]/<date>_samples_culturebench_mixcube
.jsonl`, one JSON object per image. Either that file or the output folder is accepted (the folder must hold exactly
one samples file of the task).

Each line has `doc_id` (the row's position in the release's `default` split, as the task's `test_split` lists it) and
`filtered_resps` (the answer the task scored, after lmms-eval's filters and reasoning-tag stripping; `resps`, the raw
one, is dropped when they agree). lmms-eval drops the doc itself from the log, but the task's metric records (our
`process_results`, e.g. `mixcube_accuracy`) carry the row's `sample_id`, which is checked against the release.

The model's name is the `model_name` lmms-eval wrote into the run's `<date>_results.json` beside the samples file
(from `--model_args pretrained=...`, `model=...`); None when there is none (then `--predictions-model` names it)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pyarrow as pa
from pydantic import JsonValue

from evaluation.harnesses.predictions import MAX_ANSWER_BYTES, PredictionsError, check_answer, shown
from evaluation.harnesses.predictions.rows import AnswerRows
from evaluation.harnesses.predictions.text import LineTooLong, open_text, read_line

HARNESS = "lmms-eval"
NO_MODEL_NAME = (
    "the run's results.json beside the samples file names no model (lmms-eval takes it from --model_args "
    "pretrained=...; these had none)"
)
TASK = "culturebench_mixcube"
SAMPLES_SUFFIX = f"_samples_{TASK}.jsonl"
#: The task's metric records, any of which names the row's sample (`process_results` of the exported utils.py).
RECORD_KEYS = (
    "mixcube_accuracy",
    "mixcube_accuracy_by_ethnicity",
    "mixcube_accuracy_by_country",
    "mixcube_accuracy_by_category",
    "mixcube_drop_by_ethnicity",
    "mixcube_swap_drops",
)
#: A sample line nests a few levels (the metric records, `resps` lists); `json.loads` recurses once per level, so a
#: line of `[[[[...` deeper than this is refused before it is parsed, far below Python's recursion limit.
MAX_JSON_DEPTH = 64
#: lmms-eval's results.json beside the samples file: a few hundred KiB (its config and the per-task results).
MAX_RESULTS_BYTES = 16 << 20
#: A sample line holds its answer eight times (`filtered_resps`, `resps` and the task's six metric records), each
#: at most the answer's cap and JSON-escaped (a control character takes six): a line past this is no sample's.
MAX_LINE_CHARS = 64 * MAX_ANSWER_BYTES
#: Digits of a JSON integer read (Python refuses to read past 4,300): a row position or a count has a few.
MAX_INT_DIGITS = 100
_JSON_MARK = re.compile(r'[\[\]{}"]')
_JSON_STRING_REST = re.compile(r'(?:[^"\\]|\\.)*+"', re.S)  # possessive: one pass, no backtracking


def prediction_file(path: Path) -> Path:
    """The samples file: `path` itself, or the one `*_samples_culturebench_mixcube.jsonl` under the folder `path`."""
    if not path.is_dir():
        return path
    found = sorted(p for p in path.rglob(f"*{SAMPLES_SUFFIX}") if p.is_file())
    if not found:
        raise PredictionsError(f"{path}: no lmms-eval samples file (*{SAMPLES_SUFFIX}) under this folder")
    if len(found) > 1:
        named = ", ".join(str(p.relative_to(path)) for p in found)
        raise PredictionsError(f"{path}: {len(found)} lmms-eval samples files of {TASK} ({named}); pass one of them")
    return found[0]


def model_name(path: Path) -> str | None:
    """`model_name` of the run's `<date>_results.json` beside the samples file; None without one."""
    file = prediction_file(path)
    if not file.name.endswith(SAMPLES_SUFFIX):
        return None
    results = file.with_name(file.name[: -len(SAMPLES_SUFFIX)] + "_results.json")
    try:
        with results.open("rb") as handle:
            data = handle.read(MAX_RESULTS_BYTES + 1)
        text = data.decode("utf-8")
        # as unreadable as a missing file: too big for lmms-eval's, or nested too deep for json.loads
        if len(data) > MAX_RESULTS_BYTES or not _json_depth_within(text, MAX_JSON_DEPTH):
            return None
        loaded = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    name = loaded.get("model_name") if isinstance(loaded, dict) else None
    # a lone surrogate ("\\ud800") is no name: nothing could write it out
    return (name.strip() or None) if isinstance(name, str) and shown(name, len(name)) == name else None


def read_labelled(path: Path, rows: pa.Table) -> tuple[dict[str, str], str]:
    """(`read_predictions`'s answers, the source's label): a samples log is always lmms-eval's own."""
    return read_predictions(path, rows), HARNESS


def read_predictions(path: Path, rows: pa.Table) -> dict[str, str]:
    file = prediction_file(path)
    answers = AnswerRows(file, rows, "line")
    read = 0
    # JSON Lines end lines with "\n" only (newline="\n"): a text stream's universal newlines, or str.splitlines(),
    # would also split inside an answer at "\r", U+2028, U+0085 and the other Unicode line breaks, which lmms-eval
    # writes as they are (ensure_ascii=False).
    with open_text(file, "samples file", encoding="utf-8", newline="\n") as stream:
        for line in itertools.count(1):
            try:
                raw = read_line(stream, MAX_LINE_CHARS)
            except LineTooLong:
                raise PredictionsError(
                    f"{file}: line {line} is longer than {MAX_LINE_CHARS >> 20} MiB, more than a sample line holds "
                    f"(its answer is capped at {MAX_ANSWER_BYTES >> 20} MiB); not a samples file"
                ) from None
            if not raw:
                break
            if not raw.strip(_JSON_WHITESPACE + "\n"):
                answers.blank()
                continue
            read += 1
            _add(file, answers, line, _sample(file, line, raw))
    if not read:
        raise PredictionsError(f"{file}: no samples")
    return answers.result()


def _sample(file: Path, line: int, raw: str) -> dict[str, JsonValue]:
    """The line's JSON object; PredictionsError naming the line when it is none."""
    if not _json_depth_within(raw, MAX_JSON_DEPTH):
        raise PredictionsError(
            f"{file}: line {line} is not JSON of a sample (nested deeper than {MAX_JSON_DEPTH} levels, or its "
            "brackets or quotes do not balance)"
        )
    try:
        sample = json.loads(raw, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise PredictionsError(f"{file}: line {line} is not JSON ({exc.msg})") from None
    except _LongNumber as exc:
        raise PredictionsError(
            f"{file}: line {line} holds a number of {exc.digits:,} digits; no sample line has one"
        ) from None
    if not isinstance(sample, dict):
        raise PredictionsError(f"{file}: line {line} is not a JSON object")
    return sample


def _add(file: Path, answers: AnswerRows, line: int, sample: dict[str, JsonValue]) -> None:
    """One sample, checked against the release (`AnswerRows.add`)."""
    doc_id = sample.get("doc_id")
    if isinstance(doc_id, bool) or not isinstance(doc_id, int) or doc_id < 0:
        raise PredictionsError(f"{file}: line {line}: doc_id {_short(doc_id)} is not a row position")
    key, answer = _answer(file, line, sample)
    answer = check_answer(file, f"line {line} (doc_id {doc_id})", answer, key)
    answers.add(f"line {line}", f"doc_id {doc_id}", doc_id, answer, _sample_id(file, line, sample))


class _LongNumber(ValueError):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def _json_int(text: str) -> int:
    """A JSON integer, as json reads it, but refused past `MAX_INT_DIGITS` (json would raise a bare ValueError)."""
    if len(text) > MAX_INT_DIGITS:
        raise _LongNumber(len(text.lstrip("-")))
    return int(text)


_JSON_WHITESPACE = " \t\r"  # JSON's whitespace, the line's "\n" already split off


def _json_depth_within(text: str, limit: int) -> bool:
    """Whether no array or object of this JSON text is nested deeper than `limit` (brackets inside strings do not
    count); False also for an unterminated string or a bracket closing nothing, which is no JSON. One pass, no
    recursion (as collectors/optout.py checks a tdmrep.json)."""
    depth = 0
    pos = 0
    while mark := _JSON_MARK.search(text, pos):
        pos = mark.end()
        char = mark.group()
        if char == '"':
            rest = _JSON_STRING_REST.match(text, pos)
            if rest is None:
                return False
            pos = rest.end()
        elif char in "[{":
            depth += 1
            if depth > limit:
                return False
        else:
            depth -= 1
            if depth < 0:
                return False
    return True


def _answer(file: Path, line: int, sample: dict[str, JsonValue]) -> tuple[str, str]:
    """The key and the scored answer: `filtered_resps` (a string, or a list holding one), else the raw `resps`."""
    for key in ("filtered_resps", "resps"):
        value = sample.get(key)
        while isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, str):
            return key, value
        if key in sample:
            raise PredictionsError(f"{file}: line {line}: {key} is not one answer text ({_short(value)})")
    raise PredictionsError(f"{file}: line {line}: no filtered_resps (was it written with --log_samples?)")


def _sample_id(file: Path, line: int, sample: dict[str, JsonValue]) -> str | None:
    """The row's `sample_id` as the task's metric records (or a kept `doc`) name it; None when none does."""
    named: set[str] = set()
    for key in (*RECORD_KEYS, "doc"):
        record = sample.get(key)
        if isinstance(record, dict) and "sample_id" in record:
            named.add(str(record["sample_id"]))
    if len(named) > 1:
        shown = ", ".join(_short(name) for name in sorted(named)[:5])
        raise PredictionsError(f"{file}: line {line} names several samples ({shown})")
    return named.pop() if named else None


def _short(value: object, limit: int = 60) -> str:
    """A JSON value as a message shows it (`shown`: short, printable)."""
    return shown(json.dumps(value, ensure_ascii=False), limit)
