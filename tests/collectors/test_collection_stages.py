"""Collection stages: concepts, translations, the local-folder searcher and the importer."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pytest
from PIL import Image

from collectors.concepts import ShippedConceptsConfig, run_concepts
from collectors.image_check import ImageLimits
from collectors.importer import import_hits
from collectors.search import (
    LocalFolderSearchConfig,
    LocalFolderSearcher,
    SearchHit,
    SearchQuery,
    build_queries,
    search_rows,
)
from collectors.translations import (
    MissingTranslationError,
    ShippedTranslationsConfig,
    ShippedTranslator,
    run_translations,
)
from data.reference import default_pack
from data.stage import MissingExtraError, require
from data.workspace import Workspace
from flows.xcm.config import Build3XCMConfig


def jpeg(seed: int, size: tuple[int, int] = (120, 90)) -> bytes:
    buffer = io.BytesIO()
    Image.effect_noise(size, 40 + seed).convert("RGB").save(buffer, format="JPEG")
    return buffer.getvalue()


def concepts_table(names: list[str]) -> pa.Table:
    return run_concepts(ShippedConceptsConfig(include=names), default_pack())


def test_concepts_subset_and_unknown_names() -> None:
    by_name = default_pack().concept_by_name()
    table = run_concepts(
        ShippedConceptsConfig(include=["train", str(by_name["dance"].concept_id), "Bus_Station"]), default_pack()
    )
    expected = sorted(["bus station", "dance", "train"], key=lambda name: by_name[name].concept_id)
    assert table["concept"].to_pylist() == expected  # ordered by id
    assert set(table["source"].to_pylist()) == {"shipped"}
    assert run_concepts(ShippedConceptsConfig(), default_pack()).num_rows == len(default_pack().concepts)
    # The names are checked against the build's pack: by the build config, or with the pack directly.
    with pytest.raises(ValueError, match="unknown concept"):
        ShippedConceptsConfig(include=["spaceship"]).check_include(default_pack())
    with pytest.raises(ValueError, match="unknown concept"):
        Build3XCMConfig(concepts={"backend": "shipped", "include": ["spaceship"]})


def test_translations_cover_every_language_of_the_build() -> None:
    table = run_translations(
        ShippedTranslationsConfig(), default_pack(), concepts_table(["train", "wedding"]), ["en", "th", "ja"]
    ).translations
    assert table.num_rows == 6
    thai = {r["concept_id"]: r for r in table.to_pylist() if r["language_code"] == "th"}
    pack = default_pack().language_pack("th")
    for concept_id, row in thai.items():
        assert row["text"] == pack.concepts[concept_id].text
        assert "{concept}" in row["descriptor_template"]
        assert row["review_status"] == "awaiting_native_review"


def test_shipped_translator_refuses_unknown_concepts() -> None:
    with pytest.raises(MissingTranslationError, match="9999"):
        ShippedTranslator().translate(default_pack(), [9999], "de")


def test_queries_english_and_native() -> None:
    concepts = concepts_table(["train"])
    translations = run_translations(ShippedTranslationsConfig(), default_pack(), concepts, ["en", "ja"]).translations
    queries = build_queries(concepts, translations, ["USA", "Japan"], skip_identical_native=True, pack=default_pack())
    by_key = {(q.country, q.query_lang): q for q in queries}
    assert set(by_key) == {("USA", "eng"), ("Japan", "eng"), ("Japan", "nav")}  # USA's native query == English
    assert by_key[("Japan", "eng")].query == "train Japan"
    ja = default_pack().language_pack("ja")
    train_id = concepts["concept_id"][0].as_py()
    assert by_key[("Japan", "nav")].query == f"{ja.concepts[train_id].text} {ja.countries['Japan'].name}"
    assert by_key[("Japan", "nav")].region == "jp-jp"
    everything = build_queries(
        concepts, translations, ["USA", "Japan"], skip_identical_native=False, pack=default_pack()
    )
    assert len(everything) == 4


def _corpus(root: Path) -> None:
    for rank in range(3):
        target = root / "japan" / "train" / "nav" / f"{rank:02d}_img.jpg"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(jpeg(rank))
    (root / "japan" / "train" / "nav" / "notes.txt").write_text("not an image file name")
    (root / "japan" / "train" / "eng").mkdir(parents=True, exist_ok=True)


def test_local_folder_searcher(tmp_path: Path) -> None:
    _corpus(tmp_path / "corpus")
    concepts = concepts_table(["train", "food"])
    translations = run_translations(ShippedTranslationsConfig(), default_pack(), concepts, ["ja"]).translations
    queries = build_queries(concepts, translations, ["Japan"], skip_identical_native=True, pack=default_pack())
    config = LocalFolderSearchConfig(root=str(tmp_path / "corpus"), max_results=2)
    table = search_rows(config.build(), queries, config.max_results)
    rows = table.to_pylist()
    ok = [r for r in rows if r["status"] == "ok"]
    train_id = concepts["concept_id"].to_pylist()[concepts["concept"].to_pylist().index("train")]
    assert [r["image_id"] for r in ok] == [f"japan-{train_id}-1-nav", f"japan-{train_id}-2-nav"]  # top-k = 2
    assert [r["rank"] for r in ok] == [1, 2]  # 1-based in name order, as the authors' ranks are
    assert ok[0]["title"] == "00_img" and ok[0]["searcher"] == "local"
    # No size: the search does not open its hits (the import records each image's real size).
    assert ok[0]["width"] is None and ok[0]["height"] is None
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 3 and {r["error"] for r in failed} == {"no_results"}  # empty eng folder, no food folder
    assert all(r["rank"] is None and r["url"] is None and r["detail"] for r in failed)
    (tmp_path / "corpus" / "JP").mkdir()  # a second folder for the same country
    rows = search_rows(config.build(), queries, config.max_results).to_pylist()
    assert {r["error"] for r in rows} == {"ambiguous_layout"}


def test_manifest_searcher(tmp_path: Path) -> None:
    (tmp_path / "imgs").mkdir()
    for i in range(2):
        (tmp_path / "imgs" / f"{i}.jpg").write_bytes(jpeg(i))
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(
        "country,concept,query_lang,rank,path,title,source_page\n"
        "JP,train,nav,1,imgs/1.jpg,second,https://example.org/b\n"
        "Japan,train,nav,0,imgs/0.jpg,first,https://example.org/a\n"
    )
    concepts = concepts_table(["train"])
    queries = build_queries(
        concepts,
        run_translations(ShippedTranslationsConfig(), default_pack(), concepts, ["ja"]).translations,
        ["Japan"],
        True,
        default_pack(),
    )
    searcher = LocalFolderSearcher(LocalFolderSearchConfig(manifest=str(manifest)))
    rows = search_rows(searcher, queries, 10).to_pylist()
    nav = [r for r in rows if r["query_lang"] == "nav"]
    assert [(r["rank"], r["title"], r["source_page"]) for r in nav] == [  # the manifest's ranks order; 1 is the top
        (1, "first", "https://example.org/a"),
        (2, "second", "https://example.org/b"),
    ]
    searcher.check(default_pack())  # every row names a country and a concept of the pack
    bad = tmp_path / "bad.csv"
    # A malformed row is refused as the manifest is read; a country or concept the build's pack lacks (a typo) is
    # refused by `check`, which the search stage calls with the build's pack before any query.
    bad.write_text("country,concept,query_lang,rank,path\nJapan,train,nav,0,x.jpg\nJapn,train,nav,1,y.jpg\n")
    with pytest.raises(ValueError, match="line 3: country 'japn' is not a country of the reference pack"):
        LocalFolderSearcher(LocalFolderSearchConfig(manifest=str(bad))).check(default_pack())
    bad.write_text("country,concept,query_lang,rank,path\nJP,trian,nav,0,x.jpg\n")
    with pytest.raises(ValueError, match="line 2: concept 'trian' is not a concept of the reference pack"):
        LocalFolderSearcher(LocalFolderSearchConfig(manifest=str(bad))).check(default_pack())
    bad.write_text("country,concept,query_lang,rank,path\n,train,nav,0,x.jpg\n")
    with pytest.raises(ValueError, match="line 2: country and concept must not be empty"):
        LocalFolderSearcher(LocalFolderSearchConfig(manifest=str(bad)))
    bad.write_text("country,concept,query_lang,rank,path\nJapan,train,nav,0,x.jpg\nJapan,train,jp,1,y.jpg\n")
    with pytest.raises(ValueError, match="line 3: query_lang must be eng, nav or nav-<language>"):
        LocalFolderSearcher(LocalFolderSearchConfig(manifest=str(bad)))


def test_importer_stores_good_images_and_classifies_the_rest(tmp_path: Path) -> None:
    ws = Workspace(str(tmp_path / "ws"), "b")
    good = tmp_path / "good.jpg"
    good.write_bytes(jpeg(1))
    html = tmp_path / "page.jpg"
    html.write_text("<html><body>login</body></html>" * 20)
    hits = [
        {"image_id": "a", "url": str(good)},
        {"image_id": "b", "url": str(html)},
        {"image_id": "c", "url": str(tmp_path / "missing.jpg")},
        {"image_id": "d", "url": f"file://{good}"},
    ]
    rows = import_hits(hits, ws.blobs, ImageLimits(min_side=32)).to_pylist()
    assert [(r["status"], r["error"]) for r in rows] == [
        ("ok", None),
        ("failed", "not_an_image"),
        ("failed", "not_found"),
        ("ok", None),
    ]
    assert rows[0]["sha256"] == rows[3]["sha256"] and ws.blobs.get(rows[0]["sha256"]) == good.read_bytes()
    assert (rows[0]["width"], rows[0]["height"], rows[0]["format"]) == (120, 90, "JPEG")


def test_missing_optional_dependency_names_the_extra() -> None:
    with pytest.raises(MissingExtraError, match=r"culturebench\[gemini\]"):
        require("surely_not_installed_module_xyz", "gemini")


def test_a_concept_without_a_translation_is_recorded_not_searched() -> None:
    concepts = concepts_table(["train", "school"])
    translations = run_translations(ShippedTranslationsConfig(), default_pack(), concepts, ["en", "ja"]).translations
    school = default_pack().concepts[[c.concept for c in default_pack().concepts].index("school")].concept_id
    keep = [not (r["concept_id"] == school and r["language_code"] == "ja") for r in translations.to_pylist()]
    queries = build_queries(concepts, translations.filter(pa.array(keep)), ["Japan", "USA"], True, default_pack())

    class CountingSearcher:
        name = "counting"

        def __init__(self) -> None:
            self.asked: list[str] = []

        def search(self, query: SearchQuery, max_results: int) -> list[SearchHit]:
            self.asked.append(query.query_id)
            return [SearchHit(url=f"https://example.org/{query.query_id}.jpg")]

    searcher = CountingSearcher()
    rows = search_rows(searcher, queries, 10).to_pylist()
    failed = [r for r in rows if r["status"] == "failed"]
    assert {(r["country"], r["concept_id"], r["query_lang"]) for r in failed} == {
        ("Japan", school, "eng"),
        ("Japan", school, "nav"),
    }
    assert {r["error"] for r in failed} == {"no_translation"} and all("ja" in r["detail"] for r in failed)
    assert not any(q.startswith("japan-" + str(school)) for q in searcher.asked)
    assert any(r["country"] == "USA" and r["concept_id"] == school and r["status"] == "ok" for r in rows)
