"""`culturebench fetch-release` on hostile input (issue 27): a release that names where to write, an output onto a
release, a killed run, malformed manifests, tables and download configs, duplicate ids, and a lean import path.

Each refusal is one line naming the file or field, exit 2, no traceback, before any request; a killed fetch resumes
from the downloader's journal under `OUT/.fetch-state/`; the report and the image table are replaced atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import flows.cli.output
from collectors import release_images as release_fetch
from collectors.release_images import REPORT, fetch_release
from flows.cli import app
from tests.support.fake_image_host import FakeImageHost, make_jpeg
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
CULTUREBENCH = Path(sys.executable).with_name("culturebench")
CORPUS = [make_jpeg(i, size=(320, 240)) for i in range(6)]
PART = "train-00000-of-00001.parquet"
#: Where a fetch keeps its blobs and journal until it completes.
STATE = getattr(release_fetch, "STATE", ".fetch-state")


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's messages are one line; a terminal of 80 columns would wrap them."""
    monkeypatch.setattr(flows.cli.output.console, "width", 1000)


@pytest.fixture(scope="module")
def host() -> Any:
    with FakeImageHost(corpus=CORPUS) as served:
        yield served


@pytest.fixture(autouse=True)
def fresh_counts(host: FakeImageHost) -> None:
    host.counts.clear()
    host.overrides.clear()


# -- helpers -----------------------------------------------------------------------------------------------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def image_rows(host: FakeImageHost, n: int = 3, tag: str = "t") -> list[dict[str, Any]]:
    return [
        {"image_id": f"img-{i}", "url": host.url(f"/img/{i}/{tag}"), "sha256": sha(CORPUS[i]), "format": "JPEG"}
        for i in range(n)
    ]


def write_release(
    folder: Path,
    table: pa.Table | list[dict[str, Any]] | bytes,
    *,
    name: str = "3xcm",
    version: str = "0.1.0",
    mode: str = "urls",
    **manifest: Any,
) -> Path:
    """A URL-only release as the release writer lays it out: one Parquet part, a manifest listing every file with its
    sha256 and size (so each case reaches the reader, past the integrity check)."""
    config = "image_metadata" if name == "3xcm" else "default"
    (folder / config).mkdir(parents=True, exist_ok=True)
    part = folder / config / PART
    if isinstance(table, bytes):
        part.write_bytes(table)
    else:
        pq.write_table(table if isinstance(table, pa.Table) else pa.Table.from_pylist(table), part)
    files = {
        p.relative_to(folder).as_posix(): {"sha256": sha(p.read_bytes()), "bytes": p.stat().st_size}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    body = {"name": name, "version": version, "mode": mode, "files": files, **manifest}
    (folder / "manifest.json").write_text(json.dumps(body))
    return folder


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["fetch-release", *args])


def error_line(output: str, needle: str) -> str:
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if needle in line]
    assert len(lines) == 1, output
    return lines[0]


def tree_digest(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): sha(p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()}


def journaled_urls(out: Path) -> set[str]:
    urls = set()
    for path in (out / STATE).rglob("*.jsonl"):
        if path.name.startswith("."):  # a batch being written when the run was killed: not journaled
            continue
        urls.update(json.loads(line)["url"] for line in path.read_text().splitlines() if line.strip())
    return urls


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3]


# -- item 1: the manifest cannot choose where to write -----------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("version", "ABS"),
        ("version", "../../../escaped"),
        ("version", "1.0.0/../../../../escaped"),
        ("name", "../../../escaped"),
    ],
)
def test_a_manifest_that_names_a_path_cannot_choose_where_fetch_release_writes(
    host: FakeImageHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: str
) -> None:
    escaped = tmp_path / "escaped"
    value = str(escaped) if value == "ABS" else value
    release = write_release(tmp_path / "rel", image_rows(host), **{field: value})
    cwd = tmp_path / "work" / "a" / "b"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    result = cli(str(release), "--allow-private-addresses")
    assert result.exit_code == 2, result.output
    line = error_line(result.output, f"field '{field}'")
    assert "manifest.json" in line and str(release) in line
    assert not list(tmp_path.rglob("escaped")) and not (cwd / "fetched").exists()
    assert not host.counts  # refused before any request


