"""Hostile inputs, third round (issue 38), at the harness exports, `reassemble --out`, `concepts accept` and the
evaluation card: an `--out` that is no folder or holds a FIFO is refused without being read; values a forged
release writes into a TSV are checked against their reference and every CSV/TSV cell is neutralised; markup and
control characters never reach a card raw; clip_benchmark's JSON is built by `json.dumps` and its class names have
no line breaks; and each forged release is one line naming the file, the column and the row, never a traceback."""

from __future__ import annotations

import csv
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

import flows.cli
from data import reference, text_safety
from data.publish.reader import Release
from evaluation.harnesses.exports import lmms_eval as lx
from flows.cli import app
from tests.support.paths import REPO_ROOT
from tests.support.release_tamper import rehash_manifest

ROOT = REPO_ROOT
DEMO = ROOT / "releases"
AUTHORS = Path(reference.__file__).parent / "authors" / "xcm-bench.csv"
FORMULA = '=HYPERLINK("http://x","y")'
#: The CLI in a child process (a FIFO or /dev/zero could block or exhaust the test itself), from this checkout.
CLI = [sys.executable, "-c", "import sys; from flows.cli import app; sys.exit(app())"]


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows.cli.console, "width", 1000)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def one_line(output: str, needle: str) -> str:
    """The one line of `output` that holds `needle`; no traceback."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if needle in line]
    assert len(lines) == 1, output
    return lines[0]


def forged(
    tmp_path: Path, benchmark: str, configs: list[str], edit: dict[str, Callable[[pa.Table], pa.Table]], name: str = ""
) -> Path:
    """A copy of a demo release's manifest and `configs`, each table in `edit` rewritten by its function, and the
    manifest brought in line with the files (what a careful forger does)."""
    folder = tmp_path / (name or f"{benchmark}-forged")
    folder.mkdir()
    shutil.copy2(DEMO / benchmark / "0.1.0-demo" / "manifest.json", folder / "manifest.json")
    for config in configs:
        shutil.copytree(DEMO / benchmark / "0.1.0-demo" / config, folder / config)
    for config, change in edit.items():
        (part,) = sorted((folder / config).glob("*.parquet"))
        pq.write_table(change(pq.read_table(part)), part)
    rehash_manifest(folder)
    return folder


def set_value(column: str, row: int, value: Any) -> Callable[[pa.Table], pa.Table]:
    def change(table: pa.Table) -> pa.Table:
        values = table[column].to_pylist()
        values[row] = value
        at = table.schema.get_field_index(column)
        return table.set_column(at, table.schema.field(at), pa.array(values, table.schema.field(at).type))

    return change


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def authors_pool(tmp_path: Path, rows: int = 120) -> Path:
    """The first rows of the authors' xcm-bench.csv: a small pool for `reassemble`."""
    lines = AUTHORS.read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / "pool.csv"
    path.write_text("".join(lines[: rows + 1]), encoding="utf-8")
    return path


def _limited() -> None:
    """In the child: at most 3 GiB of address space and 60 s of CPU, so that reading /dev/zero would stop."""
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))


def run_cli(args: list[str], cwd: Path, timeout: int = 120, limited: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "1000"}
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        preexec_fn=_limited if limited else None,
    )


# -- 4: an existing --out is never read whole ----------------------------------------------------------------------
@pytest.mark.parametrize("command", ["export", "reassemble"])
def test_an_out_that_is_a_file_is_refused_before_anything_runs(tmp_path: Path, command: str) -> None:
    out = tmp_path / "out.txt"
    out.write_text("mine")
    if command == "export":
        release = forged(tmp_path, "mixcube", ["default"], {})
        result = invoke("export", str(release), "--harness", "vlmevalkit", "--out", str(out))
        what = "an export"
    else:
        result = invoke("reassemble", "--pool", str(authors_pool(tmp_path)), "--out", str(out))
        what = "a reassembled benchmark"
    assert result.exit_code == 2, result.output
    line = one_line(result.output, "--out")
    assert f"{out} is a file, not a folder" in line and what in line
    assert "version" not in line  # no "choose a new version": these folders have none to choose
    assert out.read_text() == "mine"


