"""Image search stage: one English and one native-language query per concept x country (3XCM paper §3.2.1).

Every backend implements `Searcher` and returns its hits best first; `search_rows` numbers them from 1 (the
authors' ranks are 1-based) into `rank` and the image id `{country}-{concept_id}-{rank}-{eng|nav}`. Embedded
default: a local folder laid out as `<root>/<country>/<concept>/<eng|nav>/<files>` (files ranked in sorted name
order) or described by a manifest CSV (hits ranked by its `rank` column), standing in for DuckDuckGo.
The paper's engine, DuckDuckGo images through `ddgs`, is the `ddgs` backend (collectors/search_ddgs.py).
"""

from __future__ import annotations

import contextvars
import csv
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Protocol

import fsspec
import pyarrow as pa
from pydantic import Field, field_validator

from collectors.search_ddgs import DdgsSearchConfig
from collectors.search_types import SearchError, SearchHit, SearchQuery, query_tag
from collectors.ssrf import storage_refusal
from data.image_sources import declared_license, utc_timestamp
from data.reference import ENGLISH, ReferencePack
from data.schemas import SEARCH_HITS, STATUS_FAILED, STATUS_OK, blank_row, from_rows
from data.stage import BackendConfig

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff"}


class Searcher(Protocol):
    name: str

    def search(self, query: SearchQuery, max_results: int) -> list[SearchHit]: ...

    def check(self, pack: ReferencePack) -> None:
        """Refuse, before any query, an input that names a country or concept the build's pack lacks."""
        ...


class LocalFolderSearchConfig(BackendConfig[Searcher]):
    #: Its hits are files on storage, which the local importer may read (see `collectors.fetch.web_hits_problem`).
    web_hits: ClassVar[bool] = False
    cpu_bound: ClassVar[bool] = True  # lists folders and builds a row per file

    backend: Literal["local"] = "local"
    root: str | None = Field(
        default=None,
        description="Folder laid out as <country>/<concept>/<eng|nav>/<images>. Defaults to the demo corpus.",
    )
    manifest: str | None = Field(
        default=None,
        description="CSV with country,concept,query_lang,rank,path[,title,source_page,url,license,retrieved_at]; "
        "paths relative to it. `rank` only orders a query's hits: the stage numbers them 1, 2, ... in that order. "
        "The optional provenance columns: `url` (the image's web URL, published instead of the file's path), "
        "`license` (as the source declares it; empty: `unknown`), `retrieved_at` (ISO 8601; no offset: UTC).",
    )
    max_results: int = Field(default=10, ge=1, description="Top-k per query (paper §3.2.1: top 10).")
    skip_identical_native_query: bool = Field(
        default=True,
        description="English-speaking countries get no 'nav' query: it would repeat the 'eng' one.",
    )
    concurrency: int = Field(default=1, ge=1, description="Queries in flight at once (local reads need no more).")

    @field_validator("root", "manifest")
    @classmethod
    def _on_storage(cls, value: str | None) -> str | None:
        # fsspec would list a web "folder" and open every link on it, with none of the downloader's SSRF checks.
        refusal = storage_refusal(value) if value is not None else None
        if refusal:
            raise ValueError(
                f"{refusal}: the local searcher reads a corpus on storage; search the web with backend: ddgs"
            )
        return value

    def build(self) -> LocalFolderSearcher:
        return LocalFolderSearcher(self)

    def missing_input(self) -> tuple[str, ...]:
        """Fields of which one must be set before this search can run: `root` or `manifest`, unless one is."""
        return () if self.root or self.manifest else ("root", "manifest")

    def with_default_root(self, root: str) -> LocalFolderSearchConfig:
        """This search, reading `root` when it names no folder and no manifest (the demo's generated corpus)."""
        if self.root is None and self.manifest is None:
            return self.model_copy(update={"root": root})
        return self

    def url_publisher(self) -> Callable[[str], str]:
        """Local files are published relative to the searched folder, so no machine path leaks into a release."""
        if self.root:
            base = self.root.rstrip("/")
        elif self.manifest is not None:
            base = self.manifest.rsplit("/", 1)[0].rstrip("/")
        else:
            raise ValueError("the local folder search names neither `root` nor `manifest`")
        base_path = fsspec.core.url_to_fs(base)[1].rstrip("/")

        def relative(url: str) -> str:
            path = fsspec.core.url_to_fs(url)[1]
            return path[len(base_path) + 1 :] if path.startswith(base_path + "/") else url

        return relative


SearchConfig = Annotated[LocalFolderSearchConfig | DdgsSearchConfig, Field(discriminator="backend")]


