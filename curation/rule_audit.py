"""The audit: checks any 3XCM-format RQ2 benchmark against the rules the file can decide by itself.

It is the file-only counterpart of the validator (`curation/validate.py`), which re-derives every row from our own
image table. The audit needs nothing but the benchmark: the authors' `xcm-bench.csv`, a release's `benchmark/`
Parquet, or its CSV copy. Given an `image_metadata` table too, it also checks the image-level rules (tags and
copies) and that the file agrees with the table.

Every check runs over whole columns (numpy over dictionary codes); Python only formats the violations it found.
The reference data it uses is the language group of each country name; it never uses our concept ids or slugs: a
concept id must name one concept across the file, and an id's country part must be the row's country lower-cased.

Where an image (or index, or concept id) carries two values across the file, the value most occurrences give is
taken as its own (ties: the first in file order, row by row, slot by slot) and each other occurrence is a violation.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from pydantic import BaseModel

from data.concept_names import invalid_name
from data.output_paths import OutputPathError, check_output
from data.publish.format import MANIFEST, ReleaseReadError
from data.publish.reader import read_parquet_files, release_pack
from data.reference import ReferencePack, default_pack
from data.schemas import RQ2_SLOTS, XCM_BENCH_CSV_COLUMNS
from data.text_safety import csv_safe_table
from data.workspace import Storage

#: Default cap on how often one image may be a candidate. Each query has three candidates and a full build has
#: about one query per image, so the mean is about 3; the project's balanced assembler reaches 4 at paper scale
#: (perf/assembly_scale.py) and in the demos, a uniform random choice 11. 5 leaves one of slack.
DEFAULT_MAX_REUSE = 5
#: (slot name, column prefix): the query first, then the RQ2 candidates in the authors' column order.
SLOTS: tuple[tuple[str, str], ...] = (("query", "query_"), *RQ2_SLOTS)
SLOT_NAMES: tuple[str, ...] = tuple(name for name, _ in SLOTS)
QUERY, CORRECT, LANGUAGE_BIASED, IRRELEVANT = range(4)
DISTRACTORS = (LANGUAGE_BIASED, IRRELEVANT)
#: `{country}-{concept_id}-{rank}-{eng|nav}` (RE2, for pyarrow): the authors' scheme, country in lower case.
IMAGE_ID_PATTERN = (
    r"^(?P<country>[^-]+)-(?P<concept_id>\d{1,9})-(?P<rank>\d{1,9})-(?P<lang>eng|nav)(?:-(?P<code>[a-z]{2,3}))?$"
)
#: Country parts that are not the country's name but clearly mean it: the authors' file names 36 USA images
#: `america-...`. They break the id scheme, so they are violations, under their own rule name.
COUNTRY_ALIASES = {"america": "USA"}
INDEX_COLUMNS = tuple(c for c in XCM_BENCH_CSV_COLUMNS if c.endswith("_index"))
#: Optional columns of our release's benchmark Parquet, checked when present.
QUERY_EXTRAS = ("query_concept_id", "query_language", "query_text")
METADATA_COLUMNS = ("index_in_dataset", "image_id", "concept_id", "concept", "country", "tags", "sha256")

RULES: dict[str, str] = {
    "known_country": "every country is one of the reference countries (the language groups need it)",
    "correct_outside_query_group": "the correct candidate is from outside the query's language group",
    "irrelevant_outside_query_group": "the irrelevant candidate is from outside the query's language group",
    "language_biased_query_country": "the language-biased candidate is from the query's country",
    "correct_query_concept": "the correct candidate has the query's concept",
    "language_biased_other_concept": "the language-biased candidate does not have the query's concept",
    "irrelevant_other_concept": "the irrelevant candidate does not have the query's concept",
    "distinct_images": "the query and its three candidates are four different images",
    "one_query_per_image": "no image is the query of two rows (of one query_language, where the file has it)",
    "index_one_image_id": "an index names one image id across the file",
    "image_id_one_index": "an image id has one index across the file",
    "image_one_concept": "an image has one concept across the file",
    "image_one_country": "an image has one country across the file",
    "image_id_scheme": "the image id reads {country}-{concept_id}-{rank}-{eng|nav}",
    "image_id_country": "the id's country part is the image's country, lower-cased",
    "image_id_country_alias": "the id's country part is the country's name, not an alias (america- for USA)",
    "concept_id_one_name": "a concept id (from the image ids) names one concept across the file",
    "max_candidate_reuse": "no image is a candidate more than --max-reuse times",
    "query_concept_id": "query_concept_id is the concept id in the query's image id",
    "query_language": "query_language is the query country's language",
    "query_text_one_per_concept_language": "a concept has one query text per language",
    "metadata_index": "every index is an index_in_dataset of image_metadata",
    "metadata_image_id": "the image id is image_metadata's at that index",
    "metadata_concept": "the concept is image_metadata's at that index",
    "metadata_country": "the country is image_metadata's at that index",
    "language_biased_untagged": "the language-biased candidate is not tagged with the query concept",
    "irrelevant_untagged": "the irrelevant candidate is not tagged with the query concept",
    "language_biased_no_byte_copy": "the language-biased candidate is no byte copy of an image of the query concept",
    "irrelevant_no_byte_copy": "the irrelevant candidate is no byte copy of an image of the query concept",
    "language_biased_no_pixel_copy": "the language-biased candidate is no pixel copy of an image of the query concept",
    "irrelevant_no_pixel_copy": "the irrelevant candidate is no pixel copy of an image of the query concept",
}
_RULE_ORDER = {name: i for i, name in enumerate(RULES)}

#: What `--out` holds: the rule, where, what, then the offending row's own columns (the authors' 16).
VIOLATIONS = pa.schema(
    [
        pa.field("rule", pa.string(), nullable=False),
        pa.field("row", pa.int64(), nullable=False),  # 0-based data row of the file (CSV line number - 2)
        pa.field("slot", pa.string(), nullable=False),  # query | correct | language_biased | irrelevant | row
        pa.field("image_id", pa.string()),  # the image the rule is about, when it is about one
        pa.field("detail", pa.string(), nullable=False),
        *[
            pa.field(c, pa.int64() if c in INDEX_COLUMNS else pa.string(), nullable=False)
            for c in XCM_BENCH_CSV_COLUMNS
        ],
    ]
)


class AuditInputError(ValueError):
    """The input cannot be audited (missing, unreadable, wrong columns): one line naming the file and the problem."""


class RuleResult(BaseModel):
    rule: str
    description: str
    checked: int  # rows, cells or images the rule looked at
    violations: int


class ReuseStats(BaseModel):
    cap: int
    maximum: int
    mean: float  # over the images that are a candidate at least once
    candidate_images: int
    most_reused: list[str]  # the images at the maximum
    distribution: dict[int, int]  # times used as a candidate -> images


class AuditReport(BaseModel):
    source: str
    metadata: str | None
    rows: int
    images: int  # distinct image ids in the file
    rules: list[RuleResult]
    reuse: ReuseStats
    seconds: float

    @property
    def violations(self) -> int:
        return sum(r.violations for r in self.rules)

    @property
    def ok(self) -> bool:
        return self.violations == 0

    def counts(self) -> dict[str, int]:
        return {r.rule: r.violations for r in self.rules}


@dataclass(frozen=True)
class Audit:
    report: AuditReport
    violations: pa.Table  # VIOLATIONS, ordered by row, slot, rule


# -- reading ----------------------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def check_benchmark_table(table: pa.Table, where: str) -> pa.Table:
    """The authors' 16 columns (plus our query extras when present), with the index columns as int64."""
    missing = [c for c in XCM_BENCH_CSV_COLUMNS if c not in table.column_names]
    if missing:
        raise AuditInputError(f"{where}: not a 3XCM benchmark, missing columns {missing}")
    if not table.num_rows:
        raise AuditInputError(f"{where}: the benchmark has no rows")
    names = [*XCM_BENCH_CSV_COLUMNS, *(c for c in QUERY_EXTRAS if c in table.column_names)]
    columns = []
    for name in names:
        column = table[name]
        integer = name in INDEX_COLUMNS or name == "query_concept_id"
        if integer and not pa.types.is_integer(column.type):
            raise AuditInputError(f"{where}: column {name} is {column.type}, expected integers")
        if not integer and not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            raise AuditInputError(f"{where}: column {name} is {column.type}, expected strings")
        column = column.cast(pa.int64() if integer else pa.string())
        empty = pc.is_null(column) if integer else pc.or_kleene(pc.is_null(column), pc.equal(column, ""))
        at = np.flatnonzero(empty.to_numpy(zero_copy_only=False))
        if len(at):
            raise AuditInputError(f"{where}: column {name} has {len(at)} empty value(s), the first in data row {at[0]}")
        if name.endswith("concept"):
            _check_concept_names(column, f"{where}: column {name}")
        columns.append(column)
    return pa.table(columns, names=names)


