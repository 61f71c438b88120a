"""The local-folder searcher lists the root and each country folder once per stage, not once per query (issue 31:
at 1,000 concepts a listing per query made the search O(queries x concepts))."""

from __future__ import annotations

import builtins
import io
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import fsspec
import pytest
from PIL import Image

from collectors.search import LocalFolderSearchConfig
from collectors.search_types import SearchError, SearchQuery
from data import reference
from data.reference import default_pack


def _query(concept: reference.Concept, lang: str = "eng") -> SearchQuery:
    return SearchQuery(
        concept_id=concept.concept_id,
        concept=concept.concept,
        country="Japan",
        query=f"{concept.concept} Japan",
        query_lang=lang,  # type: ignore[arg-type]
        language_code="en",
        region="jp-jp",
    )


def _japan_corpus(root: Path, concepts: Sequence[reference.Concept]) -> None:
    for concept in concepts:
        folder = root / "japan" / concept.concept.replace(" ", "_") / "eng"
        folder.mkdir(parents=True)
        Image.new("RGB", (80, 60), (concept.concept_id % 255, 9, 9)).save(folder / "00_img.jpg")


def test_folders_listed_once_per_searcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    concepts = default_pack().concepts[:12]
    _japan_corpus(tmp_path, concepts)
    listed: list[str] = []
    real_scandir = os.scandir

    def counting_scandir(path: str) -> Iterator[os.DirEntry[str]]:
        listed.append(str(path).rstrip("/"))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting_scandir)
    searcher = LocalFolderSearchConfig(root=str(tmp_path)).build()
    hits = [searcher.search(_query(c), 10) for c in concepts]
    assert [len(h) for h in hits] == [1] * len(concepts)
    assert listed.count(str(tmp_path)) == 1
    assert listed.count(str(tmp_path / "japan")) == 1
    for concept in concepts:  # each query's own folder, once
        assert listed.count(str(tmp_path / "japan" / concept.concept.replace(" ", "_") / "eng")) == 1


def test_search_opens_no_hit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 60: the search lists folders and opens no file in them (opening each hit cost 5x the listing)."""
    concepts = default_pack().concepts[:3]
    _japan_corpus(tmp_path, concepts)
    opened: list[str] = []

    def refusing(real: Callable[..., Any]) -> Callable[..., Any]:
        def open_(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, (str, os.PathLike)) and str(file).startswith(str(tmp_path)):
                opened.append(str(file))
                raise AssertionError(f"the search opened {file}")
            return real(file, *args, **kwargs)

        return open_

    for module, name in ((builtins, "open"), (io, "open"), (os, "open"), (Image, "open")):
        monkeypatch.setattr(module, name, refusing(getattr(module, name)))
    fs_class = type(fsspec.filesystem("file"))
    monkeypatch.setattr(fs_class, "_open", refusing(fs_class._open))
    searcher = LocalFolderSearchConfig(root=str(tmp_path)).build()
    hits = [hit for c in concepts for hit in searcher.search(_query(c), 10)]
    assert len(hits) == len(concepts) and not opened
    assert all(hit.width is None and hit.height is None and hit.title == "00_img" for hit in hits)


def test_links_are_typed_as_fsspec_ls_types_them(tmp_path: Path) -> None:
    """A linked file is a hit (the listing never filtered hits by type); a linked folder is not a folder, as
    fsspec's LocalFileSystem.ls (which does not follow links) reported it."""
    train, food = default_pack().concepts[:2]
    _japan_corpus(tmp_path / "corpus", [train])
    eng = tmp_path / "corpus" / "japan" / train.concept.replace(" ", "_") / "eng"
    (eng / "01_link.jpg").symlink_to(eng / "00_img.jpg")
    (eng / "02_dangling.jpg").symlink_to(tmp_path / "nowhere.jpg")
    elsewhere = tmp_path / "elsewhere" / "eng"
    elsewhere.mkdir(parents=True)
    (elsewhere / "00_img.jpg").write_bytes(b"x")
    (tmp_path / "corpus" / "japan" / food.concept.replace(" ", "_")).symlink_to(elsewhere.parent)
    searcher = LocalFolderSearchConfig(root=str(tmp_path / "corpus")).build()
    assert [hit.url for hit in searcher.search(_query(train), 10)] == [
        str(eng / "00_img.jpg"),
        str(eng / "01_link.jpg"),
        str(eng / "02_dangling.jpg"),
    ]
    with pytest.raises(SearchError, match="no folder for concept"):
        searcher.search(_query(food), 10)


def test_a_layout_on_another_filesystem_is_searched() -> None:
    """Off the local disk (here fsspec's memory filesystem) each folder is one `fs.ls`; hits keep their protocol."""
    train, food = default_pack().concepts[:2]
    fs = fsspec.filesystem("memory")
    root = f"/search-{uuid.uuid4().hex}"
    try:
        eng = f"{root}/Japan/{train.concept.replace(' ', '_')}/ENG"  # folder names matched case-insensitively
        for name in ("01_b.png", "00_a.jpg", "notes.txt"):
            fs.pipe(f"{eng}/{name}", b"not read by the search")
        fs.mkdir(f"{root}/Japan/{food.concept}/eng")
        searcher = LocalFolderSearchConfig(root=f"memory://{root}").build()
        hits = searcher.search(_query(train), 10)
        assert [(hit.url, hit.title, hit.width) for hit in hits] == [
            (f"memory://{eng}/00_a.jpg", "00_a", None),
            (f"memory://{eng}/01_b.png", "01_b", None),
        ]
        assert searcher.search(_query(food), 10) == []  # an empty folder (the stage records no_results)
        fs.mkdir(f"{root}/JAPAN")  # a second folder for the same country
        with pytest.raises(SearchError, match="ambiguous_layout"):
            LocalFolderSearchConfig(root=f"memory://{root}").build().search(_query(train), 10)
    finally:
        fs.rm(root, recursive=True)
