"""Bad input and hostile disks at the CLI: one line naming the file or field and what to do, a non-zero exit, no
traceback."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows.cli
from data.publish.release import ReleaseWriter
from data.workspace import Storage, Workspace
from flows.cli import app
from flows.xcm.build import build_locally
from flows.xcm.config import Build3XCMConfig
from tests.support.release_tamper import rehash_manifest


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's messages are one line; a terminal of 80 columns would wrap them."""
    monkeypatch.setattr(flows.cli.console, "width", 1000)


def _build(config: Build3XCMConfig, tmp_path: Path, *extra: str) -> tuple[int, str]:
    path = tmp_path / "build.json"
    path.write_text(config.model_dump_json())
    result = CliRunner().invoke(app, ["build", "3xcm", "--config", str(path), "--engine", "local", *extra])
    return result.exit_code, result.output


def _error_line(output: str, needle: str) -> str:
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if needle in line]
    assert len(lines) == 1, output
    return lines[0]


def test_a_config_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "build.yaml"
    path.write_bytes("countries: [Espa\u00f1a]\n".encode("latin-1"))
    result = CliRunner().invoke(app, ["build", "3xcm", "--config", str(path), "--engine", "local"])
    assert result.exit_code == 2
    line = _error_line(result.output, "not UTF-8")
    assert str(path) in line and "0xf1" in line and "save it as UTF-8" in line


@pytest.mark.parametrize(
    ("root", "needle"),
    [("file", "is a file, not a folder"), ("nosuchprotocol://bucket/x", "is not a usable fsspec URL")],
)
def test_an_unusable_workspace_root(small_demo_config: Build3XCMConfig, tmp_path: Path, root: str, needle: str) -> None:
    if root == "file":
        root = str(tmp_path / "a-file")
        Path(root).write_text("not a folder")
    code, output = _build(small_demo_config, tmp_path, "--workspace-root", root)
    assert code == 2
    assert "workspace_root" in _error_line(output, needle)


def test_an_invalid_version_names_the_field(small_demo_config: Build3XCMConfig, tmp_path: Path) -> None:
    code, output = _build(small_demo_config, tmp_path, "--version", "1.0.0-..")
    assert code == 2 and "release.version" in output and "Traceback" not in output


@pytest.mark.slow
def test_a_full_disk(small_demo_config: Build3XCMConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Storage.write_bytes

    def full(self: Storage, path: str, data: bytes) -> None:
        if "/tables/images/part-" in path:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real(self, path, data)

    monkeypatch.setattr(Storage, "write_bytes", full)
    code, output = _build(small_demo_config, tmp_path)
    assert code == 1
    line = _error_line(output, "no space left")
    assert "tables/images/part-00000.parquet" in line and "rerun" in line
    monkeypatch.setattr(Storage, "write_bytes", real)
    code, output = _build(small_demo_config, tmp_path)  # space freed: the rerun resumes and releases
    assert code == 0, output and "skipped (already done)" in output


@pytest.mark.slow
def test_a_read_only_release_root(
    small_demo_config: Build3XCMConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ReleaseWriter.write_bytes

    def read_only(self: ReleaseWriter, rel: str, data: bytes) -> None:
        if not self.compare_only:
            raise PermissionError(errno.EACCES, "Permission denied", f"{self.staging}/{rel}")
        real(self, rel, data)

    monkeypatch.setattr(ReleaseWriter, "write_bytes", read_only)
    code, output = _build(small_demo_config, tmp_path)
    assert code == 1
    line = _error_line(output, "cannot write")
    assert small_demo_config.release.root in line and "Permission denied" in line
    # With the identical version already there, nothing needs writing: the rebuild succeeds.
    monkeypatch.setattr(ReleaseWriter, "write_bytes", real)
    assert _build(small_demo_config, tmp_path)[0] == 0
    monkeypatch.setattr(ReleaseWriter, "write_bytes", read_only)
    code, output = _build(small_demo_config, tmp_path)
    assert code == 0 and '"status": "unchanged"' in output


@pytest.mark.slow
def test_a_corrupt_blob(small_demo_config: Build3XCMConfig, tmp_path: Path) -> None:
    summary = build_locally(small_demo_config)
    shutil.rmtree(summary.release_path)
    ws = Workspace(small_demo_config.workspace_root, small_demo_config.resolved_build_id())
    sha = ws.read_table("image_metadata")["sha256"][0].as_py()
    Path(ws.blobs.path(sha)).write_bytes(b"bit rot")
    code, output = _build(small_demo_config, tmp_path)
    assert code == 1
    line = _error_line(output, "blob is corrupt")
    assert ws.blobs.path(sha) in line and "rerun" in line


@pytest.mark.slow
def test_a_truncated_parquet_in_a_release(small_demo_config: Build3XCMConfig) -> None:
    release = Path(build_locally(small_demo_config).release_path)
    part = next((release / "benchmark").glob("*.parquet"))
    part.write_bytes(part.read_bytes()[:100])
    result = CliRunner().invoke(app, ["validate", str(release)])
    assert result.exit_code == 1  # the file is not the one the manifest lists
    assert "benchmark/" in _error_line(result.output, "has 100 bytes, the manifest says")
    rehash_manifest(release)  # listed as it is now: the table itself cannot be read
    result = CliRunner().invoke(app, ["validate", str(release)])
    assert result.exit_code == 2
    assert str(part) in _error_line(result.output, "not a readable Parquet file")


@pytest.mark.slow
def test_a_malformed_review_export(small_demo_config: Build3XCMConfig, tmp_path: Path) -> None:
    export = tmp_path / "export.json"
    export.write_text(json.dumps([{"id": 1, "data": {"item_key": "a|b"}, "annotations": "not a list"}]))
    config = Build3XCMConfig.model_validate(
        {**small_demo_config.model_dump(), "review": {"backend": "label_studio_files", "completed_export": str(export)}}
    )
    code, output = _build(config, tmp_path)
    assert code == 2
    assert "malformed review export" in _error_line(output, "malformed review export")


def test_every_domain_error_the_cli_names_exists() -> None:
    """The CLI names the domain errors it turns into lines by `module.QualName` (it imports none of them until a
    command needs them): a class moved or renamed would silently stop matching and show a traceback again."""
    import importlib

    from flows.cli.errors import DOMAIN_ERRORS

    for name in DOMAIN_ERRORS:
        module, _, qualname = name.rpartition(".")
        klass = getattr(importlib.import_module(module), qualname)
        assert isinstance(klass, type) and issubclass(klass, Exception), name
        assert f"{klass.__module__}.{klass.__qualname__}" == name, name  # defined there, not re-exported
