"""Provenance on every released image row (issue 19): where each image came from, from the search to the release.

- 3XCM on its production search and fetch: the real `ddgs` client (network layer faked, as in test_search_ddgs.py)
  answering with URLs on the loopback image host (tests/support/fake_image_host.py), half of them behind a redirect,
  fetched by the HTTP downloader;
- 3XCM on a local corpus whose manifest declares some images' web URL, page, licence and retrieval time;
- the demo release's card: licences, top source domains and their bar chart;
- MixCuBe: a labels CSV with and without the optional provenance columns, and originals from a search.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageOps
from pydantic import ValidationError

from collectors import search_ddgs
from collectors.mixcube_originals import culture_by_name, demo_scene
from collectors.mixcube_search import DEFAULT_QUERIES
from collectors.search import LocalFolderSearchConfig, LocalFolderSearcher, search_rows
from collectors.search_ddgs import DdgsSearchConfig, DdgsSearcher
from data.image_sources import UNKNOWN_LICENSE, domain, utc_timestamp
from data.publish.sources import DOMAINS_FIGURE
from data.reference import default_pack
from data.schemas import IMAGE_METADATA, MIXCUBE_ROWS, SOURCE_FIELDS, XCM_BENCH_CSV_COLUMNS
from demo.corpus import DemoCorpusConfig, country_folder, generate_demo_corpus
from flows.mixcube.build import build_locally as build_mixcube_locally
from flows.mixcube.config import BuildMixCubeConfig
from flows.xcm.build import build_locally
from flows.xcm.config import Build3XCMConfig
from tests.collectors.test_mixcube_search import astronaut_jpeg, search_originals
from tests.collectors.test_search_ddgs import FAST_RETRY, body, config, fake_engine, make_query, results_for
from tests.support.fake_image_host import FakeImageHost, make_jpeg

COUNTRIES = ["USA", "UK", "Spain", "Japan", "Kenya"]
CONCEPTS = ["train", "food", "school"]
#: The provenance columns of a 3XCM `image_metadata` row (query language: `query_lang` with `language_code`).
XCM_PROVENANCE = ["engine", "query", "region", "query_lang", "language_code", "rank", "source_page", "url",
                  "final_url", "retrieved_at", "http_status", "content_type", "license", "license_filter"]  # fmt: skip
MIXCUBE_PROVENANCE = [f.name for f in SOURCE_FIELDS]


@pytest.fixture(autouse=True)
def fresh_canary() -> None:
    search_ddgs.reset_canary_cache()


def is_utc(value: str | None) -> bool:
    moment = datetime.fromisoformat(value) if value else None
    return moment is not None and moment.utcoffset() == timedelta(0)


def released_rows(folder: Path) -> list[dict]:
    """A release config's rows without the image bytes."""
    files = sorted(folder.glob("*.parquet"))
    names = [n for n in pq.read_schema(files[0]).names if n != "image"]
    return pa.concat_tables([pq.read_table(f, columns=names) for f in files]).to_pylist()


# -- ddgs: the licence filter -------------------------------------------------------------------------------------


def test_the_licence_filter_reaches_ddgs_and_every_hit_records_it_and_its_region() -> None:
    query = make_query("Japan", "train")
    with fake_engine(lambda params: body(results_for(params["q"], 3))) as fake:
        rows = search_rows(DdgsSearcher(config(license_filter="ShareCommercially")), [query], 3).to_pylist()
    # ddgs puts it into DuckDuckGo's filter parameter: f=<time>,<size>,<color>,<type>,<layout>,license:<value>
    assert [c["f"] for c in fake.calls] == [",,,,,license:ShareCommercially"]
    assert [c["l"] for c in fake.calls] == ["jp-jp"]
    assert [(r["rank"], r["license_filter"], r["region"], r["license"]) for r in rows] == [
        (rank, "ShareCommercially", "jp-jp", UNKNOWN_LICENSE) for rank in (1, 2, 3)
    ]

    with fake_engine(lambda params: body(results_for(params["q"], 1))) as fake:
        rows = search_rows(DdgsSearcher(config()), [query], 1).to_pylist()
    assert "f" not in fake.calls[0] and rows[0]["license_filter"] is None  # off by default, as in the paper

    # ddgs' bing image backend ignores the filter: its hits would be recorded as filtered when they were not.
    for engine in ("bing", "auto"):
        with pytest.raises(ValidationError, match="license_filter needs engine: duckduckgo"):
            DdgsSearchConfig(engine=engine, license_filter="Public")
    with pytest.raises(ValidationError):
        DdgsSearchConfig(license_filter="CC-BY")