def build_queries(
    concepts: pa.Table,
    translations: pa.Table,
    countries: Sequence[str],
    skip_identical_native: bool,
    pack: ReferencePack,
) -> list[SearchQuery]:
    """The English query "{concept} {country}" and the native one, both words in the country's language; names
    from the reference `pack`."""
    native = {
        (r["concept_id"], r["language_code"]): r["text"]
        for r in translations.select(["concept_id", "language_code", "text"]).to_pylist()
    }
    queries: list[SearchQuery] = []
    for country_name in countries:
        country = pack.country_by_name()[country_name]
        english_name = pack.language_pack(ENGLISH).countries[country.name].name
        for concept_id, concept in zip(
            concepts["concept_id"].to_pylist(), concepts["concept"].to_pylist(), strict=True
        ):
            english = f"{concept} {english_name}"
            common = {
                "concept_id": concept_id,
                "concept": concept,
                "country": country.name,
                "slug": country.slug,
                "country_code": country.iso2,
            }
            # The English query once, then one native query per language of the country, each in that language's
            # search region; a language without the concept's translation leaves that query failed.
            queries.append(
                SearchQuery(query=english, query_lang="eng", language_code="en", region=country.ddg_region, **common)
            )
            for spoken in country.languages:
                code = spoken.code
                tag = query_tag("nav", code, country.language_code)
                own_tag = tag if tag != "nav" else None
                text = native.get((concept_id, code))
                if text is None:
                    # An image without its concept in the country's language can't enter the parallel corpus
                    # (image_metadata.concept_in_native), so its query does not run; it is recorded as failed.
                    reason = f"no {code} translation of concept {concept_id} ({concept})"
                    if code == country.language_code:
                        queries[-1] = queries[-1].model_copy(update={"not_searchable": reason})
                    failed = SearchQuery(
                        query=english, query_lang="nav", language_code=code, region=spoken.ddg_region,
                        not_searchable=reason, tag=own_tag, **common,
                    )  # fmt: skip
                    queries.append(failed)
                    continue
                nav = f"{text} {pack.language_pack(code).countries[country.name].name}"
                if not (skip_identical_native and nav == english):
                    queries.append(SearchQuery(query=nav, query_lang="nav", language_code=code,
                                               region=spoken.ddg_region, tag=own_tag, **common))  # fmt: skip
    return queries


def search_rows(searcher: Searcher, queries: Sequence[SearchQuery], max_results: int, concurrency: int = 1) -> pa.Table:
    """Run queries, `concurrency` at a time; rows keep the order of `queries` whatever order they finish in.

    A failed query becomes one row with its reason and never aborts the stage.
    """
    if concurrency <= 1 or len(queries) <= 1:
        per_query = [_query_rows(searcher, query, max_results) for query in queries]
    else:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="search") as pool:
            # Each call runs in a copy of the caller's context: pool threads do not inherit context variables,
            # and Prefect's run context (which `prefect_slot` reads) is one.
            futures = [
                pool.submit(contextvars.copy_context().run, _query_rows, searcher, query, max_results)
                for query in queries
            ]
            per_query = [future.result() for future in futures]
    return from_rows([row for rows in per_query for row in rows], SEARCH_HITS)


def _query_rows(searcher: Searcher, query: SearchQuery, max_results: int) -> list[dict[str, object]]:
    """SEARCH_HITS rows for one query: its hits, or the failure."""
    base: dict[str, object] = {
        "concept_id": query.concept_id,
        "country": query.country,
        "query": query.query,
        "query_lang": query.query_lang,
        "language_code": query.language_code,
        "searcher": searcher.name,
    }
    if query.not_searchable:
        return [_failure(query, base, "no_translation", query.not_searchable)]
    try:
        hits = searcher.search(query, max_results)[:max_results]
        if not hits:
            raise SearchError("no_results", "the engine returned no images")
    except SearchError as exc:
        return [_failure(query, base, exc.kind, exc.detail)]
    return [
        {
            **base,
            "image_id": query.image_id(rank),
            "rank": rank,
            **hit.model_dump(),
            "status": STATUS_OK,
            "error": None,
            "detail": None,
        }
        # 1-based, as in the authors' image ids (rank 1 = the engine's top hit; data/authors/xcm-bench.csv).
        for rank, hit in enumerate(hits, start=1)
    ]


def _failure(query: SearchQuery, base: dict[str, object], kind: str, detail: str) -> dict[str, object]:
    return blank_row(
        SEARCH_HITS, **base, image_id=query.query_id, status=STATUS_FAILED, error=kind, detail=detail or None
    )


