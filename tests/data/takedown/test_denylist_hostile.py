"""`culturebench takedown` on hostile or unlucky input (issue 27): concurrent takedowns on one release root, takedown
reasons meant for a browser, a corrupt denylist, a takedown of every image, URL-only releases, impossible dates,
hostile manifests. Each case ends in a patch that is right, or in one line naming what to fix and nothing written."""

from __future__ import annotations

import errno
import hashlib
import html
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from data.reference import default_pack
from data.takedown import denylist as denylist_module
from data.takedown.denylist import FILE as DENYLIST
from data.takedown.denylist import DenylistEntry, read_denylist, write_denylist
from data.text_safety import markdown_text
from data.workspace import Storage
from flows.cli import app
from tests.support.paths import REPO_ROOT

REPO = REPO_ROOT
DEMO = REPO / "releases"
DATE = "2026-05-01"


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def take_down(release: Path, *names: str, reason: str = "the rights holder asked", **options: str) -> Any:
    extra = [arg for key, value in {"date": DATE, **options}.items() for arg in (f"--{key}", value)]
    return invoke("takedown", str(release), *names, "--reason", reason, *extra)


def error_line(output: str, needle: str) -> str:
    """The one line of `output` that holds `needle` (a CLI error is one line, never a traceback)."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if needle in line]
    assert len(lines) == 1, output
    return lines[0]


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def versions(benchmark_root: Path) -> set[str]:
    """The version folders (and staging folders) under `<root>/<benchmark>/`."""
    return {p.name for p in benchmark_root.iterdir() if p.is_dir()}


def read_table(folder: Path, config: str) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted((folder / config).glob("*.parquet"))])


@pytest.fixture
def demo_root(tmp_path: Path) -> Path:
    """A copy of the demo releases, laid out as a release root: <root>/3xcm/0.1.0-demo, <root>/mixcube/0.1.0-demo."""
    root = tmp_path / "releases"
    for benchmark in ("3xcm", "mixcube"):
        shutil.copytree(DEMO / benchmark / "0.1.0-demo", root / benchmark / "0.1.0-demo")
    return root


def entry(name: str, version: str = "1.0.1") -> DenylistEntry:
    return DenylistEntry(
        image_id=name,
        sha256=hashlib.sha256(name.encode()).hexdigest(),
        url=f"https://example.org/{name}.jpg",
        reason="the rights holder asked",
        date=DATE,
        version=version,
        removed_from="1.0.0",
    )


# -- item 4: concurrent takedowns ------------------------------------------------------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from data.takedown.denylist import DenylistEntry, write_denylist
root, name, ready, go = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
new = [DenylistEntry(image_id=name, url=f"https://example.org/{name}.jpg", reason="r", date="2026-05-01",
                     version="1.0.1", removed_from="1.0.0")]
ready.touch()
while not go.exists():
    time.sleep(0.002)
write_denylist(root, "3xcm", new)
"""