@pytest.mark.parametrize(
    "args",
    [
        ["export", "{mixcube}", "--harness", "vlmevalkit", "--out", "/dev/zero"],
        ["reassemble", "--pool", "{pool}", "--out", "/dev/zero"],
    ],
)
def test_dev_zero_as_out_is_refused_without_reading_it(tmp_path: Path, args: list[str]) -> None:
    """/dev/zero never ends: the child runs with a memory and CPU limit, and the refusal must come first."""
    names = {"mixcube": str(forged(tmp_path, "mixcube", ["default"], {})), "pool": str(authors_pool(tmp_path))}
    done = run_cli([a.format(**names) for a in args], tmp_path, limited=True)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "--out /dev/zero is a device, not a folder" in one_line(done.stderr, "/dev/zero")


@pytest.mark.slow
def test_a_fifo_in_the_out_folder_is_never_opened(tmp_path: Path) -> None:
    release = forged(tmp_path, "mixcube", ["default"], {})
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "MixCuBe.tsv")  # opening it for reading would block until a writer comes: none will
    done = run_cli(["export", str(release), "--harness", "vlmevalkit", "--out", str(out)], tmp_path, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    line = one_line(done.stderr, "--out")
    assert "MixCuBe.tsv" in line and "choose a new --out" in line and "version" not in line
    assert sorted(p.name for p in out.iterdir()) == ["MixCuBe.tsv"]  # nothing written into it


def test_an_existing_other_folder_is_refused_in_the_commands_words(tmp_path: Path) -> None:
    release = forged(tmp_path, "mixcube", ["default"], {})
    out = tmp_path / "out"
    assert invoke("export", str(release), "--harness", "vlmevalkit", "--out", str(out)).exit_code == 0
    assert invoke("export", str(release), "--harness", "vlmevalkit", "--out", str(out)).exit_code == 0  # unchanged
    (out / "README.md").write_text("someone else's")
    before = tree(out)
    result = invoke("export", str(release), "--harness", "vlmevalkit", "--out", str(out))
    assert result.exit_code == 1, result.output
    line = one_line(result.output, "--out")
    assert "not this export of mixcube 0.1.0-demo for vlmevalkit" in line and "README.md" in line
    assert "choose a new --out" in line and "version" not in line.split("for vlmevalkit", 1)[1]
    assert tree(out) == before

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    result = invoke("reassemble", "--pool", str(authors_pool(tmp_path)), "--out", str(mine))
    assert result.exit_code == 1, result.output
    line = one_line(result.output, "--out")
    assert "not this reassembled benchmark" in line and "notes.txt" in line and "choose a new --out" in line
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


# -- 5: formulas in the TSV and in the concept review file ---------------------------------------------------------
@pytest.mark.parametrize("column", ["country", "ethnicity", "sample_id"])
def test_vlmevalkit_refuses_a_value_outside_its_reference(tmp_path: Path, column: str) -> None:
    release = forged(tmp_path, "mixcube", ["default"], {"default": set_value(column, 3, FORMULA)})
    out = tmp_path / "out"
    result = invoke("export", str(release), "--harness", "vlmevalkit", "--out", str(out))
    assert result.exit_code == 2, result.output
    line = one_line(result.output, "HYPERLINK")
    assert str(release / "default" / "train-00000-of-00001.parquet") in line
    assert f"column {column!r}" in line and "row 3" in line
    assert not out.exists()


def test_every_csv_and_tsv_cell_goes_through_one_neutraliser() -> None:
    for delimiter in (",", "\t"):
        text = text_safety.csv_bytes(["a", "b"], [[FORMULA, "@x"], ["fine", -1], ["+1", None]], delimiter).decode()
        rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
        assert rows == [["a", "b"], ["'" + FORMULA, "'@x"], ["fine", "-1"], ["'+1", ""]]


def review_file(path: Path, concept: str, rationale: str = "varies") -> Path:
    path.write_text(
        "candidate_id,concept,rationale,near_shipped,review_status,concept_id,model,prompt_sha256\n"
        f"c1,kite,{rationale},,pending,,m,s\n"
        f'c2,"{concept}",r,,pending,,m,s\n',
        encoding="utf-8",
    )
    return path


def test_concepts_accept_refuses_a_formula_concept_and_writes_no_formula(tmp_path: Path) -> None:
    path = review_file(tmp_path / "review.csv", FORMULA.replace('"', '""'))
    before = path.read_bytes()
    result = invoke("concepts", "accept", str(path))
    assert result.exit_code == 2, result.output
    line = one_line(result.output, "HYPERLINK")
    assert str(path) in line and "line 3" in line and "not a concept name" in line
    assert path.read_bytes() == before
    # a rationale (Gemini's text) that starts like a formula is written back inert
    path = review_file(tmp_path / "ok.csv", "lantern", rationale="=1+1")
    result = invoke("concepts", "accept", str(path))
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    assert [r["rationale"] for r in rows] == ["'=1+1", "r"]
    assert [r["review_status"] for r in rows] == ["accepted", "accepted"]


def test_concepts_accept_names_a_review_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = review_file(tmp_path / "review.csv", "lantern")
    path.write_bytes(path.read_bytes().replace(b"lantern", "Espa\u00f1a".encode("latin-1")))
    before = path.read_bytes()
    result = invoke("concepts", "accept", str(path))
    assert result.exit_code == 2, result.output
    line = one_line(result.output, "not UTF-8")
    assert str(path) in line and "0xf1" in line
    assert path.read_bytes() == before


def test_generated_concepts_that_are_no_names_are_refused() -> None:
    from collectors.concept_generation import ConceptCandidate, ConceptCandidates, _validator

    with pytest.raises(ValueError, match="not a concept name"):
        _validator(1)(ConceptCandidates(concepts=[ConceptCandidate(name=FORMULA)]))
    _validator(1)(ConceptCandidates(concepts=[ConceptCandidate(name="kite flying")]))


# -- 6: markup and control characters in cards and READMEs ---------------------------------------------------------
HOSTILE_NAME = "a\nb <script>x</script> | [l](javascript:x) \x1b[31m \u202eevil"


def test_markdown_text_and_code_spans_show_control_and_bidi_characters() -> None:
    for render in (text_safety.markdown_text, text_safety.code_span):
        text = render(HOSTILE_NAME)
        assert "\x1b" not in text and "\u202e" not in text and "\n" not in text
        assert "\\u001b" in text.replace("\\\\", "\\") and "\\u202e" in text.replace("\\\\", "\\")
        assert "<script" not in text and "|" not in text.replace("\\|", "")
    assert "](javascript" not in text_safety.markdown_text(HOSTILE_NAME)
    span = text_safety.code_span(HOSTILE_NAME)  # a link inside one code span is text
    assert span.startswith("`") and span.endswith("`") and span.count("`") == 2
    # a joiner belongs to the word it joins (emoji, Indic scripts): kept
    assert text_safety.markdown_text("Gyeongbokgung \u200dpalace") == "Gyeongbokgung \u200dpalace"


def small_mixcube(tmp_path: Path, rows: int = 5) -> Path:
    return forged(tmp_path, "mixcube", ["default"], {"default": lambda table: table.slice(0, rows)}, "mixcube-small")


def test_the_card_escapes_an_lmms_eval_model_name(tmp_path: Path) -> None:
    release = small_mixcube(tmp_path)
    sample_ids = Release.open(release).table("default", ["sample_id"])["sample_id"].to_pylist()
    run = tmp_path / "run" / "model"
    run.mkdir(parents=True)
    samples = run / f"20260101_000000_samples_{lx.TASK}.jsonl"
    lines = []
    for doc_id, sample_id in enumerate(sample_ids):
        record = {"sample_id": sample_id, "answer": "Korea", "correct": False}
        metrics = {metric: record for metric in ("mixcube_accuracy",)}
        lines.append(json.dumps({"doc_id": doc_id, "filtered_resps": ["Korea"], **metrics}))
    samples.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (run / "20260101_000000_results.json").write_text(json.dumps({"model_name": HOSTILE_NAME}), encoding="utf-8")
    out = tmp_path / "result"
    result = invoke(
        "evaluate", "mixcube", str(release), "--predictions", str(samples), "--predictions-format", "lmms-eval",
        "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    card = (out / "README.md").read_text(encoding="utf-8")
    assert json.loads((out / "metrics.json").read_text())["model"]["name"] == HOSTILE_NAME  # data keeps it raw
    for raw in ("<script", "](javascript", "\x1b", "\u202e", "a\nb"):
        assert raw not in card, raw
    (row,) = [line for line in card.splitlines() if line.startswith("| model |")]
    assert row.count("|") - row.count("\\|") == 3  # two cells: the escaped pipe opens none
    assert text_safety.markdown_text(HOSTILE_NAME) in row


def test_lmms_eval_refuses_an_ethnicity_its_readme_would_show(tmp_path: Path) -> None:
    release = forged(tmp_path, "mixcube", ["default"], {"default": set_value("ethnicity", 7, "<script>x</script>")})
    out = tmp_path / "out"
    result = invoke("export", str(release), "--harness", "lmms-eval", "--out", str(out))
    assert result.exit_code == 2, result.output
    line = one_line(result.output, "<script>")
    assert "column 'ethnicity'" in line and "row 7" in line and "a MixCuBe ethnicity" in line
    assert not out.exists()


# -- 10: clip_benchmark's JSON and class names ---------------------------------------------------------------------
def _tar_members(folder: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for path in sorted(folder.glob("3xcm_*/test/0.tar")):
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                handle = tar.extractfile(member)
                assert handle is not None
                out[f"{path.parent.parent.name}/{member.name}"] = handle.read()
    return out


def test_clip_benchmark_metadata_is_json_whatever_an_image_id_holds(tmp_path: Path) -> None:
    hostile = 'argentina-0-1-eng", "image_id": "injected'
    edit = {"image_metadata": set_value("image_id", 0, hostile), "benchmark": set_value("query_image_id", 0, hostile)}
    assert pq.read_table(DEMO / "3xcm" / "0.1.0-demo" / "benchmark")["query_image_id"][0].as_py() == "argentina-0-1-eng"
    assert pq.read_table(DEMO / "3xcm" / "0.1.0-demo" / "image_metadata")["image_id"][0].as_py() == "argentina-0-1-eng"
    release = forged(tmp_path, "3xcm", ["image_metadata", "benchmark"], edit)
    out = tmp_path / "out"
    result = invoke("export", str(release), "--harness", "clip-benchmark", "--out", str(out))
    assert result.exit_code == 0, result.output
    metas = [json.loads(data) for name, data in _tar_members(out).items() if name.endswith(".json")]
    assert {meta["image_id"] for meta in metas} >= {hostile}
    assert "injected" not in {meta["image_id"] for meta in metas}


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("query_concept", 'train", "image_id": "injected'),
        ("query_text", "tren\rde"),
        ("query_text", "tren\nde"),
        ("query_text", "tren\u2028de"),
    ],
)
def test_clip_benchmark_refuses_a_name_that_breaks_a_line_or_the_json(tmp_path: Path, column: str, value: str) -> None:
    release = forged(tmp_path, "3xcm", ["image_metadata", "benchmark"], {"benchmark": set_value(column, 2, value)})
    out = tmp_path / "out"
    result = invoke("export", str(release), "--harness", "clip-benchmark", "--out", str(out))
    assert result.exit_code == 2, result.output
    line = one_line(result.output, f"column {column!r}")
    assert str(release / "benchmark" / "train-00000-of-00001.parquet") in line and "row 2" in line
    assert not out.exists()


def test_clip_benchmark_class_indices_follow_classnames(tmp_path: Path) -> None:
    release = forged(tmp_path, "3xcm", ["image_metadata", "benchmark"], {})
    out = tmp_path / "out"
    assert invoke("export", str(release), "--harness", "clip-benchmark", "--out", str(out)).exit_code == 0
    members = _tar_members(out)
    for names_file in out.glob("3xcm_classification_*/classnames.txt"):
        names = names_file.read_text(encoding="utf-8").splitlines()
        assert names == names_file.read_text(encoding="utf-8").split("\n")[:-1]  # no other line break
        classes = {int(data) for key, data in members.items() if key.startswith(names_file.parent.name + "/")
                   and key.endswith(".cls")}  # fmt: skip
        assert classes <= set(range(len(names)))


# -- 12: forged releases are one line, never a traceback -----------------------------------------------------------
def _null_image(row: int) -> Callable[[pa.Table], pa.Table]:
    def change(table: pa.Table) -> pa.Table:
        images = table["image"].to_pylist()
        images[row] = {"bytes": None, "path": images[row]["path"]}
        at = table.schema.get_field_index("image")
        return table.set_column(at, table.schema.field(at), pa.array(images, table.schema.field(at).type))

    return change


def _not_an_image(row: int) -> Callable[[pa.Table], pa.Table]:
    def change(table: pa.Table) -> pa.Table:
        images = table["image"].to_pylist()
        images[row] = {"bytes": b"this is not an image", "path": images[row]["path"]}
        at = table.schema.get_field_index("image")
        return table.set_column(at, table.schema.field(at), pa.array(images, table.schema.field(at).type))

    return change


def _drop(column: str) -> Callable[[pa.Table], pa.Table]:
    return lambda table: table.drop_columns([column])


def _first_query_image() -> str:
    return str(pq.read_table(DEMO / "3xcm" / "0.1.0-demo" / "benchmark")["query_image_id"][0].as_py())


def _image_row(image_id: str) -> int:
    return list(pq.read_table(DEMO / "3xcm" / "0.1.0-demo" / "image_metadata")["image_id"].to_pylist()).index(image_id)


@pytest.mark.parametrize(
    ("case", "config", "needles"),
    [
        ("missing image", "benchmark", ["column 'query_image_id'", "row 0", "an image of image_metadata"]),
        ("null bytes", "image_metadata", ["has no bytes", "row {row}", "{image}"]),
        ("not an image", "image_metadata", ["no image", "row {row}", "{image}"]),
        ("no query_text", "benchmark", ["no column(s) ['query_text']"]),
    ],
)
def test_clip_benchmark_forged_releases_are_one_line(
    tmp_path: Path, case: str, config: str, needles: list[str]
) -> None:
    image = _first_query_image()
    row = _image_row(image)
    edit = {
        "missing image": {"image_metadata": lambda t: t.filter(pa.compute.not_equal(t["image_id"], image))},
        "null bytes": {"image_metadata": _null_image(row)},
        "not an image": {"image_metadata": _not_an_image(row)},
        "no query_text": {"benchmark": _drop("query_text")},
    }[case]
    release = forged(tmp_path, "3xcm", ["image_metadata", "benchmark"], edit)
    out = tmp_path / "out"
    result = invoke("export", str(release), "--harness", "clip-benchmark", "--out", str(out))
    assert result.exit_code == 2, result.output
    line = one_line(result.output, str(release / config / "train-00000-of-00001.parquet"))
    for needle in needles:
        assert needle.format(row=row, image=image) in line, line
    assert not out.exists()


def test_mteb_without_query_text_is_one_line(tmp_path: Path) -> None:
    release = forged(
        tmp_path, "3xcm", ["image_metadata", "benchmark", "benchmark_cd"], {"benchmark_cd": _drop("query_text")}
    )
    out = tmp_path / "out"
    result = invoke("export", str(release), "--harness", "mteb", "--out", str(out))
    assert result.exit_code == 2, result.output
    line = one_line(result.output, "query_text")
    assert str(release / "benchmark_cd" / "train-00000-of-00001.parquet") in line
    assert not out.exists()


def test_vlmevalkit_names_the_row_of_bytes_that_are_no_image(tmp_path: Path) -> None:
    release = forged(tmp_path, "mixcube", ["default"], {"default": _not_an_image(4)})
    sample_id = pq.read_table(release / "default")["sample_id"][4].as_py()
    result = invoke("export", str(release), "--harness", "vlmevalkit", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    line = one_line(result.output, sample_id)
    assert "row 4" in line and "no image" in line and "BytesIO" not in line


def _mixcube_at(tmp_path: Path, name: str | bytes) -> Path:
    """A small MixCuBe release in a folder named `name` (bytes: a name that is not UTF-8)."""
    folder = Path(os.fsdecode(os.fsencode(tmp_path) + b"/" + os.fsencode(name)))
    shutil.copytree(small_mixcube(tmp_path), folder)
    return folder


@pytest.mark.parametrize("harness", ["lmms-eval", "vlmevalkit"])
def test_a_release_path_that_is_not_utf8_is_one_line(tmp_path: Path, harness: str) -> None:
    release = _mixcube_at(tmp_path, b"mix\xffcube")
    out = tmp_path / "out"
    result = invoke("export", str(release), "--harness", harness, "--out", str(out))
    assert result.exit_code == 2, result.output
    line = one_line(result.output, "not UTF-8")
    assert "0xff" in line and "mix\\xffcube" in line
    assert not out.exists()


class _TaskLoader(yaml.SafeLoader):
    """Reads lmms-eval's `!function module.name` tag as the string it names."""


_TaskLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


@pytest.mark.parametrize("name", ["mix\x85cube", "mix\x7fcube", "mix\u2028cube", "mix\u202ecube", 'mix "{{x}}" cube'])
def test_lmms_eval_paths_read_back_exactly(tmp_path: Path, name: str) -> None:
    release = _mixcube_at(tmp_path, name)
    out = tmp_path / "out"
    result = invoke("export", str(release), "--harness", "lmms-eval", "--out", str(out))
    assert result.exit_code == 0, result.output
    config = yaml.load((out / lx.TASK_YAML).read_text(encoding="utf-8"), Loader=_TaskLoader)
    assert config["dataset_path"] == str(release.resolve())
    namespace: dict[str, Any] = {}
    source = (out / lx.TASK_UTILS).read_text(encoding="utf-8")
    exec(compile(source, str(out / lx.TASK_UTILS), "exec"), namespace)
    assert namespace["RELEASE"]["path"] == str(release.resolve())
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert text_safety.code_span(str(release.resolve())) in readme


def test_an_existing_file_of_another_size_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison with an existing folder reads only regular files of the size this writer's file has, in
    chunks: a 1 TiB sparse file (or a device) of another size is told apart by its size alone."""
    import fsspec.implementations.local as local

    from data.publish.folder import ImmutableFolder, ReleaseExistsError

    out = tmp_path / "out"
    out.mkdir()
    with (out / "big.bin").open("wb") as handle:
        handle.truncate(1 << 40)  # sparse: no disk used
    real_open = local.LocalFileSystem._open

    def guarded(self: Any, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        assert not str(path).endswith("big.bin"), "the 1 TiB file was opened"
        return real_open(self, path, mode, *args, **kwargs)

    monkeypatch.setattr(local.LocalFileSystem, "_open", guarded)
    folder = ImmutableFolder.at(str(out), "x", "0.0.1")
    folder.write_bytes("big.bin", b"abc")
    with pytest.raises(ReleaseExistsError, match=r"big\.bin"):
        folder.commit({"name": "x", "version": "0.0.1"})