class LocalFolderSearcher:
    """Serves search hits from a folder of images; the same rows the DuckDuckGo backend emits."""

    name = "local"

    def __init__(self, config: LocalFolderSearchConfig) -> None:
        if config.root is None and config.manifest is None:
            raise ValueError("local searcher needs `root` or `manifest`")
        for where in (config.root, config.manifest):
            # Again here: a config changed with model_copy (the demo's root) skipped the field validator.
            refusal = storage_refusal(where) if where is not None else None
            if refusal:
                raise ValueError(f"local searcher: {refusal}")
        self.config = config
        self._lines: dict[tuple[str, str], list[int]] = {}  # (country, concept) as written -> its manifest lines
        self._index = self._read_manifest(config.manifest, self._lines) if config.manifest else None
        # The root's and each country's folders, listed once: every query looks one up, and listing a country of
        # 1,000 concepts per query made the search O(queries x concepts) (found scaling to a million images).
        self._listings: dict[str, dict[str, list[str]]] = {}

    def check(self, pack: ReferencePack) -> None:
        """Every manifest row names a country (name, slug or code) and a concept (name or id) of `pack`: a typo
        would otherwise leave its images unfound, silently."""
        if self._index is None:
            return
        countries = {_key(k) for c in pack.countries for k in (c.name, c.slug, c.iso2)}
        concepts = {_key(k) for c in pack.concepts for k in _concept_keys(c.concept_id, c.concept)}
        for (country, concept), lines in sorted(self._lines.items(), key=lambda item: min(item[1])):
            line = min(lines)
            if country not in countries:
                raise ValueError(
                    f"manifest {self.config.manifest}, line {line}: country {country!r} is not a country of the "
                    f"reference pack {pack.info.name}"
                )
            if concept not in concepts:
                raise ValueError(
                    f"manifest {self.config.manifest}, line {line}: concept {concept!r} is not a concept of the "
                    f"reference pack {pack.info.name}"
                )

    def search(self, query: SearchQuery, max_results: int) -> list[SearchHit]:
        if self._index is not None:
            found = [
                ranked
                for country in {_key(k) for k in _country_keys(query)}
                for concept in {_key(k) for k in _concept_keys(query.concept_id, query.concept)}
                for ranked in self._index.get((country, concept, query.tag or query.query_lang), [])
            ]
            hits = [hit for _, hit in sorted(found, key=lambda ranked: ranked[0])]
        else:
            hits = self._scan(query)
        return hits[:max_results]

    # -- folder layout ----------------------------------------------------------------------------------------

    def _scan(self, query: SearchQuery) -> list[SearchHit]:
        fs, root = fsspec.core.url_to_fs(self.config.root)
        country_dir = _match_dir(fs, root, _country_keys(query), self._listings)
        if country_dir is None:
            raise SearchError("no_results", f"no folder for country {query.country!r} under {self.config.root}")
        concept_dir = _match_dir(fs, country_dir, _concept_keys(query.concept_id, query.concept), self._listings)
        if concept_dir is None:
            raise SearchError("no_results", f"no folder for concept {query.concept!r} under {country_dir}")
        lang_dir = _match_dir(fs, concept_dir, {query.tag or query.query_lang})
        if lang_dir is None:
            raise SearchError("no_results", f"no {query.tag or query.query_lang} folder under {concept_dir}")
        # Every entry with an image suffix, whatever its type, as fsspec's `ls` gave them: a link or an unreadable
        # file is the importer's to classify.
        files = sorted((path, *_stem_suffix(path)) for path, _ in _listing(fs, lang_dir))
        protocol = _protocol(fs)
        return [
            _local_hit(stem, f"{protocol}://{path}" if protocol != "file" else path)
            for path, stem, suffix in files
            if suffix.lower() in IMAGE_SUFFIXES
        ]

    # -- manifest ---------------------------------------------------------------------------------------------

    @staticmethod
    def _read_manifest(
        manifest: str, lines: dict[tuple[str, str], list[int]]
    ) -> dict[tuple[str, str, str], list[tuple[int, SearchHit]]]:
        fs, path = fsspec.core.url_to_fs(manifest)
        base = path.rsplit("/", 1)[0]
        with fs.open(path, "r", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        required = {"country", "concept", "query_lang", "rank", "path"}
        if rows and not required <= set(rows[0]):
            raise ValueError(f"manifest {manifest} lacks columns {sorted(required - set(rows[0]))}")
        grouped: dict[tuple[str, str, str], list[tuple[int, SearchHit]]] = {}
        for line, row in enumerate(rows, start=2):
            try:
                # Kept as written: a query finds its rows by its country's and concept's names, slugs and codes.
                country, concept = _key(row["country"]), _key(row["concept"])
                if not country or not concept:
                    raise ValueError("country and concept must not be empty")
                lang = row["query_lang"].strip()
                if lang not in ("eng", "nav") and not re.fullmatch(r"nav-[a-z]{2,3}(-[a-z0-9]{2,8})*", lang):
                    raise ValueError(f"query_lang must be eng, nav or nav-<language> (a second language), not {lang!r}")
                rank = int(row["rank"])
            except (KeyError, ValueError) as exc:
                raise ValueError(f"manifest {manifest}, line {line}: {exc}") from exc
            target = row["path"] if "://" in row["path"] or row["path"].startswith("/") else f"{base}/{row['path']}"
            try:
                retrieved_at = utc_timestamp(row.get("retrieved_at"))
            except ValueError as exc:
                raise ValueError(f"manifest {manifest}, line {line}: {exc}") from None
            hit = SearchHit(
                url=target,
                title=row.get("title") or Path(row["path"]).stem,
                source_page=(row.get("source_page") or "").strip() or None,
                license=declared_license(row.get("license")),
                retrieved_at=retrieved_at,
                origin_url=(row.get("url") or "").strip() or None,
            )
            grouped.setdefault((country, concept, lang), []).append((rank, hit))
            lines.setdefault((country, concept), []).append(line)
        return grouped


def _key(value: str) -> str:
    """A manifest's country or concept as it is matched: lower case, `_` as a space, one space between words."""
    return " ".join(value.strip().lower().replace("_", " ").split())


def _country_keys(query: SearchQuery) -> set[str]:
    keys = {query.country.lower(), query.country.lower().replace(" ", "_")}
    if query.slug:
        keys |= {query.slug, query.slug.replace(" ", "_")}
    if query.country_code:
        keys.add(query.country_code.lower())
    return keys


def _concept_keys(concept_id: int, concept: str) -> set[str]:
    return {
        concept.lower(),
        concept.lower().replace(" ", "_"),
        concept.lower().replace(" ", "-"),
        str(concept_id),
    }


def _match_dir(
    fs: fsspec.AbstractFileSystem,
    parent: str,
    keys: set[str],
    listings: dict[str, dict[str, list[str]]] | None = None,
) -> str | None:
    """The one folder of `parent` named by one of `keys` (case-insensitive); `listings` keeps the folder listings
    already read, by parent."""
    listing = listings.get(parent) if listings is not None else None
    if listing is None:
        listing = {}
        try:
            entries = _listing(fs, parent)
        except (FileNotFoundError, NotADirectoryError):  # no such folder: no match, as for a missing key
            entries = []
        for name, is_dir in entries:
            if is_dir:
                listing.setdefault(name.rstrip("/").rsplit("/", 1)[-1].lower(), []).append(name)
        if listings is not None:
            listings[parent] = listing
    matches = sorted({name for key in keys for name in listing.get(key, [])})
    if len(matches) > 1:
        raise SearchError("ambiguous_layout", f"several folders match one key: {matches}")
    return matches[0] if matches else None


def _protocol(fs: fsspec.AbstractFileSystem) -> str:
    return fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]


def _listing(fs: fsspec.AbstractFileSystem, folder: str) -> list[tuple[str, bool]]:
    """`folder`'s entries as (path, is a folder), from one listing. A local folder through `os.scandir`: its entries
    know their type from the directory itself, where fsspec's detailed `ls` stats each one."""
    if _protocol(fs) == "file":
        with os.scandir(folder) as entries:
            # Links not followed, as fsspec's LocalFileSystem.ls types them: a linked folder is not a folder.
            return [(entry.path, entry.is_dir(follow_symlinks=False)) for entry in entries]
    return [(entry["name"], entry["type"] == "directory") for entry in fs.ls(folder, detail=True)]


def _stem_suffix(path: str) -> tuple[str, str]:
    """A listed path's name as pathlib's `stem` and `suffix` split it, without a Path per file (most of the search's
    time once no file is opened)."""
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return (name[:dot], name[dot:]) if 0 < dot < len(name) - 1 else (name, "")


def _local_hit(title: str, url: str) -> SearchHit:
    """No width or height, as from an engine that reports none: the file is not opened here (at a million hits that
    cost 5x the listing), and the import decodes it and records its real size."""
    return SearchHit(url=url, title=title, source_page=None)