@pytest.mark.slow
def test_concurrent_takedowns_keep_every_denylist_entry(tmp_path: Path) -> None:
    """Processes merging different entries into one large denylist at the same moment: every entry survives (the
    read-merge-write runs under an exclusive lock, reading the denylist again under it)."""
    root = tmp_path / "releases"
    (root / "3xcm").mkdir(parents=True)
    old = [entry(f"old-{i:06d}").model_dump(mode="json") for i in range(60_000)]  # about 20 MB, as in the report
    (root / "3xcm" / DENYLIST).write_text(json.dumps({"benchmark": "3xcm", "entries": old}, indent=2))
    assert (root / "3xcm" / DENYLIST).stat().st_size > 19_000_000
    writers, rounds = 3, 3
    for round_ in range(rounds):
        names = [f"round{round_}-writer{w}" for w in range(writers)]
        go = tmp_path / f"go-{round_}"
        ready = [tmp_path / f"ready-{name}" for name in names]
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(root), name, str(flag), str(go)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for name, flag in zip(names, ready, strict=True)
        ]
        deadline = time.monotonic() + 120
        while not all(flag.exists() for flag in ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()  # all at once: each reads the 20 MB denylist while the others do
        for process in processes:
            output, _ = process.communicate(timeout=300)
            assert process.returncode == 0, output.decode()
    kept = read_denylist(str(root), "3xcm").entries
    ids = [e.image_id for e in kept]
    assert len(ids) == len(old) + writers * rounds
    assert set(ids) >= {f"round{r}-writer{w}" for r in range(rounds) for w in range(writers)}
    assert ids[: len(old)] == [e["image_id"] for e in old]  # the entries already there, in their order
    assert not (root / "3xcm" / f"{DENYLIST}.lock").exists()


def test_a_stale_denylist_lock_fails_after_a_bounded_wait_naming_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_denylist(str(tmp_path), "mixcube", [entry("a")])
    lock = tmp_path / "mixcube" / f"{DENYLIST}.lock"
    lock.write_text("pid 999999 on a crashed host\n")  # a holder that died without removing it
    from data.takedown.denylist import DenylistLockError

    monkeypatch.setattr(denylist_module, "LOCK_TIMEOUT_S", 0.3)
    started = time.monotonic()
    with pytest.raises(DenylistLockError) as raised:
        write_denylist(str(tmp_path), "mixcube", [entry("b")])
    assert time.monotonic() - started < 10
    message = str(raised.value)
    assert "\n" not in message and str(lock) in message and "delete" in message and "no takedown is running" in message
    assert lock.exists()  # somebody else's lock is never removed by a waiter
    assert [e.image_id for e in read_denylist(str(tmp_path), "mixcube").entries] == ["a"]
    lock.unlink()
    write_denylist(str(tmp_path), "mixcube", [entry("b")])
    assert [e.image_id for e in read_denylist(str(tmp_path), "mixcube").entries] == ["a", "b"]


# -- item 7: takedown reasons in the card ----------------------------------------------------------------------------

PAYLOADS = ("<script>alert(1)</script>", "<img src=x onerror=alert(2)>", "[x](javascript:alert(3))")
HOSTILE_REASON = "rights holder " + " ".join(PAYLOADS)


def without_code_spans(text: str) -> str:
    return re.sub(r"(?<!\\)`[^`\n]*`", "", text)


def unescaped(text: str, char: str) -> list[int]:
    """Where `char` occurs in `text` not escaped by a backslash (after an even number of them)."""
    return [m.start(2) for m in re.finditer(rf"(\\*)({re.escape(char)})", text) if len(m.group(1)) % 2 == 0]


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("\n---\n", 1)[0].removeprefix("---\n"))


def test_a_hostile_reason_is_escaped_in_the_card_and_kept_raw_in_the_data(demo_root: Path) -> None:
    parent = demo_root / "mixcube" / "0.1.0-demo"
    result = take_down(parent, "--image-id", "demo-az-food-00-african", reason=HOSTILE_REASON)
    assert result.exit_code == 0, result.output
    patch = demo_root / "mixcube" / "0.1.1-demo"
    card = (patch / "README.md").read_text()
    for payload in (*PAYLOADS, "<script", "<img", "](javascript:"):
        assert payload not in card
    assert markdown_text(HOSTILE_REASON) in card
    assert "&lt;script&gt;alert\\(1\\)&lt;/script&gt;" in card and "\\[x\\]\\(javascript:alert\\(3\\)\\)" in card
    meta = front_matter(card)
    assert meta["license"] and meta["configs"]  # the front matter still parses, as before
    assert invoke("validate", str(patch)).exit_code == 0
    # Data keeps the reason as given: the manifest and the denylist are read by programs, not rendered.
    manifest = json.loads((patch / "manifest.json").read_text())
    assert manifest["takedowns"][-1]["reason"] == HOSTILE_REASON
    assert {e.reason for e in read_denylist(str(demo_root), "mixcube").entries} == {HOSTILE_REASON}