def _check_concept_names(column: pa.ChunkedArray | pa.Array, where: str) -> None:
    """Every value a concept name (`data/concept_names.py`): a file whose concept cells are formulas, markup or
    control characters is refused, not carried into the CSVs and cards written from it."""
    for value in pc.unique(column).to_pylist():
        why = None if value is None else invalid_name(value)
        if why is not None:
            row = pc.index(column, value).as_py()
            raise AuditInputError(f"{where}: {str(value)[:40]!r} in data row {row}: {why}")


def read_benchmark_file(path: Path) -> pa.Table:
    """A benchmark CSV (the authors' columns) or Parquet file, checked and typed."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            types = {c: pa.int64() if c in INDEX_COLUMNS else pa.string() for c in XCM_BENCH_CSV_COLUMNS}
            table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=types))
        elif suffix == ".parquet":
            table = pq.read_table(path)
        else:
            raise AuditInputError(f"{path}: give a .csv or .parquet benchmark file, or a release folder")
    except (pa.ArrowException, OSError) as exc:
        raise AuditInputError(f"{path}: not a readable 3XCM benchmark ({_one_line(exc)})") from None
    return check_benchmark_table(table, str(path))


def _parquet_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.parquet") if p.is_file())


def _read_parquet_parts(files: list[Path], columns: list[str] | None = None) -> pa.Table:
    try:
        return read_parquet_files(files, columns)
    except ReleaseReadError as exc:
        raise AuditInputError(str(exc)) from None


def read_metadata(path: Path) -> pa.Table:
    """An image_metadata table (a Parquet file or a folder of parts), without the image bytes."""
    if not path.exists():
        raise AuditInputError(f"{path}: no such file or folder")
    files = _parquet_files(path) if path.is_dir() else [path]
    if not files:
        raise AuditInputError(f"{path}: no *.parquet files in this folder")
    return check_metadata_table(_read_parquet_parts(files, [*METADATA_COLUMNS, "pixel_sha256"]), str(path))


#: The image_metadata columns the audit reads, typed.
METADATA = pa.schema(
    [
        pa.field("index_in_dataset", pa.int64()),
        pa.field("image_id", pa.string()),
        pa.field("concept_id", pa.int64()),
        pa.field("concept", pa.string()),
        pa.field("country", pa.string()),
        pa.field("tags", pa.list_(pa.int64())),
        pa.field("sha256", pa.string()),
        pa.field("pixel_sha256", pa.string()),
    ]
)


def check_metadata_table(table: pa.Table, where: str) -> pa.Table:
    """The image_metadata columns the audit needs (METADATA), checked: types, no empty keys, unique indexes."""
    missing = [c for c in METADATA_COLUMNS if c not in table.column_names]
    if missing:
        raise AuditInputError(f"{where}: not an image_metadata table, missing columns {missing}")
    if not table.num_rows:
        raise AuditInputError(f"{where}: image_metadata has no rows")
    if "pixel_sha256" not in table.column_names:  # releases from before pixel hashes were published
        table = table.append_column("pixel_sha256", pa.nulls(table.num_rows, pa.string()))
    expected = {
        "index_in_dataset": pa.types.is_integer,
        "concept_id": pa.types.is_integer,
        "tags": lambda t: (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type),
    }
    for name in [*METADATA_COLUMNS, "pixel_sha256"]:
        check = expected.get(
            name, lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)
        )
        if not check(table[name].type):
            raise AuditInputError(f"{where}: image_metadata column {name} has the unexpected type {table[name].type}")
    table = table.select(METADATA.names).cast(METADATA)
    _check_concept_names(table["concept"].drop_null(), f"{where}: image_metadata column concept")
    for name in ("index_in_dataset", "image_id", "concept_id", "sha256"):
        if table[name].null_count:
            raise AuditInputError(f"{where}: image_metadata column {name} has {table[name].null_count} empty value(s)")
    indexes = table["index_in_dataset"].to_numpy()
    if len(np.unique(indexes)) != len(indexes):
        raise AuditInputError(f"{where}: image_metadata has repeated index_in_dataset values")
    return table


@dataclass(frozen=True)
class AuditInput:
    benchmark: pa.Table
    source: str
    metadata: pa.Table | None
    metadata_source: str | None


def load_input(path: Path, metadata: Path | None = None) -> AuditInput:
    """FILE is a CSV, a Parquet file or a release folder (its benchmark/ Parquet; its image_metadata/ is the
    metadata unless one is given)."""
    if not path.exists():
        raise AuditInputError(f"{path}: no such file or folder")
    if path.is_dir():
        files = _parquet_files(path / "benchmark")
        if not files:
            raise AuditInputError(f"{path}: not a 3XCM release folder (no benchmark/*.parquet)")
        source = str(path / "benchmark")
        benchmark = check_benchmark_table(_read_parquet_parts(files), source)
        if metadata is None and _parquet_files(path / "image_metadata"):
            metadata = path / "image_metadata"
    else:
        source = str(path)
        benchmark = read_benchmark_file(path)
    table = read_metadata(metadata) if metadata is not None else None
    return AuditInput(benchmark, source, table, str(metadata) if metadata is not None else None)


# -- encoding ---------------------------------------------------------------------------------------------------


def _encode(values: pa.Array | pa.ChunkedArray) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.object_]]:
    """Dictionary codes (int64) and the distinct values (an object array) of a string column."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    encoded = pc.dictionary_encode(values)
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)  # -1: null
    return codes, np.array(encoded.dictionary.to_pylist(), dtype=object)