def test_the_default_output_is_fetched_name_version(
    host: FakeImageHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = write_release(tmp_path / "rel", image_rows(host), version="1.2.3-rc.1")
    monkeypatch.chdir(tmp_path)
    result = cli(str(release), "--allow-private-addresses")
    assert result.exit_code == 0, result.output
    out = tmp_path / "fetched" / "3xcm" / "1.2.3-rc.1"
    assert {r["status"] for r in pq.read_table(out / REPORT).to_pylist()} == {"ok"}
    assert not (out / STATE).exists()  # a complete run leaves no resume state


def test_a_default_output_inside_the_release_is_refused(
    host: FakeImageHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = write_release(tmp_path / "rel", image_rows(host))
    before = tree_digest(release)
    monkeypatch.chdir(release)  # ./fetched/3xcm/0.1.0 would land inside the release
    result = cli(str(release), "--allow-private-addresses", "--write-images")
    assert result.exit_code == 2, result.output
    assert "--out" in error_line(result.output, "inside")
    assert tree_digest(release) == before and not host.counts


# -- item 8: --out onto or into a release ------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["itself", "inside", "other_release", "relative_spelling"])
def test_an_output_onto_or_inside_a_release_is_refused_before_any_download(
    host: FakeImageHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    release = write_release(tmp_path / "rel", image_rows(host))
    other = write_release(tmp_path / "other", image_rows(host, tag="o"))
    monkeypatch.chdir(tmp_path)
    out = {
        "itself": release,
        "inside": release / "image_metadata",
        "other_release": other / "fetched",
        "relative_spelling": Path("rel/../rel"),
    }[where]
    before, before_other = tree_digest(release), tree_digest(other)
    result = cli(str(release), "--out", str(out), "--write-images", "--allow-private-addresses")
    assert result.exit_code == 2, result.output
    line = error_line(result.output, "--out")
    assert str(out) in line
    assert tree_digest(release) == before and tree_digest(other) == before_other
    assert not host.counts


# -- item 9: crash safety ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_killed_fetch_resumes_from_its_journal_and_leaves_no_temporary_folders(tmp_path: Path) -> None:
    n = 60
    corpus = [make_jpeg(100 + i, size=(320, 240)) for i in range(n)]
    with FakeImageHost(corpus=corpus, latency_s=0.25) as slow:
        rows = [
            {"image_id": f"img-{i}", "url": slow.url(f"/img/{i}/k"), "sha256": sha(corpus[i]), "format": "JPEG"}
            for i in range(n)
        ]
        release = write_release(tmp_path / "rel", rows)
        config = tmp_path / "download.yaml"
        config.write_text("concurrency: 2\nper_host_concurrency: 2\nallow_private_addresses: true\n")
        out = tmp_path / "out"
        args = [str(CULTUREBENCH), "fetch-release", str(release), "--out", str(out), "--download-config", str(config)]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while sum(slow.counts.values()) < n // 2 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            deadline = time.monotonic() + 5  # a batch of the journal is written at least every second
            while not journaled_urls(out) and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert proc.poll() is None, "the fetch finished before it could be killed"
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        first_run = dict(slow.counts)
        done = journaled_urls(out)
        assert done, "the killed run journaled nothing"
        assert not list(out.glob(".blobs-*")) and not (out / REPORT).exists()

        slow.counts.clear()
        rerun = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr
        again = dict(slow.counts)
    assert json.loads(rerun.stdout.strip().splitlines()[-1])["counts"] == {"ok": n}
    assert not {path_of(u) for u in done} & set(again), "journaled URLs were requested again"
    assert sum(again.values()) == n - len(done)
    assert sum(first_run.values()) >= n // 2
    assert not list(out.glob(".blobs-*")) and not list(out.glob(".tmp-*"))
    assert not (out / STATE).exists()  # a complete run removes its resume state
    assert "fetching images" in rerun.stderr  # the progress bar


@pytest.mark.parametrize("write_images", [False, True])
def test_a_failed_write_never_replaces_a_complete_table(
    host: FakeImageHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_images: bool
) -> None:
    release = write_release(tmp_path / "rel", image_rows(host))
    out = tmp_path / "out"
    fetch_release(release, out, _config(), write_images=write_images)
    written = out / ("image_metadata" if write_images else "") / (PART if write_images else REPORT)
    before = written.read_bytes()
    assert len(before) > 100

    def fail(self: pq.ParquetWriter, *args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", fail)
    with pytest.raises(OSError, match="No space left"):
        fetch_release(release, out, _config(), write_images=write_images)
    assert written.read_bytes() == before
    assert (out / REPORT).stat().st_size > 100
    leftovers = [p.name for p in out.rglob("*") if p.name.startswith((".tmp-", ".blobs-"))]
    assert not leftovers


def test_what_killed_runs_left_behind_is_cleared(host: FakeImageHost, tmp_path: Path) -> None:
    """The scratch folder of a fetch before `.fetch-state` existed, and the temporary file of a write that was
    killed, are removed by the next run; other files in the output folder are not touched."""
    release = write_release(tmp_path / "rel", image_rows(host))
    out = tmp_path / "out"
    (out / ".blobs-ab12cd34" / "blobs").mkdir(parents=True)
    (out / ".blobs-ab12cd34" / "blobs" / "x").write_bytes(b"scratch")
    stale = out / f".tmp-{'0' * 32}-{REPORT}"
    stale.write_bytes(b"PAR1")
    (out / "notes.txt").write_text("mine")
    fetch_release(release, out, _config())
    assert sorted(p.name for p in out.iterdir()) == [REPORT, "notes.txt"]


def _config() -> Any:
    from tests.support.download_helpers import download_config

    return download_config()


# -- item 16: malformed input is one line, exit 2 ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "needle"),
    [(b"{x", "not valid JSON"), (b"[1,2]", "not an object"), (b'{"name": "caf\xe9"}', "not UTF-8")],
)
def test_a_manifest_that_is_not_a_json_object(tmp_path: Path, raw: bytes, needle: str) -> None:
    release = tmp_path / "rel"
    release.mkdir()
    (release / "manifest.json").write_bytes(raw)
    result = cli(str(release), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert str(release / "manifest.json") in error_line(result.output, needle)
    assert not (tmp_path / "out").exists()


def _table_case(host: FakeImageHost, case: str) -> tuple[str, pa.Table | list[dict] | bytes, str]:
    """(benchmark, table, what the line must name)."""
    rows = image_rows(host)
    drop = lambda column: [{k: v for k, v in r.items() if k != column} for r in rows]  # noqa: E731
    if case.startswith("no_"):
        return "3xcm", drop(case[3:]), f"'{case[3:]}'"
    if case == "mixcube_no_sample_id":
        return "mixcube", rows, "'sample_id'"
    if case == "url_int":
        return "3xcm", [{**r, "url": 7} for r in rows], "'url'"
    if case == "url_list":
        return "3xcm", [{**r, "url": [r["url"]]} for r in rows], "'url'"
    if case == "image_string":
        return "3xcm", [{**r, "image": "a.jpg"} for r in rows], "'image'"
    if case == "not_parquet":
        return "3xcm", b"PAR1 but not really", "not a readable Parquet file"
    if case == "map_column":  # no HF datasets feature: the image table cannot be written
        kind = pa.map_(pa.string(), pa.int8())
        extra = pa.array([[("k", 1)]] * len(rows), kind)
        return "3xcm", pa.Table.from_pylist(rows).append_column("extra", extra), "'extra'"
    if case == "null_id":
        return "3xcm", [{**r, "image_id": None if i == 1 else r["image_id"]} for i, r in enumerate(rows)], "null"
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "no_url",
        "no_sha256",
        "no_image_id",
        "mixcube_no_sample_id",
        "url_int",
        "url_list",
        "image_string",
        "not_parquet",
        "null_id",
        "map_column",
    ],
)
def test_a_malformed_image_table_is_one_line_naming_the_file_and_column(
    host: FakeImageHost, tmp_path: Path, case: str
) -> None:
    name, table, needle = _table_case(host, case)
    release = write_release(tmp_path / "rel", table, name=name)
    result = cli(str(release), "--out", str(tmp_path / "out"), "--write-images", "--allow-private-addresses")
    assert result.exit_code == 2, result.output
    line = error_line(result.output, needle)
    assert PART in line, line
    assert not host.counts and not (tmp_path / "out").exists()


def test_a_part_changed_after_publication_is_refused(host: FakeImageHost, tmp_path: Path) -> None:
    release = write_release(tmp_path / "rel", image_rows(host))
    pq.write_table(pa.Table.from_pylist(image_rows(host, tag="evil")), release / "image_metadata" / PART)
    result = cli(str(release), "--out", str(tmp_path / "out"), "--allow-private-addresses")
    assert result.exit_code == 2, result.output
    assert f"image_metadata/{PART}" in error_line(result.output, "differ from manifest.json")
    assert not host.counts


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (b"- concurrency: 2\n", "not a mapping"),
        (b"user_agent: caf\xe9\n", "not UTF-8"),
        (b"concurrency: 0\n", "concurrency: Input should be greater than or equal to 1"),
        (b"retry: {max_attempts: many}\n", "retry.max_attempts:"),
        (b"no_such_setting: 1\n", "no_such_setting: Extra inputs are not permitted"),
        (b"concurrency: [1\n", "not valid YAML"),
    ],
)
def test_a_bad_download_config_is_one_line_naming_the_file(
    host: FakeImageHost, tmp_path: Path, text: bytes, needle: str
) -> None:
    release = write_release(tmp_path / "rel", image_rows(host))
    config = tmp_path / "download.yaml"
    config.write_bytes(text)
    result = cli(str(release), "--out", str(tmp_path / "out"), "--download-config", str(config))
    assert result.exit_code == 2, result.output
    assert error_line(result.output, needle).startswith(str(config))
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1, result.output
    assert not host.counts