def test_every_string_of_a_takedown_record_is_escaped_in_the_changelog() -> None:
    """Ids, hashes, URLs, why, version, date, parent and the summary of an earlier takedown (read back from a
    parent's manifest, so anything) cannot open a tag, a link, a new line or a new table cell."""
    from data.publish.changelog import render_changelog
    from data.publish.manifest import TakedownRecord

    hostile = "<img src=x onerror=alert(1)>\n<script>x</script> | `a` [y](javascript:z)"
    record = {
        "version": hostile,
        "parent": hostile,
        "date": hostile,
        "reason": hostile,
        "removed": [
            {"image_id": hostile, "sha256": hostile, "url": hostile, "final_url": "j" + hostile, "why": hostile},
            {
                "image_id": "plain-0-1-eng",
                "sha256": "a" * 64,
                "url": "a/b_c.jpg",
                "final_url": None,
                "why": "requested",
            },
        ],
        "rows": {"summary": hostile + " `kept <b>` and `open"},
    }
    text = render_changelog([TakedownRecord.model_validate(record)])
    prose = without_code_spans(text)
    assert "<" not in text and ">" not in text  # no tag, not even inside a code span
    assert not unescaped(prose, "[") and not unescaped(prose, "]")  # no link, no image
    assert "\\[y\\]\\(javascript:z\\)" in text or "\\[y\\](javascript:z)" in text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 3  # the header and two images: no payload made a line of its own
    for row in rows:
        assert len(unescaped(without_code_spans(row), "|")) == 5  # four cells, no more
    assert "| `plain-0-1-eng` | `" + "a" * 64 + "` | `a/b_c.jpg` | requested |" in text  # plain values as before
    assert all(not line.startswith(("<", "[")) for line in text.splitlines())
    assert html.escape("<img src=x onerror=alert(1)>", quote=False) in text


# -- item 11: check everything, then write the patch, then the denylist ----------------------------------------------


def test_a_corrupt_denylist_is_refused_before_anything_is_written(demo_root: Path) -> None:
    benchmark = demo_root / "mixcube"
    (benchmark / DENYLIST).write_text('{"benchmark": "mixcube", "entries": [')
    before = versions(benchmark)
    result = take_down(benchmark / "0.1.0-demo", "--image-id", "demo-az-food-00-african")
    assert result.exit_code == 2
    assert str(benchmark / DENYLIST) in error_line(result.output, DENYLIST)
    assert versions(benchmark) == before  # no patch, no staging folder
    assert (benchmark / DENYLIST).read_text() == '{"benchmark": "mixcube", "entries": ['