def _slot_columns(table: pa.Table, field: str) -> pa.Array:
    """One field of the four slots, stacked slot after slot (slot s, row r at s * n + r)."""
    return pa.concat_arrays([table[prefix + field].combine_chunks() for _, prefix in SLOTS])


@dataclass(frozen=True)
class _Cells:
    """The file's four slots as (4, n) arrays of codes; slot-major, so cells[s] is one slot's column."""

    n: int
    index: npt.NDArray[np.int64]
    image: npt.NDArray[np.int64]
    image_ids: npt.NDArray[np.object_]
    concept: npt.NDArray[np.int64]
    concepts: npt.NDArray[np.object_]
    country: npt.NDArray[np.int64]
    countries: npt.NDArray[np.object_]

    @classmethod
    def of(cls, table: pa.Table) -> _Cells:
        n = table.num_rows
        index = _slot_columns(table, "index").to_numpy(zero_copy_only=False).astype(np.int64).reshape(4, n)
        image, image_ids = _encode(_slot_columns(table, "image_id"))
        concept, concepts = _encode(_slot_columns(table, "concept"))
        country, countries = _encode(_slot_columns(table, "country"))
        return cls(
            n, index, image.reshape(4, n), image_ids, concept.reshape(4, n), concepts, country.reshape(4, n), countries
        )

    def order(self) -> npt.NDArray[np.int64]:
        """File order of each cell: row by row, slot by slot."""
        return np.arange(self.n, dtype=np.int64)[None, :] * 4 + np.arange(4, dtype=np.int64)[:, None]