# -- 3XCM on ddgs and the HTTP downloader ---------------------------------------------------------------------------


class FakeDuckDuckGo:
    """Two hits per query on the loopback host: the first behind a redirect, the second direct."""

    def __init__(self, host: FakeImageHost) -> None:
        self.host, self.calls, self.lock = host, [], threading.Lock()
        self.order: dict[str, int] = {}

    def request(self, method: str, url: str, params: dict[str, Any], **kwargs: Any) -> str:
        with self.lock:
            self.calls.append(dict(params))
            k = self.order.setdefault(params["q"], len(self.order))
        items = [
            {
                "image": self.host.url(f"/redirect/1/{2 * k}/q{k}-a.jpg"),
                "url": f"https://site{k % 3}.example.org/{k}/a",
            },
            {"image": self.host.url(f"/img/{2 * k + 1}/q{k}-b.jpg"), "url": f"https://site{k % 3}.example.org/{k}/b"},
        ]
        return body([{**item, "title": "picture", "thumbnail": "", "width": 320, "height": 240} for item in items])


def ddgs_build_config(tmp_path: Path, search: dict | None = None, release: dict | None = None) -> Build3XCMConfig:
    """A production-shaped 3XCM build: the real `ddgs` searcher (see `faked_ddgs`) and the HTTP downloader on the
    loopback host; `search` and `release` add to those sections."""
    return Build3XCMConfig.model_validate(
        {
            "workspace_root": str(tmp_path / "ws"),
            "countries": COUNTRIES,
            "concepts": {"backend": "shipped", "include": CONCEPTS},
            "search": {
                "backend": "ddgs",
                "requests_per_second": 1000.0,
                "concurrency": 1,
                "prefect_concurrency_limit": None,
                "retry": FAST_RETRY.model_dump(),
                **(search or {}),
            },
            "download": {"backend": "http", "allow_private_addresses": True, "retry": FAST_RETRY.model_dump()},
            "review": {"backend": "label_studio_files", "when_unreviewed": "auto_accept"},
            "release": {"root": str(tmp_path / "rel"), "version": "1.0.0", **(release or {})},
        }
    )


@contextlib.contextmanager
def faked_ddgs(host: FakeImageHost) -> Iterator[FakeDuckDuckGo]:
    """The `ddgs` client's network layer answered by a FakeDuckDuckGo on `host`, for the duration."""
    from unittest import mock

    from ddgs.engines.duckduckgo_images import DuckduckgoImages

    ddg = FakeDuckDuckGo(host)
    with (
        mock.patch.object(DuckduckgoImages, "_get_vqd", return_value="fake-vqd"),
        mock.patch.object(DuckduckgoImages, "request", new=lambda engine, *a, **kw: ddg.request(*a, **kw)),
    ):
        yield ddg


