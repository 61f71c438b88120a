"""Every route by which a URL from a search result (or from a config) can be fetched either goes through the
SSRF-guarded HTTP downloader or is refused. A loopback host (tests/support/fake_image_host.py) proves no request
reached it.

The routes:
- 3XCM `search: ddgs` hits, fetched by `download` (refused at config time unless it is the HTTP downloader);
- 3XCM local search from a manifest CSV whose `path` column holds web URLs, fetched by the local importer;
- the local importer itself, for any URL a hit may carry (http, https, ftp, chained fsspec URLs, data:);
- the local searcher's own `root` / `manifest` (fsspec reads them; a web root would be listed and opened);
- MixCuBe `originals: search` (ddgs hits; with the local importer for a non-web searcher);
- MixCuBe `originals: local`, whose `root` and `labels_csv` are opened with fsspec.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from collectors.downloader import HttpDownloadConfig
from collectors.image_check import ImageLimits
from collectors.importer import ImportConfig, import_hits
from collectors.mixcube_search import SearchOriginalsConfig, search_originals
from collectors.search import LocalFolderSearchConfig, LocalFolderSearcher, SearchHit, SearchQuery
from collectors.ssrf import storage_refusal
from data.reference import default_pack
from data.workspace import Workspace
from flows.engine.config import ConfigError, build_config
from flows.mixcube.config import BuildMixCubeConfig
from flows.xcm.config import Build3XCMConfig
from tests.support.fake_image_host import FakeImageHost, make_corpus

CORPUS = make_corpus(2, seed=11, min_kib=8, max_kib=16)


@pytest.fixture
def host() -> Iterator[FakeImageHost]:
    with FakeImageHost(corpus=CORPUS) as server:
        yield server


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(str(tmp_path / "ws"), "b")


def served(host: FakeImageHost) -> dict[str, int]:
    return {path: n for path, n in host.counts.items() if n}


# -- the config refuses a web search without the HTTP downloader --------------------------------------------------


def test_a_web_search_with_the_local_importer_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as refused:
        build_config(
            {"search": {"backend": "ddgs"}}, model=Build3XCMConfig
        )  # `download` left at its default, the local importer
    message = str(refused.value)
    assert "download.backend" in message and "'http'" in message, message
    with pytest.raises(ConfigError, match=r"download\.backend"):
        build_config(
            {"search": {"backend": "ddgs"}, "download": {"backend": "local"}}, demo=True, model=Build3XCMConfig
        )
    accepted = build_config({"search": {"backend": "ddgs"}, "download": {"backend": "http"}}, model=Build3XCMConfig)
    assert (accepted.search.backend, accepted.download.backend) == ("ddgs", "http")
    # A local search may still use the local importer.
    assert Build3XCMConfig.demo().download.backend == "local"


def test_the_cli_reports_it_as_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows import cli

    started: list[object] = []
    monkeypatch.setattr("flows.cli.build._run_build", lambda *args: started.append(args))  # a build must not even start
    path = tmp_path / "web.yaml"
    path.write_text(yaml.safe_dump({"search": {"backend": "ddgs"}, "workspace_root": str(tmp_path / "ws")}))
    result = CliRunner().invoke(cli.app, ["build", "3xcm", "--config", str(path), "--engine", "local"])
    assert started == []
    assert result.exit_code == 2, result.output
    assert "download.backend" in result.output and "Traceback" not in result.output


def test_mixcube_search_originals_with_the_local_importer_is_a_config_error() -> None:
    originals = {"backend": "search", "search": {"backend": "ddgs"}, "download": {"backend": "local"}}
    with pytest.raises(ConfigError) as refused:
        build_config({"originals": originals}, model=BuildMixCubeConfig)
    assert "originals.download.backend" in str(refused.value) and "'http'" in str(refused.value)
    with pytest.raises(ConfigError, match=r"originals\.download\.backend"):
        build_config({"originals": originals}, demo=True, model=BuildMixCubeConfig)
    ok = build_config({"originals": {**originals, "download": {"backend": "http"}}}, model=BuildMixCubeConfig)
    assert ok.originals.download.backend == "http"


@pytest.mark.parametrize("field", ["root", "labels_csv"])
def test_mixcube_local_originals_on_a_network_root_is_a_config_error(
    field: str, host: FakeImageHost, tmp_path: Path
) -> None:
    originals = {"backend": "local", "root": str(tmp_path), "labels_csv": str(tmp_path / "labels.csv")}
    originals[field] = host.url("/corpus/")
    with pytest.raises(ConfigError) as refused:
        build_config({"originals": originals}, model=BuildMixCubeConfig)
    assert f"originals.{field}" in str(refused.value) and "'http'" in str(refused.value)
    assert served(host) == {}


# -- the local searcher reads a local corpus only ----------------------------------------------------------------


@pytest.mark.parametrize("field", ["root", "manifest"])
def test_the_local_searcher_refuses_a_network_root_or_manifest(field: str, host: FakeImageHost) -> None:
    with pytest.raises(ValidationError, match="not a storage protocol"):
        LocalFolderSearchConfig(**{field: host.url("/corpus/manifest.csv")})
    with pytest.raises(ConfigError, match=f"search.local.{field}"):
        build_config({"search": {"backend": "local", field: host.url("/corpus/")}}, model=Build3XCMConfig)
    # A config changed without validation (as the demo's root is set) is refused by the searcher itself.
    unchecked = LocalFolderSearchConfig().model_copy(update={field: host.url("/corpus/manifest.csv")})
    with pytest.raises(ValueError, match="not a storage protocol"):
        LocalFolderSearcher(unchecked)
    assert served(host) == {}


# -- the local importer never fetches from the network -----------------------------------------------------------


def test_the_importer_refuses_network_protocols_as_rows(host: FakeImageHost, ws: Workspace, tmp_path: Path) -> None:
    good = tmp_path / "good.jpg"
    good.write_bytes(CORPUS[0])
    hits = {
        "http": host.url("/img/0/http"),
        "https": host.url("/img/0/https").replace("http://", "https://"),
        "upper": host.url("/img/0/upper").replace("http://", "HTTP://"),
        "ftp": f"ftp://127.0.0.1:{host.port}/img/0/ftp",
        "chained": f"simplecache::{host.url('/img/0/chained')}",
        "blockcache": f"blockcache::{host.url('/img/0/blockcache')}",
        "zip": f"zip://a.jpg::{host.url('/img/0/zip')}",
        "data": "data:image/jpeg;base64,/9j/4AAQ",
        "local": str(good),
        "file": f"file://{good}",
    }
    table = import_hits([{"image_id": k, "url": u} for k, u in hits.items()], ws.blobs, ImageLimits(min_side=32))
    rows = {r["image_id"]: r for r in table.to_pylist()}
    for key in hits.keys() - {"local", "file"}:
        assert (rows[key]["status"], rows[key]["error"]) == ("failed", "blocked_protocol"), (key, rows[key]["detail"])
        assert rows[key]["attempts"] == 0 and rows[key]["sha256"] is None, key
        assert rows[key]["detail"], key
    assert "download.backend: http" in rows["http"]["detail"]
    assert rows["local"]["status"] == rows["file"]["status"] == "ok"
    assert served(host) == {}  # not one request reached the host


def test_a_manifest_of_web_urls_is_fetched_only_by_the_guarded_downloader(
    host: FakeImageHost, ws: Workspace, tmp_path: Path
) -> None:
    """The 3XCM route: a manifest CSV may list web URLs; the local importer refuses them, the downloader guards them."""
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(
        "country,concept,query_lang,rank,path\n"
        f"Japan,train,nav,0,{host.url('/img/0/a.jpg')}\n"
        f"Japan,train,nav,1,{host.url('/img/1/b.jpg')}\n"
    )
    searcher = LocalFolderSearcher(LocalFolderSearchConfig(manifest=str(manifest)))
    query = SearchQuery(
        concept_id=next(c.concept_id for c in default_pack().concepts if c.concept == "train"),
        concept="train",
        country="Japan",
        query="q",
        query_lang="nav",
        language_code="ja",
        region="jp-jp",
    )
    hits = [{"image_id": f"i{rank}", "url": hit.url} for rank, hit in enumerate(searcher.search(query, 10))]
    assert [h["url"] for h in hits] == [host.url("/img/0/a.jpg"), host.url("/img/1/b.jpg")]

    imported = ImportConfig().build()(ws).fetch(hits, ws.blobs).to_pylist()
    assert {r["error"] for r in imported} == {"blocked_protocol"}
    assert served(host) == {}

    # The HTTP downloader's address guard decides: loopback refused by default ...
    guarded = HttpDownloadConfig().build()(ws).fetch(hits, ws.blobs).to_pylist()
    assert {r["error"] for r in guarded} == {"blocked_address"}
    assert served(host) == {}
    # ... and admitted only when the operator allows private addresses.
    allowed = HttpDownloadConfig(allow_private_addresses=True, limits=ImageLimits(min_side=32)).build()
    assert {r["status"] for r in allowed(ws).fetch(hits, ws.blobs).to_pylist()} == {"ok"}
    assert served(host) == {"/img/0/a.jpg": 1, "/img/1/b.jpg": 1}


def test_mixcube_search_originals_never_import_web_urls(host: FakeImageHost, ws: Workspace) -> None:
    """`search_originals` with the local importer (a non-web searcher is allowed to use it): web hits are rows."""

    class WebSearcher:
        name = "web"

        def search(self, query: SearchQuery, max_results: int) -> list[SearchHit]:
            return [SearchHit(url=host.url(f"/img/0/{query.country}-{query.concept}.jpg"))]

    config = SearchOriginalsConfig(
        search={"backend": "local", "root": "/nowhere"}, download={"backend": "local"}, cultures=["Myanmar"]
    )
    fetcher = config.download.build()(ws)
    rows = search_originals(config, WebSearcher(), fetcher, ws.blobs, default_pack().mixcube()).to_pylist()
    assert rows and {(r["status"], r["error"]) for r in rows} == {("failed", "blocked_protocol")}
    assert served(host) == {}


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("/data/corpus/a.jpg", False),
        ("corpus/a.jpg", False),
        ("file:///data/a.jpg", False),
        ("FILE:///data/a.jpg", True),  # fsspec knows no "FILE": refused as a row rather than crashing the stage
        ("memory://corpus/a.jpg", False),
        ("s3://bucket/corpus/a.jpg", False),
        ("gs://bucket/corpus/a.jpg", False),
        ("http://example.com/a.jpg", True),
        ("HTTPS://example.com/a.jpg", True),
        ("ftp://example.com/a.jpg", True),
        ("sftp://example.com/a.jpg", True),
        ("smb://server/share/a.jpg", True),
        ("webdav://example.com/a.jpg", True),
        ("github://org:repo@main/a.jpg", True),
        ("simplecache::s3://bucket/a.jpg", True),
        ("data:image/png;base64,AAAA", True),
    ],
)
def test_storage_protocols(url: str, refused: bool) -> None:
    assert (storage_refusal(url) is not None) is refused