def _majority(
    key: npt.NDArray[np.integer], value: npt.NDArray[np.integer], order: npt.NDArray[np.integer]
) -> tuple[npt.NDArray[np.integer], npt.NDArray[np.integer], npt.NDArray[np.integer]]:
    """The value each key holds across the file: the one most of its occurrences give, ties to the earliest.

    Returns, for every occurrence (aligned with `key`), its key's value, how many occurrences give that value and
    the file order of the first that does. Keys and values are non-negative codes."""
    if not key.size:
        return key, key, key
    width = int(value.max()) + 1
    pairs, inverse, counts = np.unique(key * width + value, return_inverse=True, return_counts=True)
    first = np.full(len(pairs), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, inverse, order)
    pair_key, pair_value = pairs // width, pairs % width
    ranked = np.lexsort((first, -counts, pair_key))  # by key, then most items, then earliest
    head = ranked[np.r_[True, pair_key[ranked][1:] != pair_key[ranked][:-1]]]
    where = np.searchsorted(pair_key[head], key)
    return pair_value[head][where], counts[head][where], first[head][where]


def _first_order(codes: npt.NDArray[np.integer], order: npt.NDArray[np.integer], size: int) -> npt.NDArray[np.int64]:
    first = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, codes, order)
    return first


# -- the checks -------------------------------------------------------------------------------------------------


@dataclass
class _Found:
    rule: str
    rows: npt.NDArray[np.integer]
    slots: npt.NDArray[np.integer]
    images: Sequence[str | None]
    details: list[str]