@pytest.mark.slow
def test_every_released_3xcm_image_row_carries_its_provenance(tmp_path: Path) -> None:
    corpus = [make_jpeg(i, size=(320, 240)) for i in range(80)]
    config = ddgs_build_config(tmp_path, search={"license_filter": "ShareCommercially"})
    with FakeImageHost(corpus=corpus) as host, faked_ddgs(host) as ddg:
        summary = build_locally(config)
        again = build_locally(config)
    release = Path(summary.release_path)
    assert again.release_status == "unchanged"  # the card, its figure and the rows rebuild byte for byte

    assert {c["f"] for c in ddg.calls} == {",,,,,license:ShareCommercially"}
    hits = {(c["q"], c["l"]) for c in ddg.calls}
    rows = released_rows(release / "image_metadata")
    assert len(rows) > 30
    for row in rows:
        assert set(XCM_PROVENANCE) <= set(row), sorted(set(XCM_PROVENANCE) - set(row))
        assert row["engine"] == "ddgs:duckduckgo" and (row["query"], row["region"]) in hits
        country = default_pack().country_by_name()[row["country"]]
        assert row["region"] == country.ddg_region and row["language_code"] == country.language_code
        assert row["query_lang"] in ("eng", "nav") and row["rank"] in (1, 2)
        assert row["source_page"].startswith("https://site") and row["url"].startswith(host.url("/"))
        if row["rank"] == 1:  # fetched through a redirect: the final URL is where the bytes came from
            assert "/redirect/1/" in row["url"] and row["final_url"] == row["url"].replace("/redirect/1/", "/img/")
        else:
            assert row["final_url"] == row["url"]
        assert is_utc(row["retrieved_at"]), row["retrieved_at"]
        assert row["http_status"] == 200 and row["content_type"] == "image/jpeg"
        assert row["license"] == UNKNOWN_LICENSE and row["license_filter"] == "ShareCommercially"
    assert {r["rank"] for r in rows} == {1, 2}

    # The WebDataset sidecars carry the never-null columns (the licence, query, url and rank among them); the
    # nullable provenance (final_url, retrieved_at, ...) joins from the table by image_id. The authors' CSV keeps its
    # exact columns.
    with tarfile.open(next((release / "images").glob("*.tar"))) as tar:
        sidecar = json.load(tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith(".json"))))
    never_null = {f.name for f in IMAGE_METADATA if not f.nullable}
    row = next(r for r in rows if r["image_id"] == sidecar["image_id"])
    assert sidecar == {name: row[name] for name in never_null} and {"license", "url", "rank"} <= set(sidecar)
    assert row["final_url"] and row["retrieved_at"]
    manifest = json.loads((release / "manifest.json").read_text())
    assert DOMAINS_FIGURE in manifest["files"]
    with (release / "benchmarks" / "xcm-bench.csv").open(newline="") as handle:
        assert tuple(csv.DictReader(handle).fieldnames or ()) == XCM_BENCH_CSV_COLUMNS
    card = (release / "README.md").read_text()
    assert f"| {UNKNOWN_LICENSE} | {len(rows)} |" in card and f"| 127.0.0.1 | {len(rows)} |" in card


# -- 3XCM on a local corpus with a manifest -----------------------------------------------------------------------


def write_manifest(root: Path) -> Path:
    """A manifest over the demo corpus: every rank-1 file declares its web URL, page, licence and retrieval time; the
    others declare nothing (empty cells)."""
    path = root / "manifest.csv"
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(
            ["country", "concept", "query_lang", "rank", "path", "url", "source_page", "license", "retrieved_at"]
        )
        for name in COUNTRIES:
            country = default_pack().country_by_name()[name]
            for concept in CONCEPTS:
                for lang in ("eng", "nav"):
                    folder = root / country_folder(country) / concept / lang
                    files = sorted(folder.iterdir()) if folder.is_dir() else []
                    for rank, file in enumerate(files, start=1):
                        declared = (
                            [f"https://photos.example.org/{file.name}", f"https://pages.example.org/{file.stem}",
                             "CC BY 4.0", "2024-05-01T12:00:00+02:00"]
                            if rank == 1
                            else ["", "", "", ""]
                        )  # fmt: skip
                        out.writerow([name, concept, lang, rank, file.relative_to(root).as_posix(), *declared])
    return path