# -- item 17: duplicate ids --------------------------------------------------------------------------------------


def test_duplicate_image_ids_are_refused_naming_the_id_and_the_file(host: FakeImageHost, tmp_path: Path) -> None:
    rows = image_rows(host)
    # Same id twice: one row whose URL serves the released bytes (ok), one that serves other bytes (changed).
    rows[1] = {**rows[1], "image_id": rows[0]["image_id"], "sha256": rows[0]["sha256"]}
    release = write_release(tmp_path / "rel", rows)
    result = cli(str(release), "--out", str(tmp_path / "out"), "--write-images", "--allow-private-addresses")
    assert result.exit_code == 2, result.output
    line = error_line(result.output, "'img-0'")
    assert PART in line and "image_id" in line
    assert not host.counts and not (tmp_path / "out").exists()


def test_each_written_image_is_the_one_fetched_for_its_row(host: FakeImageHost, tmp_path: Path) -> None:
    rows = image_rows(host, n=4)
    rows[1]["sha256"] = rows[0]["sha256"]  # its URL serves other bytes: changed, so no image
    rows[3] = {**rows[3], "url": rows[2]["url"], "sha256": rows[2]["sha256"]}  # one URL, two rows: both ok
    release = write_release(tmp_path / "rel", rows)
    summary = fetch_release(release, tmp_path / "out", _config(), write_images=True)
    assert summary.counts == {"ok": 3, "changed": 1}
    written = pq.read_table(tmp_path / "out" / "image_metadata" / PART).to_pylist()
    assert [r["image_id"] for r in written] == [r["image_id"] for r in rows]
    got = [r["image"] and r["image"]["bytes"] for r in written]
    assert got == [CORPUS[0], None, CORPUS[2], CORPUS[2]]


