"""URL-only releases (issue 19, `release.mode: urls`) and `culturebench fetch-release`.

A production-shaped 3XCM build (the real `ddgs` client with its network layer faked, the HTTP downloader on the
loopback image host) released without image bytes; then `fetch-release` downloads the images again, checks them
against their sha256 and writes the HF `Image` table; then the host changes one image, loses one and opts one out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from collectors import search_ddgs
from collectors.release_images import REPORT, FetchReleaseError, fetch_release
from data.publish import croissant
from data.workspace import sha256_bytes
from flows.cli import app
from flows.xcm.build import build_locally
from flows.xcm.config import Build3XCMConfig
from tests.data.test_provenance import ddgs_build_config, faked_ddgs
from tests.support.fake_image_host import FakeImageHost, make_jpeg


@pytest.fixture(autouse=True)
def fresh_canary() -> None:
    search_ddgs.reset_canary_cache()


def url_only_config(tmp_path: Path) -> Build3XCMConfig:
    return ddgs_build_config(tmp_path, release={"mode": "urls"})


def build(config: Build3XCMConfig, host: FakeImageHost) -> Path:
    with faked_ddgs(host):
        return Path(build_locally(config).release_path)


def fetch(release: Path, out: Path, *extra: str) -> dict:
    result = CliRunner().invoke(
        app, ["fetch-release", str(release), "--out", str(out), "--allow-private-addresses", *extra]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def report(out: Path) -> dict[str, dict]:
    return {r["image_id"]: r for r in pq.read_table(out / REPORT).to_pylist()}


@pytest.mark.slow
def test_a_url_only_3xcm_release_round_trips_through_fetch_release(tmp_path: Path) -> None:
    from datasets import load_dataset

    corpus = [make_jpeg(i, size=(320, 240)) for i in range(80)]
    config = url_only_config(tmp_path)
    with FakeImageHost(corpus=corpus) as host:
        release = build(config, host)

        # -- the release: URLs, sha256 and pHash; no bytes, no tars ----------------------------------------------
        files = sorted(p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file())
        assert not [f for f in files if f.endswith(".tar") or f.startswith("images/")], files
        parts = sorted((release / "image_metadata").glob("*.parquet"))
        table = pa.concat_tables(pq.read_table(p) for p in parts)
        assert "image" not in table.column_names
        rows = table.to_pylist()
        assert len(rows) > 30
        for row in rows:
            assert row["url"].startswith(host.url("/")) and len(row["sha256"]) == 64
            assert row["phash"] is not None and len(row["phash"]) == 16 and int(row["phash"], 16) >= 0
        card = (release / "README.md").read_text()
        body = card.split("\n---\n", 1)[1]  # after the YAML front matter
        assert "**Release mode: `urls`.**" in "\n".join(body.strip().splitlines()[:4])
        assert "culturebench fetch-release" in card and "WebDataset" not in card.split("## Statistics")[0]
        manifest = json.loads((release / "manifest.json").read_text())
        assert manifest["mode"] == "urls" and manifest["config"]["release"]["mode"] == "urls"
        assert not [f for f in manifest["files"] if f.endswith(".tar")]

        jsonld = json.loads((release / croissant.FILE).read_text())
        image_sets = {rs["@id"]: rs for rs in jsonld["recordSet"]}
        fields = {f["name"]: f for f in image_sets["image_metadata"]["field"]}
        assert fields["image"]["dataType"] == "sc:URL"
        assert fields["image"]["source"]["extract"] == {"column": "url"}
        assert fields["phash"]["dataType"] == "sc:Text"
        assert not any(d["encodingFormat"] == croissant.TAR for d in jsonld["distribution"])
        done = subprocess.run(
            [str(Path(sys.executable).with_name("mlcroissant")), "validate", "--jsonld", str(release / croissant.FILE)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0 and "error(s)" not in output and "Traceback" not in output, output

        # -- fetch-release: every image ok, byte for byte the build's blob --------------------------------------
        out = tmp_path / "fetched"
        summary = fetch(release, out, "--write-images")
        assert summary["counts"] == {"ok": len(rows)}
        assert {r["status"] for r in report(out).values()} == {"ok"}
        loaded = load_dataset(str(out / "image_metadata"), split="train")
        assert loaded.num_rows == len(rows)
        raw = pq.read_table(out / "image_metadata").to_pylist()
        assert [r["image_id"] for r in raw] == [r["image_id"] for r in rows]
        for row in raw:
            data = row["image"]["bytes"]
            assert sha256_bytes(data) == row["sha256"]  # JPEG originals: released as downloaded
            assert data == blob(tmp_path / "ws", row["sha256"])
        assert loaded[0]["image"].size == (320, 240)  # decoded by datasets' Image feature
        # The release's reference pack comes along: the fetched table is read with the release's own countries.
        from data.reference import load_pack

        assert load_pack(out / "reference").digest == load_pack(release / "reference").digest

        # -- the sources move on: one image changed, one gone, one opted out -------------------------------------
        direct = [r for r in rows if r["rank"] == 2]  # /img/<n>/...: not behind a redirect
        changed, gone, opted = direct[0], direct[1], direct[2]
        n_changed = int(changed["url"].split("/img/")[1].split("/")[0])
        host.corpus[n_changed] = make_jpeg(10_000, size=(320, 240))
        host.overrides[path_of(gone["url"])] = (404, {})
        host.overrides[path_of(opted["url"])] = (200, {"X-Robots-Tag": "noai"})
        again = tmp_path / "fetched-again"
        summary = fetch(release, again)
        assert summary["counts"] == {"ok": len(rows) - 3, "changed": 1, "gone": 1, "opted_out": 1}
        assert not (again / "image_metadata").exists()  # no --write-images
        verdicts = report(again)
    assert verdicts[changed["image_id"]]["status"] == "changed"
    assert verdicts[changed["image_id"]]["fetched_sha256"] == sha256_bytes(make_jpeg(10_000, size=(320, 240)))
    assert changed["sha256"] in verdicts[changed["image_id"]]["detail"]
    assert (verdicts[gone["image_id"]]["status"], verdicts[gone["image_id"]]["error"]) == ("gone", "http_404")
    assert verdicts[opted["image_id"]]["status"] == "opted_out"
    assert "X-Robots-Tag" in verdicts[opted["image_id"]]["detail"]
    assert verdicts[opted["image_id"]]["url"] == opted["url"]
    others = [v for k, v in verdicts.items() if k not in {changed["image_id"], gone["image_id"], opted["image_id"]}]
    assert {v["status"] for v in others} == {"ok"} and all(v["error"] is None for v in others)


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3]


def blob(workspace: Path, sha: str) -> bytes:
    """The build's stored bytes of `sha` (the blob store names each blob by its sha256)."""
    (path,) = [p for p in workspace.rglob(sha) if p.is_file()]
    return path.read_bytes()