@pytest.mark.slow
def test_a_local_manifest_declares_licence_url_page_and_time_else_unknown(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    generate_demo_corpus(
        DemoCorpusConfig(countries=COUNTRIES, concepts=CONCEPTS, images_per_query=2), str(corpus), pack=default_pack()
    )
    manifest = write_manifest(corpus)
    config = Build3XCMConfig.demo(
        workspace_root=str(tmp_path / "ws"),
        countries=COUNTRIES,
        concepts={"include": CONCEPTS},
        demo_corpus=None,
        search={"backend": "local", "manifest": str(manifest)},
        release={"root": str(tmp_path / "rel"), "version": "0.0.1"},
    )
    release = Path(build_locally(config).release_path)
    rows = released_rows(release / "image_metadata")
    declared = [r for r in rows if r["license"] != UNKNOWN_LICENSE]
    assert declared and len(declared) < len(rows)
    for row in rows:
        assert set(XCM_PROVENANCE) <= set(row)
        assert row["engine"] == "local" and row["region"] is None and row["license_filter"] is None
        assert row["final_url"] is None and row["http_status"] is None and row["content_type"] is None
        if row["rank"] == 1:  # as declared; the time in UTC
            assert row["license"] == "CC BY 4.0" and row["retrieved_at"] == "2024-05-01T10:00:00Z"
            assert row["url"].startswith("https://photos.example.org/")
            assert row["source_page"].startswith("https://pages.example.org/")
        else:  # nothing declared: the licence is unknown, the file is published relative to the corpus
            assert row["license"] == UNKNOWN_LICENSE and row["retrieved_at"] is None and row["source_page"] is None
            assert not row["url"].startswith(("/", "http")) and (corpus / row["url"]).is_file()
    card = (release / "README.md").read_text()
    assert f"| CC BY 4.0 | {len(declared)} |" in card and f"| {UNKNOWN_LICENSE} | {len(rows) - len(declared)} |" in card
    assert f"| photos.example.org | {len(declared)} |" in card and "| (local file) |" in card


def test_a_manifest_time_that_is_no_iso_8601_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(make_jpeg(0, size=(64, 64)))
    manifest = tmp_path / "m.csv"
    manifest.write_text("country,concept,query_lang,rank,path,retrieved_at\nJapan,train,eng,1,a.jpg,yesterday\n")
    with pytest.raises(ValueError, match=r"line 2: retrieved_at 'yesterday' is not an ISO 8601"):
        LocalFolderSearcher(LocalFolderSearchConfig(manifest=str(manifest)))
    assert utc_timestamp("2024-05-01 10:00") == "2024-05-01T10:00:00Z"  # no offset: read as UTC
    assert domain("HTTPS://Img.Example.ORG:8443/a.jpg") == "img.example.org" and domain("japan/a.jpg") == "(local file)"


# -- the demo release's card ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_demo_card_summarises_licences_and_domains_with_a_figure(small_demo_config: Build3XCMConfig) -> None:
    release = Path(build_locally(small_demo_config).release_path)
    card = (release / "README.md").read_text()
    rows = released_rows(release / "image_metadata")
    assert "## Sources and licences" in card and "### Licences" in card and "### Top 10 source domains" in card
    assert f"| license | images |\n|---|---|\n| {UNKNOWN_LICENSE} | {len(rows)} |" in card
    assert f"| domain | images |\n|---|---|\n| (local file) | {len(rows)} |" in card
    assert f"]({DOMAINS_FIGURE})" in card
    figure = release / DOMAINS_FIGURE
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert DOMAINS_FIGURE in json.loads((release / "manifest.json").read_text())["files"]


# -- MixCuBe ----------------------------------------------------------------------------------------------------------


def check_quintets(rows: list[dict]) -> dict[str, dict]:
    """Each original's provenance, after checking that its four swaps carry the same and say they are synthesized."""
    by_original: dict[str, dict] = {}
    for start in range(0, len(rows), 5):
        original, *swaps = rows[start : start + 5]
        assert original["ethnicity"] == "original" and original["synthesized"] is False
        assert all(s["synthesized"] is True and s["original_id"] == original["original_id"] for s in swaps)
        source = {name: original[name] for name in MIXCUBE_PROVENANCE}
        assert all({name: s[name] for name in MIXCUBE_PROVENANCE} == source for s in swaps)
        by_original[original["original_id"]] = source
    return by_original


@pytest.mark.parametrize("with_columns", [True, False], ids=["optional-columns", "required-columns-only"])
def test_mixcube_rows_carry_the_labels_csv_provenance(tmp_path: Path, with_columns: bool) -> None:
    root = tmp_path / "originals"
    root.mkdir()
    korea = culture_by_name(default_pack().mixcube(), "South Korea")
    for index in range(2):
        demo_scene(korea, "Food", index, seed=0).save(root / f"{index}.jpg", format="JPEG", quality=92)
    header = "image_file,culture,category,food_label" + (
        ",url,source_page,license,retrieved_at" if with_columns else ""
    )
    lines = [header]
    if with_columns:
        lines += [
            "0.jpg,South Korea,Food,kimchi,https://img.example.org/0.jpg,https://blog.example.org/0,CC BY-SA 4.0,"
            "2023-03-04T05:06:07Z",
            "1.jpg,South Korea,Food,kimchi,,,,",
        ]
    else:
        lines += ["0.jpg,South Korea,Food,kimchi", "1.jpg,South Korea,Food,kimchi"]
    labels = tmp_path / "labels.csv"
    labels.write_text("\n".join(lines) + "\n")
    config = BuildMixCubeConfig.demo(
        workspace_root=str(tmp_path / "ws"),
        release={"root": str(tmp_path / "rel"), "version": "0.0.1"},
        originals={"backend": "local", "root": str(root), "labels_csv": str(labels)},
    )
    release = Path(build_mixcube_locally(config).release_path)
    rows = released_rows(release / "default")
    assert [n for n in MIXCUBE_ROWS.names if n in rows[0]] == MIXCUBE_ROWS.names and len(rows) == 10
    sources = check_quintets(rows)
    nothing = {name: None for name in MIXCUBE_PROVENANCE} | {"license": UNKNOWN_LICENSE}
    if with_columns:
        assert sources["local-00000"] == nothing | {
            "url": "https://img.example.org/0.jpg",
            "source_page": "https://blog.example.org/0",
            "license": "CC BY-SA 4.0",
            "retrieved_at": "2023-03-04T05:06:07Z",
        }
        assert sources["local-00001"] == nothing
    else:
        assert sources == {"local-00000": nothing, "local-00001": nothing}
    card = (release / "README.md").read_text()
    licences = "| CC BY-SA 4.0 | 1 |\n| unknown | 1 |" if with_columns else "| unknown | 2 |"
    assert "| license | originals |" in card and licences in card
    assert ("| img.example.org | 1 |" in card) is with_columns and f"]({DOMAINS_FIGURE})" in card
    assert (release / DOMAINS_FIGURE).read_bytes()[:4] == b"\x89PNG"


def test_a_bad_labels_time_is_a_row_with_its_reason(tmp_path: Path) -> None:
    from collectors.mixcube_originals import LocalOriginalsConfig, import_local

    root = tmp_path / "o"
    root.mkdir()
    demo_scene(culture_by_name(default_pack().mixcube(), "Azerbaijan"), "Clothes", 0, seed=0).save(
        root / "a.jpg", format="JPEG"
    )
    labels = tmp_path / "labels.csv"
    labels.write_text("image_file,culture,category,retrieved_at\na.jpg,Azerbaijan,Clothes,03/04/2023\n")
    rows = import_local(
        LocalOriginalsConfig(root=str(root), labels_csv=str(labels)), lambda data: "sha", default_pack().mixcube()
    ).to_pylist()
    assert rows[0]["status"] == "failed" and rows[0]["error"].startswith("bad_retrieved_at: retrieved_at '03/04/2023'")


@pytest.mark.slow
def test_mixcube_search_originals_and_their_swaps_carry_the_search_and_fetch_provenance(tmp_path: Path) -> None:
    mirrored = io.BytesIO()
    ImageOps.mirror(Image.open(io.BytesIO(astronaut_jpeg()))).save(mirrored, format="JPEG", quality=90)
    with FakeImageHost(corpus=[astronaut_jpeg(), mirrored.getvalue()]) as host:
        urls = [host.url("/redirect/1/0/a.jpg"), host.url("/img/1/b.jpg")]
        seen: list[dict] = []

        def answer(params: dict) -> str:
            seen.append(dict(params))
            pages = [f"https://news.example.org/{i}" for i in range(2)]
            return body(
                [
                    {"title": "t", "image": u, "url": p, "height": 1, "width": 1}
                    for u, p in zip(urls, pages, strict=True)
                ]
            )

        originals = search_originals(per_cell=2, cultures=["Myanmar"], categories=["Food"])
        originals["search"]["license_filter"] = "Public"
        config = BuildMixCubeConfig.demo(
            workspace_root=str(tmp_path / "ws"),
            release={"root": str(tmp_path / "rel"), "version": "0.0.1"},
            originals=originals,
        )
        with fake_engine(answer):
            summary = build_mixcube_locally(config)
    assert [p["f"] for p in seen] == [",,,,,license:Public"]
    rows = released_rows(Path(summary.release_path) / "default")
    sources = check_quintets(rows)
    assert len(sources) == 2
    query = DEFAULT_QUERIES["Food"].format(adjective="Myanmar")
    for rank, source in enumerate(sorted(sources.values(), key=lambda s: s["rank"]), start=1):
        assert is_utc(source.pop("retrieved_at"))
        assert source == {
            "engine": "ddgs:duckduckgo",
            "query": query,
            "query_language": "en",
            "region": "wt-wt",
            "rank": rank,
            "source_page": f"https://news.example.org/{rank - 1}",
            "url": urls[rank - 1],
            "final_url": urls[rank - 1].replace("/redirect/1/", "/img/"),
            "http_status": 200,
            "content_type": "image/jpeg",
            "license": UNKNOWN_LICENSE,
            "license_filter": "Public",
        }
    assert all(is_utc(r["retrieved_at"]) for r in rows)