class _Auditor:
    def __init__(self, table: pa.Table, max_reuse: int, pack: ReferencePack) -> None:
        self.table = table
        self.pack = pack
        self.cells = _Cells.of(table)
        self.max_reuse = max_reuse
        self.found: list[_Found] = []
        self.checked: dict[str, int] = {}

    def add(
        self,
        rule: str,
        checked: int,
        rows: npt.NDArray[np.integer],
        slots: npt.NDArray[np.integer] | int,
        images: Sequence[str | None] | None,
        details: list[str],
    ) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        slots = np.broadcast_to(np.asarray(slots, dtype=np.int64), rows.shape)
        self.checked[rule] = self.checked.get(rule, 0) + checked
        self.found.append(_Found(rule, rows, slots, images or [None] * len(rows), details))

    def image(self, slot: int, rows: npt.NDArray[np.integer]) -> list[str]:
        return list(self.cells.image_ids[self.cells.image[slot, rows]])

    # -- per row: groups, concepts, distinct images, one query per image --

    def check_rows(self) -> None:
        c = self.cells
        by_name = self.pack.country_by_name()
        groups = sorted({country.language_group for country in by_name.values()})
        group_of = np.array(
            [groups.index(by_name[name].language_group) if name in by_name else -1 for name in c.countries],
            dtype=np.int64,
        )
        group = group_of[c.country]
        unknown = np.nonzero(group == -1)
        self.add(
            "known_country",
            group.size,
            unknown[1],
            unknown[0],
            list(c.image_ids[c.image[unknown]]),
            [f"{c.countries[k]!r} is not one of {sorted(by_name)}" for k in c.country[unknown]],
        )
        query_group = group[QUERY]
        for slot, rule in ((CORRECT, "correct_outside_query_group"), (IRRELEVANT, "irrelevant_outside_query_group")):
            decided = (group[slot] >= 0) & (query_group >= 0)
            rows = np.nonzero(decided & (group[slot] == query_group))[0]
            details = [
                f"{SLOT_NAMES[slot]} from {c.countries[c.country[slot, r]]}, query from "
                f"{c.countries[c.country[QUERY, r]]}: both in the language group {groups[query_group[r]]!r}"
                for r in rows
            ]
            self.add(rule, int(decided.sum()), rows, slot, self.image(slot, rows), details)
        rows = np.nonzero(c.country[LANGUAGE_BIASED] != c.country[QUERY])[0]
        details = [
            f"language_biased from {c.countries[c.country[LANGUAGE_BIASED, r]]}, "
            f"query from {c.countries[c.country[QUERY, r]]}"
            for r in rows
        ]
        self.add(
            "language_biased_query_country", c.n, rows, LANGUAGE_BIASED, self.image(LANGUAGE_BIASED, rows), details
        )

        for slot, rule, must_equal in (
            (CORRECT, "correct_query_concept", True),
            (LANGUAGE_BIASED, "language_biased_other_concept", False),
            (IRRELEVANT, "irrelevant_other_concept", False),
        ):
            same = c.concept[slot] == c.concept[QUERY]
            rows = np.nonzero(~same if must_equal else same)[0]
            details = [
                f"{SLOT_NAMES[slot]} concept {c.concepts[c.concept[slot, r]]!r}, query concept "
                f"{c.concepts[c.concept[QUERY, r]]!r}"
                for r in rows
            ]
            self.add(rule, c.n, rows, slot, self.image(slot, rows), details)

        pairs = [(a, b) for a in range(4) for b in range(a + 1, 4)]
        equal = np.stack([c.image[a] == c.image[b] for a, b in pairs])  # (6, n)
        rows = np.nonzero(equal.any(axis=0))[0]
        details = [
            "; ".join(
                f"{SLOT_NAMES[a]} = {SLOT_NAMES[b]} ({c.image_ids[c.image[a, r]]})"
                for (a, b), same in zip(pairs, equal[:, r], strict=True)
                if same
            )
            for r in rows
        ]
        self.add("distinct_images", c.n, rows, -1, None, details)

        # Our release's query_language: a country of several languages has a query per (image, language).
        key, size = c.image[QUERY].astype(np.int64), len(c.image_ids)
        if "query_language" in self.table.column_names:
            language, languages = _encode(self.table["query_language"])
            key, size = key * (len(languages) + 1) + language + 1, size * (len(languages) + 1)
        first = _first_order(key, np.arange(c.n), size)[key]
        rows = np.nonzero(first != np.arange(c.n))[0]
        details = [f"also the query of row {first[r]}" for r in rows]
        self.add("one_query_per_image", c.n, rows, QUERY, self.image(QUERY, rows), details)

    # -- across the file: indexes, ids, concepts, countries --

    def _disagreements(
        self,
        rule: str,
        key: npt.NDArray[np.integer],
        value: npt.NDArray[np.integer],
        describe: Callable[[int, int, int], str],
    ) -> npt.NDArray[np.integer]:
        """Cells whose value is not their key's own; returns each cell's own value (as (4, n))."""
        order = self.cells.order()
        own, count, first = (a.reshape(key.shape) for a in _majority(key.ravel(), value.ravel(), order.ravel()))
        slots, rows = np.nonzero(value != own)
        details = [
            describe(s, r, own[s, r]) + f" at {count[s, r]} cell(s), first row {first[s, r] // 4} "
            f"({SLOT_NAMES[first[s, r] % 4]})"
            for s, r in zip(slots, rows, strict=True)
        ]
        images = list(self.cells.image_ids[self.cells.image[slots, rows]])
        self.add(rule, key.size, rows, slots, images, details)
        return own

    def check_consistency(self) -> npt.NDArray[np.int64]:
        """Returns each image's own concept and country codes, and its first cell's order: (3, images)."""
        c = self.cells
        index_values, index_codes = np.unique(c.index, return_inverse=True)
        index_codes = index_codes.reshape(c.index.shape)
        self._disagreements(
            "index_one_image_id",
            index_codes,
            c.image,
            lambda s, r, own: f"index {c.index[s, r]} is {c.image_ids[c.image[s, r]]!r} here, {c.image_ids[own]!r}",
        )
        self._disagreements(
            "image_id_one_index",
            c.image,
            index_codes,
            lambda s, r, own: f"{c.image_ids[c.image[s, r]]!r} has index {c.index[s, r]} here, {index_values[own]}",
        )
        own_concept = self._disagreements(
            "image_one_concept",
            c.image,
            c.concept,
            lambda s, r, own: f"concept {c.concepts[c.concept[s, r]]!r} here, {c.concepts[own]!r}",
        )
        own_country = self._disagreements(
            "image_one_country",
            c.image,
            c.country,
            lambda s, r, own: f"country {c.countries[c.country[s, r]]!r} here, {c.countries[own]!r}",
        )
        images = len(c.image_ids)
        first = _first_order(c.image.ravel(), c.order().ravel(), images)
        concept_of, country_of = np.zeros(images, np.int64), np.zeros(images, np.int64)
        concept_of[c.image.ravel()] = own_concept.ravel()
        country_of[c.image.ravel()] = own_country.ravel()
        return np.stack([concept_of, country_of, first])

    def check_image_ids(self, per_image: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The id scheme, per image (reported at its first cell). Returns each image's concept id (-1: unparsed)."""
        c = self.cells
        concept_of, country_of, first = per_image
        images = len(c.image_ids)
        parsed = pc.extract_regex(pa.array(c.image_ids, pa.string()), pattern=IMAGE_ID_PATTERN)
        matched = parsed.is_valid().to_numpy(zero_copy_only=False)
        id_country = np.array(parsed.field("country").to_pylist(), dtype=object)
        concept_id = np.where(
            matched, pc.cast(pc.if_else(parsed.is_valid(), parsed.field("concept_id"), "0"), pa.int64()).to_numpy(), -1
        )
        rows, slots = first // 4, first % 4

        bad = np.nonzero(~matched)[0]
        details = [
            f"{c.image_ids[i]!r} does not read {{country}}-{{concept_id}}-{{rank}}-{{eng|nav[-code]}}" for i in bad
        ]
        self.add("image_id_scheme", images, rows[bad], slots[bad], list(c.image_ids[bad]), details)

        # Country names are compared lower-cased as the authors write them ("saudi arabia"), not through our slugs.
        lowered = np.array([name.lower() for name in c.countries], dtype=object)[country_of]
        named = c.countries[country_of]
        wrong = matched & (id_country != lowered)
        alias = np.zeros(images, dtype=bool)
        for part, country in COUNTRY_ALIASES.items():
            alias |= wrong & (id_country == part) & (named == country)
        for rule, mask in (("image_id_country", wrong & ~alias), ("image_id_country_alias", alias)):
            found = np.nonzero(mask)[0]
            details = [f"the id says {id_country[i]!r}, the image's country is {named[i]!r}" for i in found]
            self.add(rule, int(matched.sum()), rows[found], slots[found], list(c.image_ids[found]), details)

        # One name per concept id, counted over images (each image's own concept), not over cells.
        parsed_images = np.nonzero(matched)[0]
        own, count, first_image = _majority(concept_id[parsed_images], concept_of[parsed_images], first[parsed_images])
        wrong = np.nonzero(concept_of[parsed_images] != own)[0]
        found = parsed_images[wrong]
        details = [
            f"concept id {concept_id[i]} is {c.concepts[concept_of[i]]!r} here, {c.concepts[o]!r} for {k} image(s), "
            f"first at row {f // 4} ({SLOT_NAMES[f % 4]})"
            for i, o, k, f in zip(found, own[wrong], count[wrong], first_image[wrong], strict=True)
        ]
        self.add(
            "concept_id_one_name", len(parsed_images), rows[found], slots[found], list(c.image_ids[found]), details
        )
        return concept_id

    # -- reuse --

    def check_reuse(self) -> ReuseStats:
        c = self.cells
        codes = c.image[1:].T.ravel()  # candidate cells in file order: row by row, slot by slot
        order = np.arange(len(codes), dtype=np.int64)
        uses = np.bincount(codes, minlength=len(c.image_ids))
        used = uses[uses > 0]
        by_image = np.lexsort((order, codes))
        sorted_codes = codes[by_image]
        starts = np.searchsorted(sorted_codes, sorted_codes, side="left")
        nth = np.arange(len(codes)) - starts  # 0-based use number of each candidate cell, per image
        over = np.sort(by_image[nth == self.max_reuse])  # the cell of each image's first use over the cap
        rows, slots = over // 3, over % 3 + 1
        details = [
            f"a candidate {uses[codes[o]]} times (cap {self.max_reuse}); this is use {self.max_reuse + 1}" for o in over
        ]
        self.add("max_candidate_reuse", len(used), rows, slots, list(c.image_ids[codes[over]]), details)
        maximum = int(used.max(initial=0))
        values, counts = np.unique(used, return_counts=True)
        return ReuseStats(
            cap=self.max_reuse,
            maximum=maximum,
            mean=round(float(used.mean()), 4) if len(used) else 0.0,
            candidate_images=len(used),
            most_reused=sorted(c.image_ids[np.nonzero(uses == maximum)[0]].tolist()) if maximum else [],
            distribution={int(v): int(k) for v, k in zip(values, counts, strict=True)},
        )

    # -- our release's extra query columns --

    def check_query_extras(self, concept_id: npt.NDArray[np.int64]) -> None:
        c, table = self.cells, self.table
        all_rows = np.arange(c.n)
        if "query_concept_id" in table.column_names:
            given = table["query_concept_id"].to_numpy()
            from_id = concept_id[c.image[QUERY]]
            decided = from_id >= 0
            rows = np.nonzero(decided & (given != from_id))[0]
            details = [f"query_concept_id {given[r]}, the query image id says {from_id[r]}" for r in rows]
            self.add("query_concept_id", int(decided.sum()), rows, QUERY, self.image(QUERY, rows), details)
        if "query_language" in table.column_names:
            by_name = self.pack.country_by_name()
            # A country of several languages has a query per language: any of them is the query's.
            spoken = [set(by_name[n].language_codes) if n in by_name else None for n in c.countries]
            want = [spoken[i] for i in c.country[QUERY]]
            given = table["query_language"].to_pylist()
            decided = np.array([w is not None for w in want], dtype=bool)
            rows = np.array([r for r, w in enumerate(want) if w is not None and given[r] not in w], dtype=np.int64)
            details = [
                f"query_language {given[r]!r}, {c.countries[c.country[QUERY, r]]} speaks "
                f"{'/'.join(sorted(want[r] or ()))!r}"
                for r in rows
            ]
            self.add("query_language", int(decided.sum()), rows, QUERY, self.image(QUERY, rows), details)
        if {"query_language", "query_text"} <= set(table.column_names):
            language, languages = _encode(table["query_language"])
            text, texts = _encode(table["query_text"])
            key = c.concept[QUERY] * len(languages) + language
            own, count, first = _majority(key, text, all_rows)
            rows = np.nonzero(text != own)[0]
            details = [
                f"{c.concepts[c.concept[QUERY, r]]!r} in {languages[language[r]]!r} is {texts[text[r]]!r} here, "
                f"{texts[own[r]]!r} in {count[r]} row(s), first row {first[r]}"
                for r in rows
            ]
            self.add("query_text_one_per_concept_language", c.n, rows, QUERY, self.image(QUERY, rows), details)

    # -- against image_metadata --

    def check_metadata(self, meta: pa.Table) -> None:
        c = self.cells
        meta_index = meta["index_in_dataset"].to_numpy()
        by_index = np.argsort(meta_index)
        pos = np.clip(np.searchsorted(meta_index[by_index], c.index), 0, len(meta_index) - 1)  # never empty
        known = meta_index[by_index][pos] == c.index
        mrow = np.where(known, by_index[pos], -1)  # (4, n): the image_metadata row of each cell, -1: none

        slots, rows = np.nonzero(~known)
        details = [
            f"index {c.index[s, r]} is not an index_in_dataset of image_metadata"
            for s, r in zip(slots, rows, strict=True)
        ]
        self.add("metadata_index", c.index.size, rows, slots, list(c.image_ids[c.image[slots, rows]]), details)

        for field, values, dictionary in (
            ("image_id", c.image, c.image_ids),
            ("concept", c.concept, c.concepts),
            ("country", c.country, c.countries),
        ):
            theirs = np.array(meta[field].to_pylist(), dtype=object)
            ours = dictionary[values]
            wrong = known & (theirs[np.maximum(mrow, 0)] != ours)
            slots, rows = np.nonzero(wrong)
            details = [
                f"{field} {ours[s, r]!r}, image_metadata[{c.index[s, r]}] has {theirs[mrow[s, r]]!r}"
                for s, r in zip(slots, rows, strict=True)
            ]
            self.add(
                f"metadata_{field}", int(known.sum()), rows, slots, list(c.image_ids[c.image[slots, rows]]), details
            )

        # The query concept is the concept_id of the query's own image_metadata row.
        concept_ids = meta["concept_id"].to_numpy()
        concept_values, concept_code = np.unique(concept_ids, return_inverse=True)
        query_concept = np.where(known[QUERY], concept_code[np.maximum(mrow[QUERY], 0)], -1)
        n_concepts = len(concept_values)

        tags = meta["tags"].combine_chunks()
        tag_rows = pc.list_parent_indices(tags).to_numpy()
        tag_values = pc.list_flatten(tags).to_numpy()
        # A tag that names no image's concept cannot be a query concept: drop it before coding.
        tag_pos = np.clip(np.searchsorted(concept_values, tag_values), 0, n_concepts - 1)
        tag_known = concept_values[tag_pos] == tag_values
        tag_keys = np.unique(tag_rows[tag_known] * n_concepts + tag_pos[tag_known])

        def copies(column: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp], npt.NDArray[np.int64]]:
            """Sorted (hash code, concept code) keys of the images that have a hash, their rows, and each row's code."""
            code, _ = _encode(meta[column])
            has = code >= 0
            keys = code * n_concepts + concept_code
            sort = np.argsort(keys, kind="stable")
            return keys[sort][has[sort]], sort[has[sort]], code

        byte_keys, byte_rows, byte_code = copies("sha256")
        pixel_keys, pixel_rows, pixel_code = copies("pixel_sha256")
        image_ids = np.array(meta["image_id"].to_pylist(), dtype=object)
        for slot in DISTRACTORS:
            name = SLOT_NAMES[slot]
            m = np.maximum(mrow[slot], 0)
            # A distractor of the query concept itself is the concept rule's; here: one that shows it otherwise.
            decided = known[slot] & (query_concept >= 0) & (concept_code[m] != query_concept)
            key = m * n_concepts + query_concept
            rows = np.nonzero(decided & np.isin(key, tag_keys))[0]
            details = [
                f"{name} {image_ids[m[r]]!r} is tagged {concept_values[query_concept[r]]}, the query concept"
                for r in rows
            ]
            self.add(f"{name}_untagged", int(decided.sum()), rows, slot, list(image_ids[m[rows]]), details)
            for kind, keys, key_rows, code in (
                ("byte", byte_keys, byte_rows, byte_code),
                ("pixel", pixel_keys, pixel_rows, pixel_code),
            ):
                has = decided & (code[m] >= 0)
                wanted = code[m] * n_concepts + query_concept
                at = np.clip(np.searchsorted(keys, wanted), 0, max(len(keys) - 1, 0))
                hit = has & (keys[at] == wanted) if len(keys) else np.zeros(c.n, bool)  # no pixel hash at all
                rows = np.nonzero(hit)[0]
                details = [
                    f"{name} {image_ids[m[r]]!r} has the {kind}s of {image_ids[key_rows[at[r]]]!r}, an image of "
                    f"concept {concept_values[query_concept[r]]}"
                    for r in rows
                ]
                self.add(f"{name}_no_{kind}_copy", int(has.sum()), rows, slot, list(image_ids[m[rows]]), details)

    # -- the result --

    def violations(self) -> pa.Table:
        found = [f for f in self.found if len(f.rows)]
        if not found:
            return VIOLATIONS.empty_table()
        rows = np.concatenate([f.rows for f in found])
        slots = np.concatenate([f.slots for f in found])
        rules = np.concatenate([np.full(len(f.rows), _RULE_ORDER[f.rule]) for f in found])
        order = np.lexsort((rules, slots, rows))
        rule_names = np.array(list(RULES), dtype=object)
        slot_names = np.array([*SLOT_NAMES, "row"], dtype=object)  # -1 (a whole row) reads "row"
        images = np.array([i for f in found for i in f.images], dtype=object)
        details = np.array([d for f in found for d in f.details], dtype=object)
        head = pa.table(
            {
                "rule": pa.array(rule_names[rules[order]].tolist(), pa.string()),
                "row": pa.array(rows[order], pa.int64()),
                "slot": pa.array(slot_names[slots[order]].tolist(), pa.string()),
                "image_id": pa.array(images[order].tolist(), pa.string()),
                "detail": pa.array(details[order].tolist(), pa.string()),
            }
        )
        body = self.table.select(list(XCM_BENCH_CSV_COLUMNS)).take(pa.array(rows[order]))
        return pa.table([*head.columns, *body.columns], schema=VIOLATIONS)