@pytest.mark.slow
def test_fetch_release_refuses_a_release_with_its_images(small_demo_config: Build3XCMConfig, tmp_path: Path) -> None:
    release = Path(build_locally(small_demo_config).release_path)
    with pytest.raises(FetchReleaseError, match="not a URL-only one"):
        fetch_release(release, tmp_path / "out")
    result = CliRunner().invoke(app, ["fetch-release", str(release), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "not a URL-only one" in result.output


@pytest.mark.slow
def test_a_url_only_mixcube_release_keeps_the_swaps_bytes_and_names_the_originals(tmp_path: Path) -> None:
    import datasets

    from curation.image_hashing import hash_batch
    from data.publish.release import ReleaseConfig, with_phash
    from data.reference import default_pack
    from data.workspace import Workspace
    from flows.mixcube.release import GRID, write_mixcube_release
    from tests.flows.mixcube.test_release import build_rows

    ws = Workspace(str(tmp_path / "ws"), "mixcube-urls")
    rows, incomplete = build_rows(ws)
    shas = rows["sha256"].to_pylist()
    batch = hash_batch([lambda sha=sha: ws.blobs.get(sha) for sha in shas])
    rows = with_phash(rows, {sha: int(batch.phash[i]) for i, sha in enumerate(shas)})
    config = ReleaseConfig(root=str(tmp_path / "rel"), version="0.0.1", mode="urls")
    release = Path(
        write_mixcube_release(config, ws.blobs, rows, {"demo": True, "incomplete": incomplete}, default_pack()).path
    )

    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["mode"] == "urls"
    assert not [f for f in manifest["files"] if f.endswith(".tar") or f == GRID]
    loaded = datasets.load_dataset(str(release), split="train")
    for row in loaded:
        assert (row["image"] is None) == (row["ethnicity"] == "original"), row["sample_id"]
        assert len(row["phash"]) == 16
    card = (release / "README.md").read_text().split("\n---\n", 1)[1]
    assert "**Release mode: `urls`.**" in "\n".join(card.strip().splitlines()[:4])
    done = subprocess.run(
        [str(Path(sys.executable).with_name("mlcroissant")), "validate", "--jsonld", str(release / croissant.FILE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "error(s)" not in done.stdout + done.stderr, done.stdout + done.stderr

    # The demo originals have no web URL: each is reported gone, without a request; the swaps are not fetched.
    summary = fetch_release(release, tmp_path / "out")
    originals = rows.filter(pa.compute.equal(rows["ethnicity"], "original")).num_rows
    assert summary.counts == {"gone": originals}
    assert {r["error"] for r in report(tmp_path / "out").values()} == {"no_url"}
