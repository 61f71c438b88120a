"""The local-folder searcher lists the root and each country folder once per stage, not once per query (issue 31:
at 1,000 concepts a listing per query made the search O(queries x concepts))."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest
from PIL import Image

from collectors.search import LocalFolderSearchConfig
from collectors.search_types import SearchQuery
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


def test_folders_listed_once_per_searcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    concepts = default_pack().concepts[:12]
    for concept in concepts:
        folder = tmp_path / "japan" / concept.concept.replace(" ", "_") / "eng"
        folder.mkdir(parents=True)
        Image.new("RGB", (80, 60), (concept.concept_id % 255, 9, 9)).save(folder / "00_img.jpg")
    fs_class = type(fsspec.filesystem("file"))
    listed: list[str] = []
    real_ls = fs_class.ls

    def counting_ls(self: fsspec.AbstractFileSystem, path: str, detail: bool = True, **kwargs: object) -> list:
        listed.append(str(path).rstrip("/"))
        return real_ls(self, path, detail=detail, **kwargs)

    monkeypatch.setattr(fs_class, "ls", counting_ls)
    searcher = LocalFolderSearchConfig(root=str(tmp_path)).build()
    hits = [searcher.search(_query(c), 10) for c in concepts]
    assert [len(h) for h in hits] == [1] * len(concepts)
    assert listed.count(str(tmp_path)) == 1
    assert listed.count(str(tmp_path / "japan")) == 1