def audit_benchmark(
    benchmark: pa.Table,
    metadata: pa.Table | None = None,
    max_reuse: int = DEFAULT_MAX_REUSE,
    source: str = "<table>",
    metadata_source: str | None = None,
    *,
    pack: ReferencePack,
) -> Audit:
    """Audit an RQ2 benchmark table (the authors' 16 columns, optionally our query columns) and, when given, check it
    against an image_metadata table; `pack`: the reference pack naming its countries' language groups and languages.
    Tables that cannot be audited raise `AuditInputError`."""
    if max_reuse < 1:
        raise ValueError(f"max_reuse must be at least 1, not {max_reuse}")
    started = time.perf_counter()
    benchmark = check_benchmark_table(benchmark, source)  # idempotent: cheap casts when already checked
    if metadata is not None:
        metadata = check_metadata_table(metadata, metadata_source or "<image_metadata>")
    auditor = _Auditor(benchmark, max_reuse, pack)
    auditor.check_rows()
    per_image = auditor.check_consistency()
    concept_id = auditor.check_image_ids(per_image)
    auditor.check_query_extras(concept_id)
    if metadata is not None:
        auditor.check_metadata(metadata)
    reuse = auditor.check_reuse()
    counts: dict[str, int] = {}
    for f in auditor.found:
        counts[f.rule] = counts.get(f.rule, 0) + len(f.rows)
    violations = auditor.violations()
    report = AuditReport(
        source=source,
        metadata=metadata_source,
        rows=benchmark.num_rows,
        images=len(auditor.cells.image_ids),
        rules=[
            RuleResult(rule=rule, description=RULES[rule], checked=auditor.checked[rule], violations=counts[rule])
            for rule in RULES
            if rule in auditor.checked
        ],
        reuse=reuse,
        seconds=round(time.perf_counter() - started, 3),
    )
    return Audit(report, violations)