@pytest.mark.slow
def test_a_denylist_that_cannot_be_written_after_the_patch_says_so_and_a_rerun_completes_it(
    demo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    benchmark = demo_root / "mixcube"
    real = Storage.write_bytes

    def full(self: Storage, path: str, data: bytes) -> None:
        if path.endswith(f"/{DENYLIST}"):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real(self, path, data)

    monkeypatch.setattr(Storage, "write_bytes", full)
    result = take_down(benchmark / "0.1.0-demo", "--image-id", "demo-az-food-00-african")
    assert result.exit_code == 1
    line = error_line(result.output, "was not updated")
    patch = benchmark / "0.1.1-demo"
    assert str(patch) in line and str(benchmark / DENYLIST) in line and "rerun" in line.lower() and DATE in line
    assert (patch / "manifest.json").is_file() and not (benchmark / DENYLIST).exists()
    assert not (benchmark / f"{DENYLIST}.lock").exists()

    monkeypatch.setattr(Storage, "write_bytes", real)
    lock = benchmark / f"{DENYLIST}.lock"  # and a takedown that crashed holding the denylist's lock
    lock.write_text("pid 999999 on a crashed host\n")
    monkeypatch.setattr(denylist_module, "LOCK_TIMEOUT_S", 0.2)
    stale = take_down(benchmark / "0.1.0-demo", "--image-id", "demo-az-food-00-african")
    assert stale.exit_code == 1
    line = error_line(stale.output, "was not updated")
    assert f"delete {lock}" in line and "no takedown is running" in line and not (benchmark / DENYLIST).exists()
    lock.unlink()
    again = take_down(benchmark / "0.1.0-demo", "--image-id", "demo-az-food-00-african")
    assert again.exit_code == 0, again.output
    assert last_json(again.output)["status"] == "unchanged"
    entries = read_denylist(str(demo_root), "mixcube").entries
    quintet = {f"demo-az-food-00-{k}" for k in ("original", "african", "caucasian", "eastasian", "southasian")}
    assert {e.image_id for e in entries} == quintet
    assert {e.version for e in entries} == {"0.1.1-demo"}


# -- item 18: a takedown of every image -----------------------------------------------------------------------------


def test_a_pool_index_over_an_empty_catalog_has_no_image() -> None:
    from curation.pool_index import NO_IMAGE, PoolIndex
    from curation.rules import RQ2_RULES, RQ3_RULES, Catalog

    images = read_table(DEMO / "3xcm" / "0.1.0-demo", "image_metadata").drop_columns(["image"]).slice(0, 0)
    catalog = Catalog.from_table(images, [c.name for c in default_pack().countries])
    index = PoolIndex(catalog, np.arange(0, dtype=np.int64))
    assert index.cells == 0 and index.usages().tolist() == []
    for slot in (*RQ2_RULES, *RQ3_RULES):
        assert index.least_used(slot, concept=0, x=0, y=0) == NO_IMAGE


def test_taking_down_every_3xcm_image_fails_validation_instead_of_crashing() -> None:
    from curation.takedown import TakedownRequest, take_down_xcm

    folder = DEMO / "3xcm" / "0.1.0-demo"
    images = read_table(folder, "image_metadata").drop_columns(["image"])
    result = take_down_xcm(
        images,
        read_table(folder, "benchmark"),
        read_table(folder, "benchmark_cd"),
        read_table(folder, "unassembled"),
        TakedownRequest(tuple(images["image_id"].to_pylist())),
        seed=0,
        pack=default_pack(),
    )
    assert result.images.num_rows == 0 and result.benchmark.num_rows == 0 and result.benchmark_cd.num_rows == 0
    assert not result.validation.ok
    assert "non_empty" in {v.rule for v in result.validation.violations}


@pytest.mark.parametrize(
    ("benchmark", "config", "key"), [("3xcm", "image_metadata", "image_id"), ("mixcube", "default", "sample_id")]
)
def test_a_takedown_of_every_image_is_refused_in_one_line(demo_root: Path, benchmark: str, config: str, key: str):
    parent = demo_root / benchmark / "0.1.0-demo"
    ids = read_table(parent, config)[key].to_pylist()
    result = take_down(parent, *(arg for i in ids for arg in ("--image-id", i)))
    assert result.exit_code == 1
    line = error_line(result.output, "every image")
    assert str(len(set(ids))) in line and "nothing was written" in line
    assert versions(demo_root / benchmark) == {"0.1.0-demo"} and not (demo_root / benchmark / DENYLIST).exists()


# -- item 19: URL-only releases --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def url_only_mixcube(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A URL-only MixCuBe release at <root>/mixcube/0.0.1, built as tests/flows/xcm/test_url_only_release.py builds
    one."""
    from curation.image_hashing import hash_batch
    from data.publish.release import ReleaseConfig, with_phash
    from data.workspace import Workspace
    from flows.mixcube.release import write_mixcube_release
    from tests.flows.mixcube.test_release import build_rows

    base = tmp_path_factory.mktemp("mixcube-urls")
    ws = Workspace(str(base / "ws"), "mixcube-urls")
    rows, incomplete = build_rows(ws)
    shas = rows["sha256"].to_pylist()
    batch = hash_batch([lambda sha=sha: ws.blobs.get(sha) for sha in shas])
    rows = with_phash(rows, {sha: int(batch.phash[i]) for i, sha in enumerate(shas)})
    config = ReleaseConfig(root=str(base / "rel"), version="0.0.1", mode="urls")
    return Path(
        write_mixcube_release(config, ws.blobs, rows, {"demo": True, "incomplete": incomplete}, default_pack()).path
    )


@pytest.mark.slow
def test_a_url_only_mixcube_takedown_writes_a_url_only_patch(url_only_mixcube: Path, tmp_path: Path) -> None:
    import datasets

    root = tmp_path / "rel"
    shutil.copytree(url_only_mixcube.parent.parent, root)
    parent = root / "mixcube" / "0.0.1"
    rows = read_table(parent, "default").to_pylist()
    swap = next(r for r in rows if r["ethnicity"] != "original")
    result = take_down(parent, "--image-id", swap["sample_id"])
    assert result.exit_code == 0, result.output
    patch = root / "mixcube" / "0.0.2"
    manifest = json.loads((patch / "manifest.json").read_text())
    assert manifest["mode"] == "urls" and not [f for f in manifest["files"] if f.endswith(".tar")]
    kept = [r for r in rows if r["original_id"] != swap["original_id"]]
    after = read_table(patch, "default").to_pylist()
    assert [r["sample_id"] for r in after] == [r["sample_id"] for r in kept] and len(kept) == len(rows) - 5
    for old, new in zip(kept, after, strict=True):
        assert new == old  # every column, the image included: null for an original, the same bytes for a swap
        assert (new["image"] is None) == (new["ethnicity"] == "original")
    assert invoke("validate", str(patch)).exit_code == 0
    loaded = datasets.load_dataset(str(patch), split="train")
    assert len(loaded) == len(kept)
    removed = {e.image_id for e in read_denylist(str(root), "mixcube").entries}
    assert removed == {r["sample_id"] for r in rows if r["original_id"] == swap["original_id"]}
    # A sha256 the release does not hold is looked for among the released bytes, which the originals lack.
    unknown = take_down(parent, "--sha256", "0" * 64, version="0.0.3")
    assert unknown.exit_code == 2 and "0" * 64 in error_line(unknown.output, "not in this release")


def test_a_url_only_3xcm_takedown_writes_a_url_only_patch(tmp_path: Path) -> None:
    """A URL-only 3XCM release (the demo's tables, without bytes) is patched without bytes."""
    from data.publish.release import ReleaseConfig, with_phash
    from data.takedown.patch import ParentRelease
    from flows.xcm.release import write_3xcm_release

    demo = ParentRelease.open(DEMO / "3xcm" / "0.1.0-demo")
    provenance = demo.provenance()
    provenance["config"] = {**provenance["config"], "release": {**provenance["config"]["release"], "mode": "urls"}}
    catalog = demo.table("image_metadata")
    catalog = with_phash(catalog, {sha: int(sha[:15], 16) for sha in catalog["sha256"].to_pylist()})
    root = tmp_path / "rel"
    written = write_3xcm_release(
        ReleaseConfig(root=str(root), version="0.0.1", mode="urls"),
        None,  # type: ignore[arg-type]  # no image bytes are written
        catalog,
        demo.table("benchmark"),
        demo.table("benchmark_cd"),
        demo.table("unassembled"),
        provenance,
        default_pack(),
    )
    parent = Path(written.path)
    assert "image" not in read_table(parent, "image_metadata").column_names
    candidate = demo.table("benchmark")["semantically_relevant_candidate_image_id"][0].as_py()
    result = take_down(parent, "--image-id", candidate)
    assert result.exit_code == 0, result.output
    patch = root / "3xcm" / "0.0.2"
    manifest = json.loads((patch / "manifest.json").read_text())
    assert manifest["mode"] == "urls" and not [f for f in manifest["files"] if f.endswith(".tar")]
    images = read_table(patch, "image_metadata")
    assert "image" not in images.column_names and candidate not in images["image_id"].to_pylist()
    assert images.num_rows == catalog.num_rows - 1 and images["phash"].null_count == 0
    assert invoke("validate", str(patch)).exit_code == 0
    unknown = take_down(parent, "--sha256", "0" * 64, version="0.0.3")
    assert unknown.exit_code == 2 and "0" * 64 in error_line(unknown.output, "not in this release")


# -- item 22 and the parent's manifest: input refused in one line, before anything is written ------------------------


BAD_DATES = ["2026-13-45", "2026-02-30", "20260501", "2026-5-1", "2026-W18-5", "2026-05-01T00:00", "2026-05-01\n"]


@pytest.mark.parametrize("date", [*BAD_DATES, "\uff12\uff10\uff12\uff16-05-01"])  # the last in full-width digits
def test_an_impossible_date_is_refused_naming_the_option(demo_root: Path, date: str) -> None:
    benchmark = demo_root / "mixcube"
    result = take_down(benchmark / "0.1.0-demo", "--image-id", "demo-az-food-00-african", date=date)
    assert result.exit_code == 2
    assert "YYYY-MM-DD" in error_line(result.output, "--date")
    assert versions(benchmark) == {"0.1.0-demo"} and not (benchmark / DENYLIST).exists()


def test_a_version_with_a_trailing_newline_is_refused_in_one_line(demo_root: Path) -> None:
    benchmark = demo_root / "mixcube"
    result = take_down(benchmark / "0.1.0-demo", "--image-id", "demo-az-food-00-african", version="0.1.1\n")
    assert result.exit_code == 2
    error_line(result.output, "semantic version")
    assert versions(benchmark) == {"0.1.0-demo"}


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"name": "3xcm", "version": "0.0.1", "files": {}, "x": "\xe9"}'.encode("latin-1"), "UTF-8"),
        (b"[1, 2, 3]", "not an object"),
        (b'{"name": "../../etc", "version": "0.0.1", "files": {}}', "'name'"),
        (b'{"name": "3xcm", "version": "../0.0.1", "files": {}}', "'version'"),
        (b'{"name": "3xcm", "version": "0.0.9", "files": {}}', "move it there first"),
        (b'{"name": "imagenet", "version": "0.0.1", "files": {}}', "takedown knows"),
        (b"[" * 100_000, "manifest.json"),
        (b'{"name": "3xcm", "version": "0.0.1", "files": {}, "takedowns": "x"}', "'takedowns'"),
        (b'{"name": "3xcm", "version": "0.0.1", "files": {}, "takedowns": [{"version": 1}]}', "'takedowns[0]'"),
        (b'{"name": "3xcm", "version": "0.0.1", "files": {}, "config": []}', "'config'"),
        (b'{"name": "3xcm", "version": "0.0.1", "files": {}, "seeds": {"assembly": "x"}}', "'seeds.assembly'"),
        (
            b'{"name": "3xcm", "version": "0.0.1", "files": {}, "config": {"release": {"row_group_size": -1}}}',
            "release settings",
        ),
    ],
)
def test_a_hostile_manifest_is_refused_in_one_line(tmp_path: Path, content: bytes, needle: str) -> None:
    folder = tmp_path / "releases" / "3xcm" / "0.0.1"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_bytes(content)
    result = take_down(folder, "--image-id", "x")
    assert result.exit_code == 2
    line = error_line(result.output, needle)
    assert "manifest.json" in line or str(folder) in line
    assert versions(folder.parent) == {"0.0.1"}
