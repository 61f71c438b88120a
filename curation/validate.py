"""The validator: checks every benchmark row against the candidate rules and names each violation.

It re-derives everything from the image table, so it runs the same on a fresh build and on a published release.
Rules checked, per row:
  * the query and every candidate point at real rows, and their id, concept and country columns agree, and the
    row's `query_concept_id` is the concept of its query image (so the query text is tied to the query image);
  * each candidate is in its slot's eligible pool (`curation.rules`), and the candidates of a row are distinct;
  * the query text is the concept (RQ2) or descriptor form (RQ3) in the query country's language;
  * balance: replaying the rows in order, each candidate was a least-used member of its pool when chosen (and
    each RQ3 descriptor country a least-used eligible country), and no image exceeds `max_reuse` when set.
And per task, given the `unassembled` table: every image is a query, or is listed there with its reason.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from curation.assemble import QueryTexts
from curation.rules import (
    RQ2_RULES,
    RQ3_RULES,
    Catalog,
    DescriptorBalance,
    PoolCache,
    Query,
    Rule,
    eligible_descriptor_countries,
)
from data import reference
from data.schemas import BENCHMARK, BENCHMARK_CD, CATALOG, RQ2_SLOTS, RQ3_SLOTS

IMAGE_ID = re.compile(r"^(?P<slug>[a-z_ ]+)-(?P<concept>\d+)-(?P<rank>\d+)-(?P<lang>eng|nav)$")


class Violation(BaseModel):
    table: str
    row: int | None
    rule: str
    detail: str


class ValidationReport(BaseModel):
    violations: list[Violation]
    rows_checked: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self, limit: int = 20) -> str:
        if self.ok:
            return f"valid: {self.rows_checked}"
        lines = [f"{len(self.violations)} violation(s):"]
        lines += [f"  [{v.table} row {v.row}] {v.rule}: {v.detail}" for v in self.violations[:limit]]
        if len(self.violations) > limit:
            lines.append(f"  ... and {len(self.violations) - limit} more")
        return "\n".join(lines)


class _Checker:
    def __init__(self, images: pa.Table, texts: QueryTexts | None, max_reuse: int | None) -> None:
        self.catalog = Catalog.from_table(images)
        self.images = images
        self.texts = texts
        self.max_reuse = max_reuse
        self.violations: list[Violation] = []
        self.queried: dict[str, set[int]] = {}  # task -> image rows used as a query

    def add(self, table: str, row: int | None, rule: str, detail: str) -> None:
        self.violations.append(Violation(table=table, row=row, rule=rule, detail=detail))

    def describe(self, index: int) -> str:
        cat = self.catalog
        group = reference.country_by_name()[cat.country_names[int(cat.country[index])]].language_group
        return (
            f"{cat.image_id[index]} (concept={cat.concept_name[index]}, "
            f"country={cat.country_names[int(cat.country[index])]}, group={group}, tags={sorted(cat.tags[index])})"
        )

    # -- image table ------------------------------------------------------------------------------------------

    def check_images(self) -> None:
        if self.images.schema.names[: len(CATALOG.names)] != CATALOG.names:
            self.add("image_metadata", None, "schema", f"columns {self.images.schema.names} != {CATALOG.names}")
            return
        seen: set[str] = set()
        for row in self.images.select(["image_id", "concept_id", "country", "rank", "query_lang", "tags"]).to_pylist():
            index = len(seen)
            match = IMAGE_ID.match(row["image_id"])
            if row["image_id"] in seen:
                self.add("image_metadata", index, "unique_image_id", f"{row['image_id']} appears twice")
            seen.add(row["image_id"])
            expected = (
                reference.country_by_name()[row["country"]].slug,
                row["concept_id"],
                row["rank"],
                row["query_lang"],
            )
            if not match or (match["slug"], int(match["concept"]), int(match["rank"]), match["lang"]) != expected:
                self.add(
                    "image_metadata",
                    index,
                    "image_id_scheme",
                    f"{row['image_id']} does not encode {expected}",
                )
            if row["concept_id"] not in row["tags"]:
                self.add(
                    "image_metadata",
                    index,
                    "own_concept_tagged",
                    f"tags {row['tags']} lack {row['concept_id']}",
                )

    # -- benchmark rows ---------------------------------------------------------------------------------------

    def check_reference(self, table: str, r: int, prefix: str, row: dict) -> int | None:
        """The index column is in range and the id, concept and country columns agree with the image table."""
        index = row[f"{prefix}index"]
        if not 0 <= index < len(self.catalog):
            self.add(table, r, f"{prefix}index_range", f"{index} is not a row of image_metadata")
            return None
        expected = {
            "image_id": self.catalog.image_id[index],
            "concept": self.catalog.concept_name[index],
            "country": self.catalog.country_names[int(self.catalog.country[index])],
        }
        for field, value in expected.items():
            key = prefix + field if prefix != "query_" or field != "image_id" else "query_image_id"
            if row[key] != value:
                self.add(table, r, f"{key}_matches_index", f"{row[key]!r} != image_metadata[{index}] {value!r}")
        return index

    def check_rows(
        self, table_name: str, table: pa.Table, rules: dict[str, Rule], prefixes: dict[str, str], task: str
    ) -> None:
        cache = PoolCache(self.catalog, rules)
        usage = np.zeros(len(self.catalog), dtype=np.int64)
        balance = DescriptorBalance(len(self.catalog.country_names))
        query_seen: set[int] = set()
        for r, row in enumerate(table.to_pylist()):
            q_index = self.check_reference(table_name, r, "query_", row)
            if q_index is None:
                continue
            if q_index in query_seen:
                self.add(table_name, r, "one_query_per_image", f"query_index {q_index} is used by an earlier row")
            query_seen.add(q_index)
            if row["query_concept_id"] != int(self.catalog.concept[q_index]):
                self.add(
                    table_name,
                    r,
                    f"{task}.query_concept_id",
                    f"query_concept_id {row['query_concept_id']} is not the concept of the query image "
                    f"{self.describe(q_index)}",
                )
            query = self.catalog.query_for(q_index)
            if task == "rq3":
                query = self.check_descriptor(table_name, r, row, cache, q_index, balance)
                if query is None:
                    continue
            self.check_query_text(table_name, r, row, task)
            chosen: list[int] = []
            for slot, prefix in prefixes.items():
                index = self.check_reference(table_name, r, prefix, row)
                if index is None:
                    continue
                pool = cache.pool(slot, query)
                if not cache.allows(slot, query, index):
                    self.add(
                        table_name,
                        r,
                        f"{task}.{slot}",
                        f"{self.describe(index)} breaks the rule for query "
                        f"{self.describe(q_index)}" + (f", Y={row['descriptor_country']}" if task == "rq3" else ""),
                    )
                elif len(pool) and usage[index] > usage[pool].min():
                    self.add(
                        table_name,
                        r,
                        f"{task}.reuse_balance",
                        f"{slot}: {self.catalog.image_id[index]} was "
                        f"used {usage[index]}x while a pool member was used {usage[pool].min()}x",
                    )
                usage[index] += 1
                chosen.append(index)
            if len(set(chosen)) != len(chosen):
                self.add(table_name, r, f"{task}.distinct_candidates", f"candidates repeat: {chosen}")
        self.queried[task] = query_seen
        if self.max_reuse is not None and len(usage) and usage.max() > self.max_reuse:
            worst = int(np.argmax(usage))
            self.add(
                table_name,
                None,
                f"{task}.max_reuse",
                f"{self.catalog.image_id[worst]} is used {usage.max()}x > max_candidate_reuse {self.max_reuse}",
            )

    def check_complete(self, task: str, table_name: str, unassembled: pa.Table) -> None:
        """Every image is a query of the task, or is in `unassembled` with the reason it could not be one."""
        rows = unassembled.filter(pc.equal(unassembled["task"], task)).to_pylist()
        explained: set[int] = set()
        for row in rows:
            index = row["query_index"]
            if not 0 <= index < len(self.catalog) or self.catalog.image_id[index] != row["query_image_id"]:
                self.add("unassembled", None, f"{task}.unassembled_reference", f"{row} is not a row of image_metadata")
                continue
            if not row["reason"]:
                self.add("unassembled", None, f"{task}.unassembled_reason", f"{row['query_image_id']} has no reason")
            if index in self.queried.get(task, set()):
                self.add("unassembled", None, f"{task}.unassembled_but_queried", f"{row['query_image_id']}")
            explained.add(index)
        missing = set(range(len(self.catalog))) - self.queried.get(task, set()) - explained
        for index in sorted(missing)[:50]:
            self.add(
                table_name,
                None,
                f"{task}.complete",
                f"{self.catalog.image_id[index]} is neither a query nor in unassembled with a reason",
            )
        if len(missing) > 50:
            self.add(table_name, None, f"{task}.complete", f"... and {len(missing) - 50} more images unaccounted for")

    def check_descriptor(
        self, table: str, r: int, row: dict, cache: PoolCache, q_index: int, balance: DescriptorBalance
    ) -> Query | None:
        names = self.catalog.country_names
        base = self.catalog.query_for(q_index)
        if row["descriptor_country"] not in names:
            self.add(
                table,
                r,
                "rq3.descriptor_country",
                f"{row['descriptor_country']!r} has no images in this build",
            )
            return None
        y = names.index(row["descriptor_country"])
        eligible = eligible_descriptor_countries(cache, base)
        if y not in eligible:
            self.add(
                table,
                r,
                "rq3.descriptor_country",
                f"{names[y]} is in the query's language group or lacks a "
                f"candidate for some slot (eligible: {[names[e] for e in eligible]})",
            )
        elif not balance.is_least_used(base.concept, y, np.array(eligible)):
            self.add(
                table,
                r,
                "rq3.descriptor_balance",
                f"{names[y]} is not a least-used descriptor country for concept {base.concept} among "
                f"{[names[e] for e in eligible]}",
            )
        balance.record(base.concept, y)
        return self.catalog.query_for(q_index, descriptor_country=y)

    def check_query_text(self, table: str, r: int, row: dict, task: str) -> None:
        if self.texts is None:
            return
        try:
            if task == "rq2":
                expected = self.texts.rq2(row["query_concept_id"], row["query_country"])
            else:
                expected = self.texts.rq3(row["query_concept_id"], row["query_country"], row["descriptor_country"])
        except KeyError as exc:
            self.add(table, r, f"{task}.query_text", f"no translation for {exc}")
            return
        if (row["query_language"], row["query_text"]) != expected:
            self.add(table, r, f"{task}.query_text", f"{(row['query_language'], row['query_text'])} != {expected}")


def validate_benchmark(
    images: pa.Table,
    benchmark: pa.Table,
    benchmark_cd: pa.Table | None,
    translations: pa.Table | None = None,
    max_reuse: int | None = None,
    unassembled: pa.Table | None = None,
) -> ValidationReport:
    """Check every row; with `unassembled`, also that every image is a query or is listed there with a reason."""
    checker = _Checker(images, QueryTexts(translations) if translations is not None else None, max_reuse)
    checker.check_images()
    if checker.violations:
        return ValidationReport(violations=checker.violations, rows_checked={"image_metadata": images.num_rows})
    for name, table, schema in (
        ("benchmark", benchmark, BENCHMARK),
        ("benchmark_cd", benchmark_cd, BENCHMARK_CD),
    ):
        if table is not None and table.schema.names != schema.names:
            checker.add(name, None, "schema", f"columns {table.schema.names} != {schema.names}")
    if checker.violations:
        return ValidationReport(violations=checker.violations, rows_checked={})
    if benchmark.num_rows == 0:
        # A build whose sources all failed (blocked search, dead hosts) must not publish an empty benchmark.
        checker.add("benchmark", None, "non_empty", "no RQ2 triplet could be assembled; see the unassembled table")
    checker.check_rows("benchmark", benchmark, RQ2_RULES, {slot: prefix for slot, prefix in RQ2_SLOTS}, "rq2")
    rows = {"image_metadata": images.num_rows, "benchmark": benchmark.num_rows}
    if benchmark_cd is not None:
        prefixes = {slot: f"{slot}_candidate_" for slot in RQ3_SLOTS}
        checker.check_rows("benchmark_cd", benchmark_cd, RQ3_RULES, prefixes, "rq3")
        rows["benchmark_cd"] = benchmark_cd.num_rows
    if unassembled is not None:
        checker.check_complete("rq2", "benchmark", unassembled)
        if benchmark_cd is not None:
            checker.check_complete("rq3", "benchmark_cd", unassembled)
        rows["unassembled"] = unassembled.num_rows
    return ValidationReport(violations=checker.violations, rows_checked=rows)