def pack_of(path: Path, metadata: Path | None) -> ReferencePack:
    """The reference pack of the benchmark at `path`: the release's own (the folder, or the release a CSV or
    `--metadata` lies in), else the default pack (the authors' file was built for the shipped countries)."""
    for folder in (path if path.is_dir() else path.parent.parent, metadata.parent if metadata else None):
        if folder is not None and (folder / MANIFEST).is_file():
            return release_pack(folder)
    return default_pack()


def audit_path(path: Path, metadata: Path | None = None, max_reuse: int = DEFAULT_MAX_REUSE) -> Audit:
    """Read FILE (and the metadata) and audit it against its reference pack; bad input raises `AuditInputError`."""
    inputs = load_input(path, metadata)
    return audit_benchmark(
        inputs.benchmark,
        inputs.metadata,
        max_reuse,
        inputs.source,
        inputs.metadata_source,
        pack=pack_of(path, metadata),
    )


def check_out_path(path: Path, inputs: Iterable[Path] = ()) -> None:
    """A violations file name ending in .csv or .parquet that is none of the `inputs`, lies in none of them and in
    no release folder."""
    if path.suffix.lower() not in (".csv", ".parquet"):
        raise AuditInputError(f"{path}: --out must end in .csv or .parquet")
    try:
        check_output(path, inputs)
    except OutputPathError as exc:
        raise AuditInputError(str(exc)) from None