# -- item 25: a lean import path ---------------------------------------------------------------------------------

WRAPPER = """
import json, os, sys
from flows.cli import app
try:
    app(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print("MODULES " + json.dumps(sorted(sys.modules)))
# VmHWM, not getrusage's ru_maxrss: that keeps the forking parent's (pytest's) size across exec.
status = "/proc/self/status"
peak = [x.split()[1] for x in open(status) if x.startswith("VmHWM:")] if os.path.exists(status) else []
print("PEAK_RSS_KB " + (peak[0] if peak else "0"))
"""


def test_fetch_release_imports_no_torch_matplotlib_nor_opencv(host: FakeImageHost, tmp_path: Path) -> None:
    release = write_release(tmp_path / "rel", image_rows(host))
    args = ["fetch-release", str(release), "--out", str(tmp_path / "out"), "--allow-private-addresses"]
    done = subprocess.run([sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "ok 3" in done.stderr, done.stdout + done.stderr
    printed = dict(x.split(" ", 1) for x in done.stdout.splitlines() if x.startswith(("MODULES ", "PEAK_RSS_KB ")))
    modules = set(json.loads(printed["MODULES"]))
    # Not pandas: pyarrow imports it itself on the first `pa.array` of Python objects (its pandas shim checks
    # for a Series), which the downloader's rows and the report need.
    heavy = {"torch", "matplotlib", "cv2", "datasets", "webdataset", "scipy", "sklearn", "seaborn"} & modules
    assert not heavy, sorted(heavy)
    peak_mb = int(printed["PEAK_RSS_KB"]) // 1024  # 0 without /proc: not measured
    assert peak_mb < 300, f"peak RSS {peak_mb} MB (about 185 MB expected)"