def write_violations(violations: pa.Table, path: Path) -> None:
    """CSV or Parquet by the extension, with the VIOLATIONS schema (an empty file when there are none), written
    atomically. CSV cells a spreadsheet would run as formulas start with `'` (`data/text_safety.py`)."""
    check_out_path(path)
    table = violations.cast(VIOLATIONS)
    buffer = io.BytesIO()
    if path.suffix.lower() == ".csv":
        pacsv.write_csv(csv_safe_table(table), buffer)
    else:
        pq.write_table(table, buffer)
    folder = path.resolve().parent
    Storage(str(folder)).write_bytes(str(folder / path.name), buffer.getvalue())


def read_violations(path: Path) -> pa.Table:
    """Read back what `write_violations` wrote, with its schema."""
    if path.suffix.lower() == ".csv":
        types = {f.name: f.type for f in VIOLATIONS}
        options = pacsv.ConvertOptions(column_types=types, strings_can_be_null=False)
        table = pacsv.read_csv(path, convert_options=options)
        # CSV has no null; an empty image_id cell is "no image".
        image = pc.if_else(pc.equal(table["image_id"], ""), pa.scalar(None, pa.string()), table["image_id"])
        table = table.set_column(table.schema.get_field_index("image_id"), "image_id", image)
        return table.cast(VIOLATIONS)
    return pq.read_table(path, schema=VIOLATIONS)
