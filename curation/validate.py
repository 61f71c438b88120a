"""The validator: checks every benchmark row against the candidate rules and names each violation.

It re-derives everything from the image table, so it runs the same on a fresh build and on a published release.
Rules checked, per row, a whole column at a time:
  * the query and every candidate point at real rows, and their id, concept and country columns agree, and the
    row's `query_concept_id` is the concept of its query image (so the query text is tied to the query image);
  * each candidate is in its slot's eligible pool (`curation.rules`), and the candidates of a row are distinct;
  * the query text is the concept (RQ2) or descriptor form (RQ3) in the query country's language;
  * balance: replaying the rows in order (through `curation.pool_index`, as the assembler chose them), each
    candidate was a least-used member of its pool when chosen (and each RQ3 descriptor country a least-used
    eligible country), and no image exceeds `max_reuse` when set.
And per task, given the `unassembled` table: every image is a query, or is listed there with its reason. A row whose
reason is `taken_down` (`culturebench takedown`) names an image that is no longer in the table (`query_index` -1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from curation.assemble import RQ2_PREFIXES, RQ3_PREFIXES, QueryTexts
from curation.pool_index import PoolIndex
from curation.rules import (
    RQ2_RULES,
    RQ3_RULES,
    Catalog,
    DescriptorBalance,
    PoolCounts,
    Slot,
    in_pool,
    seeded_priority,
)
from data.progress import StepProgress, Steps
from data.reference import ReferencePack
from data.schemas import BENCHMARK, BENCHMARK_CD, CATALOG
from data.takedown.denylist import TAKEN_DOWN

# `nav-<code>`: a query in a country's second (third, ...) language (collectors/search_types.py `query_tag`).
IMAGE_ID = r"^(?P<slug>[a-z0-9_ ]+)-(?P<concept>\d+)-(?P<rank>\d+)-(?P<lang>eng|nav)(?:-(?P<code>[a-z]{2,3}))?$"
TAKEN_DOWN_INDEX = -1  # the `query_index` of a `taken_down` row of `unassembled`: the image has no row any more
DETAILED = 200  # violations spelled out per rule and table; the rest are counted in one more line


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
            checked = ", ".join(f"{rows:,} {table}" for table, rows in self.rows_checked.items())
            return f"valid: {checked} rows checked"  # for people: it is printed in the cards and by the CLI
        lines = [f"{len(self.violations)} violation(s):"]
        lines += [f"  [{v.table} row {v.row}] {v.rule}: {v.detail}" for v in self.violations[:limit]]
        if len(self.violations) > limit:
            lines.append(f"  ... and {len(self.violations) - limit} more")
        return "\n".join(lines)


class _Checker:
    def __init__(
        self,
        images: pa.Table,
        texts: QueryTexts | None,
        max_reuse: int | Mapping[str, int | None] | None,
        balance: bool,
        id_scheme: bool,
        country_order: Sequence[str],
        country_languages: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    ) -> None:
        self.images = images
        self.texts = texts
        self.max_reuse = max_reuse if isinstance(max_reuse, Mapping) else {"rq2": max_reuse, "rq3": max_reuse}
        self.balance = balance
        self.id_scheme = id_scheme
        self.violations: list[Violation] = []
        self.queried: dict[str, set[int]] = {}  # task -> query ids (image, language) that are a row
        self.catalog = Catalog.from_table(images, country_order, country_languages)
        self._primary = {country: spoken[0][0] for country, spoken in (country_languages or {}).items() if spoken}
        self.counts = PoolCounts(self.catalog)

    def add(self, table: str, row: int | None, rule: str, detail: str) -> None:
        self.violations.append(Violation(table=table, row=row, rule=rule, detail=detail))

    def add_rows(self, table: str, rows: npt.NDArray[np.integer], rule: str, detail: Callable[[int], str]) -> None:
        """One violation per row of `rows` (at most DETAILED spelled out), with `detail(row)` as its text."""
        rows = np.asarray(rows)
        for row in rows[:DETAILED].tolist():
            self.add(table, row, rule, detail(row))
        if len(rows) > DETAILED:
            self.add(table, None, rule, f"... and {len(rows) - DETAILED} more rows")

    def describe(self, index: int) -> str:
        cat = self.catalog
        return (
            f"{cat.image_id[index]} (concept={cat.concept_name[index]}, "
            f"country={cat.country_names[int(cat.country[index])]}, group={cat.group_names[int(cat.group[index])]}, "
            f"tags={sorted(cat.tags[index])})"
        )

    # -- image table ------------------------------------------------------------------------------------------

    def check_images(self) -> None:
        if self.images.schema.names[: len(CATALOG.names)] != CATALOG.names:
            self.add("image_metadata", None, "schema", f"columns {self.images.schema.names} != {CATALOG.names}")
            return
        ids = self.images.column("image_id").combine_chunks()
        values = np.array(ids.to_pylist(), dtype=object)
        _, first = np.unique(values, return_index=True)
        seen_before = np.ones(len(values), dtype=bool)
        seen_before[first] = False
        self.add_rows(
            "image_metadata", np.flatnonzero(seen_before), "unique_image_id", lambda r: f"{values[r]} appears twice"
        )
        if self.id_scheme:
            self.check_image_ids(ids, values)
        concept = self.images.column("concept_id").to_numpy()
        tags = self.images.column("tags").combine_chunks()
        parents = pc.list_parent_indices(tags).to_numpy()
        flat = pc.list_flatten(tags).to_numpy(zero_copy_only=False)
        tagged = np.zeros(len(values), dtype=bool)
        tagged[parents[flat == concept[parents]]] = True
        self.add_rows(
            "image_metadata",
            np.flatnonzero(~tagged),
            "own_concept_tagged",
            lambda r: f"tags {self.catalog.tags[r]} lack {int(concept[r])}",
        )

    def check_image_ids(self, ids: pa.Array, values: npt.NDArray[np.object_]) -> None:
        """Each image id encodes its row: the country (its name lower-cased), concept id, rank and query language."""
        parts = pc.extract_regex(ids, IMAGE_ID)
        countries = self.images.column("country").to_pylist()
        # A country's slug is its name in lower case (data/reference_models.py `Country`).
        expected_slug = pa.array([c.lower() for c in countries], pa.string())
        concept = self.images.column("concept_id").combine_chunks()
        rank = self.images.column("rank").combine_chunks()
        lang = self.images.column("query_lang").combine_chunks()
        agree = pc.and_kleene(
            pc.and_kleene(
                pc.equal(pc.struct_field(parts, "slug"), expected_slug),
                pc.equal(pc.cast(pc.struct_field(parts, "concept"), pa.int64()), pc.cast(concept, pa.int64())),
            ),
            pc.and_kleene(
                pc.equal(pc.cast(pc.struct_field(parts, "rank"), pa.int64()), pc.cast(rank, pa.int64())),
                pc.equal(pc.struct_field(parts, "lang"), lang),
            ),
        )
        # A `nav-<code>` id names the image's own language, never its country's first (that one is plain `nav`).
        code = pc.struct_field(parts, "code")
        language = self.images.column("language_code").combine_chunks()
        primary = pa.array([self._primary.get(c, "") for c in countries], pa.string())
        tagged = pc.or_kleene(pc.equal(code, ""), pc.and_(pc.equal(code, language), pc.not_equal(code, primary)))
        agree = pc.and_kleene(agree, tagged)
        bad = np.flatnonzero(~pc.fill_null(agree, False).to_numpy(zero_copy_only=False))
        concept_np, rank_np, lang_np = concept.to_numpy(), rank.to_numpy(), np.array(lang.to_pylist(), dtype=object)
        self.add_rows(
            "image_metadata",
            bad,
            "image_id_scheme",
            lambda r: (
                f"{values[r]} does not encode {(countries[r].lower(), int(concept_np[r]), int(rank_np[r]), lang_np[r])}"
            ),
        )

    # -- benchmark rows ---------------------------------------------------------------------------------------

    def references(
        self, name: str, table: pa.Table, prefix: str
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """The column's row indexes, and which are in range with id, concept and country columns that agree."""
        cat = self.catalog
        index = np.asarray(table.column(f"{prefix}index").to_numpy(zero_copy_only=False), dtype=np.int64)
        in_range = (index >= 0) & (index < len(cat))
        self.add_rows(
            name,
            np.flatnonzero(~in_range),
            f"{prefix}index_range",
            lambda r: f"{index[r]} is not a row of image_metadata",
        )
        safe = np.where(in_range, index, 0)
        agree = in_range.copy()
        countries = np.array(cat.country_names, dtype=object)
        expected = {
            "image_id": cat.image_id[safe],
            "concept": cat.concept_name[safe],
            "country": countries[cat.country[safe]],
        }
        for field, values in expected.items():
            key = "query_image_id" if prefix == "query_" and field == "image_id" else prefix + field
            column = np.array(table.column(key).to_pylist(), dtype=object)
            wrong = in_range & (column != values)
            agree &= ~wrong

            def mismatch(r: int, c: npt.NDArray[np.object_] = column, v: npt.NDArray[np.object_] = values) -> str:
                return f"{c[r]!r} != image_metadata[{index[r]}] {v[r]!r}"

            self.add_rows(name, np.flatnonzero(wrong), f"{key}_matches_index", mismatch)
        return index, in_range

    def check_rows(
        self, name: str, table: pa.Table, rules: tuple[Slot, ...], prefixes: dict[str, str], task: str
    ) -> None:
        cat = self.catalog
        n = table.num_rows
        q, q_ok = self.references(name, table, "query_")
        safe_q = np.where(q_ok, q, 0)
        concept, x = cat.concept[safe_q], cat.country[safe_q]
        qid, x_group = self.query_languages(name, table, safe_q, q_ok)
        # One query per image and language: a later row on the same image, in the same language, is refused.
        first_use = np.zeros(n, dtype=bool)
        _, firsts = np.unique(np.where(q_ok, qid, -1 - np.arange(n)), return_index=True)
        first_use[firsts] = True
        self.add_rows(name, np.flatnonzero(q_ok & ~first_use), "one_query_per_image",
                      lambda r: f"query_index {q[r]} is used by an earlier row")  # fmt: skip
        given = np.asarray(table.column("query_concept_id").to_numpy(zero_copy_only=False), dtype=np.int64)
        self.add_rows(
            name,
            np.flatnonzero(q_ok & (given != concept)),
            f"{task}.query_concept_id",
            lambda r: f"query_concept_id {given[r]} is not the concept of the query image {self.describe(q[r])}",
        )
        active = q_ok.copy()  # rows whose candidates are checked
        y = np.full(n, -1, dtype=np.int64)
        if task == "rq3":
            active, y = self.check_descriptors(name, table, q_ok, concept, x, y, x_group)
        self.check_query_text(name, table, task, active, given, x, y, qid)  # the text of the concept the row claims

        candidates = np.zeros((n, len(rules)), dtype=np.int64)
        valid = np.zeros((n, len(rules)), dtype=bool)
        allowed = np.zeros((n, len(rules)), dtype=bool)
        for s, slot in enumerate(rules):
            index, in_range = self.references(name, table, prefixes[slot.name])
            candidates[:, s], valid[:, s] = np.where(in_range, index, 0), in_range & active
            rows = np.flatnonzero(valid[:, s])
            allowed[rows, s] = in_pool(
                cat, slot, candidates[rows, s], concept[rows], x[rows], y[rows], x_group=x_group[rows]
            )
            broken = rows[~allowed[rows, s]]

            def breaks(r: int, s: int = s) -> str:
                return f"{self.describe(candidates[r, s])} breaks the rule for query {self.describe(q[r])}" + (
                    f", Y={cat.country_names[y[r]]}" if task == "rq3" else ""
                )

            self.add_rows(name, broken, f"{task}.{slot.name}", breaks)
        repeated = np.zeros(n, dtype=bool)
        for a in range(len(rules)):
            for b in range(a + 1, len(rules)):
                repeated |= valid[:, a] & valid[:, b] & (candidates[:, a] == candidates[:, b])
        self.add_rows(name, np.flatnonzero(repeated), f"{task}.distinct_candidates",
                      lambda r: f"candidates repeat: {candidates[r][valid[r]].tolist()}")  # fmt: skip
        usage = np.bincount(candidates[valid], minlength=len(cat))
        if self.balance:
            self.replay(name, task, rules, candidates, valid, allowed, concept, x, y, active, x_group)
        self.queried[task] = set(qid[q_ok & first_use].tolist())
        cap = self.max_reuse.get(task)
        if cap is not None and len(usage) and usage.max() > cap:
            worst = int(np.argmax(usage))
            self.add(
                name,
                None,
                f"{task}.max_reuse",
                f"{cat.image_id[worst]} is used {usage.max()}x > max_candidate_reuse {cap}",
            )

    def replay(
        self,
        name: str,
        task: str,
        rules: tuple[Slot, ...],
        candidates: npt.NDArray[np.int64],
        valid: npt.NDArray[np.bool_],
        allowed: npt.NDArray[np.bool_],
        concept: npt.NDArray[np.int64],
        x: npt.NDArray[np.int64],
        y: npt.NDArray[np.int64],
        active: npt.NDArray[np.bool_],
        x_group: npt.NDArray[np.int64],
    ) -> None:
        """Each candidate must have been a least-used member of its pool when chosen: the rows are replayed in
        order through the assembler's index, counting every use as the assembler did."""
        cat = self.catalog
        index = PoolIndex(cat, seeded_priority(len(cat), 0))  # the priority does not decide usage: any order serves
        unbalanced: list[tuple[int, str]] = []
        for r in np.flatnonzero(active).tolist():
            c, qx, qy, gx = int(concept[r]), int(x[r]), int(y[r]), int(x_group[r])
            for s, slot in enumerate(rules):
                if not valid[r, s]:
                    continue
                image = int(candidates[r, s])
                if allowed[r, s]:
                    used, least = index.usage(image), index.usage(index.least_used(slot, c, qx, qy, gx))
                    if used > least:
                        what = f"{slot.name}: {cat.image_id[image]} was used {used}x while a pool member was used"
                        unbalanced.append((r, f"{what} {least}x"))
                index.use(image)
        details = dict(unbalanced)
        self.add_rows(name, np.array([r for r, _ in unbalanced], dtype=np.int64), f"{task}.reuse_balance",
                      lambda r: details[r])  # fmt: skip

    def query_languages(
        self, name: str, table: pa.Table, rows: npt.NDArray[np.int64], q_ok: npt.NDArray[np.bool_]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Each row's query id (its image in its `query_language`) and that language's group; a language its query
        country does not speak is a violation (the row is then checked in the country's first language)."""
        cat = self.catalog
        languages = table.column("query_language").to_pylist()
        qid = np.zeros(len(rows), dtype=np.int64)
        group = np.zeros(len(rows), dtype=np.int64)
        wrong = []
        for r, (row, code) in enumerate(zip(rows.tolist(), languages, strict=True)):
            spoken = cat.country_queries[int(cat.country[row])]
            j = next((j for j, (c, _) in enumerate(spoken) if c == code), None)
            if j is None:
                j = 0
                if q_ok[r]:
                    wrong.append(r)
            qid[r] = row * cat.languages_per_query + j
            group[r] = spoken[j][1]
        self.add_rows(name, np.array(wrong, dtype=np.int64), "query_language",
                      lambda r: f"{languages[r]!r} is not a language of {self.describe(int(rows[r]))}")  # fmt: skip
        return qid, group

    def unassembled_query(self, task: str, row: int, reason: str) -> int | None:
        """The query an `unassembled` row names: its image, in the language its reason ends with (`[qu]`) where the
        image's country has several."""
        cat = self.catalog
        spoken = cat.country_queries[int(cat.country[row])]
        if len(spoken) == 1:
            return row * cat.languages_per_query
        code = reason.rsplit("[", 1)[-1].rstrip("]") if reason.endswith("]") else None
        try:
            return cat.query_id(row, code or "")
        except KeyError:
            self.add("unassembled", None, f"{task}.unassembled_language",
                     f"{cat.image_id[row]}: {reason!r} names none of its country's languages")  # fmt: skip
            return None

    def check_descriptors(
        self,
        name: str,
        table: pa.Table,
        q_ok: npt.NDArray[np.bool_],
        concept: npt.NDArray[np.int64],
        x: npt.NDArray[np.int64],
        y: npt.NDArray[np.int64],
        x_group: npt.NDArray[np.int64],
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
        cat = self.catalog
        names = table.column("descriptor_country").to_pylist()
        position = {country: i for i, country in enumerate(cat.country_names)}
        y = np.array([position.get(country, -1) for country in names], dtype=np.int64)
        unknown = q_ok & (y < 0)
        self.add_rows(name, np.flatnonzero(unknown), "rq3.descriptor_country",
                      lambda r: f"{names[r]!r} has no images in this build")  # fmt: skip
        active = q_ok & ~unknown
        balance = DescriptorBalance(len(cat.country_names))
        eligible_of: dict[tuple[int, int, int], npt.NDArray[np.intp]] = {}
        for r in np.flatnonzero(active).tolist():
            c, qx, qy, gx = int(concept[r]), int(x[r]), int(y[r]), int(x_group[r])
            if (c, qx, gx) not in eligible_of:
                eligible_of[(c, qx, gx)] = self.counts.descriptor_countries(c, qx, gx)
            eligible = eligible_of[(c, qx, gx)]
            if qy not in eligible:
                self.add(
                    name,
                    r,
                    "rq3.descriptor_country",
                    f"{cat.country_names[qy]} is in the query's language group or lacks a candidate for some slot "
                    f"(eligible: {[cat.country_names[e] for e in eligible]})",
                )
            elif self.balance and not balance.is_least_used(c, qy, eligible):
                self.add(
                    name,
                    r,
                    "rq3.descriptor_balance",
                    f"{cat.country_names[qy]} is not a least-used descriptor country for concept {c} among "
                    f"{[cat.country_names[e] for e in eligible]}",
                )
            balance.record(c, qy)
        return active, np.where(active, y, -1)

    def check_query_text(
        self, name: str, table: pa.Table, task: str, active: npt.NDArray[np.bool_], concept: npt.NDArray[np.int64],
        x: npt.NDArray[np.int64], y: npt.NDArray[np.int64], qid: npt.NDArray[np.int64],
    ) -> None:  # fmt: skip
        if self.texts is None:
            return
        cat = self.catalog
        given = list(
            zip(table.column("query_language").to_pylist(), table.column("query_text").to_pylist(), strict=True)
        )
        expected: dict[tuple[int, int, int, str], tuple[str, str] | str] = {}
        for r in np.flatnonzero(active).tolist():
            key = (int(concept[r]), int(x[r]), int(y[r]), cat.query_language(int(qid[r]))[0])
            if key not in expected:
                try:
                    country = cat.country_names[key[1]]
                    expected[key] = (
                        self.texts.rq2(key[0], country, key[3])
                        if task == "rq2"
                        else self.texts.rq3(key[0], country, cat.country_names[key[2]], key[3])
                    )
                except KeyError as exc:
                    expected[key] = f"no translation for {exc}"
            want = expected[key]
            if isinstance(want, str):
                self.add(name, r, f"{task}.query_text", want)
            elif given[r] != want:
                self.add(name, r, f"{task}.query_text", f"{given[r]} != {want}")

    def check_complete(self, task: str, table_name: str, unassembled: pa.Table) -> None:
        """Every image is a query of the task, or is in `unassembled` with the reason it could not be one."""
        rows = unassembled.filter(pc.equal(unassembled["task"], task)).to_pylist()
        explained: set[int] = set()
        present = set(self.catalog.image_id.tolist())
        cat = self.catalog
        for row in rows:
            index = row["query_index"]
            if row["reason"] == TAKEN_DOWN:  # a query of an earlier version whose image was taken down since
                if index != TAKEN_DOWN_INDEX or row["query_image_id"] in present:
                    self.add("unassembled", None, f"{task}.taken_down", f"{row} names an image of image_metadata")
                continue
            if not 0 <= index < len(self.catalog) or self.catalog.image_id[index] != row["query_image_id"]:
                self.add("unassembled", None, f"{task}.unassembled_reference", f"{row} is not a row of image_metadata")
                continue
            if not row["reason"]:
                self.add("unassembled", None, f"{task}.unassembled_reason", f"{row['query_image_id']} has no reason")
            query = self.unassembled_query(task, index, row["reason"])
            if query is None:
                continue
            if query in self.queried.get(task, set()):
                self.add("unassembled", None, f"{task}.unassembled_but_queried", f"{row['query_image_id']}")
            explained.add(query)
        every = cat.query_ids()
        missing = np.array(sorted(set(every.tolist()) - self.queried.get(task, set()) - explained), dtype=np.int64)
        if len(missing):

            def unexplained(query: int) -> str:
                row = cat.query_row(query)
                language = f" in {cat.query_language(query)[0]}" if cat.languages_per_query > 1 else ""
                return f"{cat.image_id[row]}{language} is neither a query nor in unassembled with a reason"

            self.add_rows(table_name, missing, f"{task}.complete", unexplained)


def validate_benchmark(
    images: pa.Table,
    benchmark: pa.Table,
    benchmark_cd: pa.Table | None,
    translations: pa.Table | None = None,
    max_reuse: int | Mapping[str, int | None] | None = None,
    unassembled: pa.Table | None = None,
    *,
    balance: bool = True,
    texts: QueryTexts | None = None,
    id_scheme: bool = True,
    progress: StepProgress | None = None,
    pack: ReferencePack,
) -> ValidationReport:
    """Check every row; with `unassembled`, also that every image is a query or is listed there with a reason.
    `max_reuse` caps candidate reuse for both tasks, or per task ({"rq2": 5, "rq3": None}).

    `balance=False` leaves out the replay of the least-used choices (a benchmark repaired around rows it kept
    cannot have chosen them least-used); `texts` replaces the pack's language data for other countries;
    `id_scheme=False` leaves out the image id format (a pool of the authors' images keeps their ids as published).
    `pack`: the reference pack the benchmark was built from (its country order, languages and names)."""
    texts = texts or (QueryTexts(translations, pack) if translations is not None else None)
    steps = Steps(progress, 5)  # images and schemas, RQ2 rows, RQ3 rows, each task's completeness
    languages = {c.name: [(lang.code, lang.group) for lang in c.languages] for c in pack.countries}
    checker = _Checker(images, texts, max_reuse, balance, id_scheme, [c.name for c in pack.countries], languages)
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
    steps.step("images and schemas")
    checker.check_rows("benchmark", benchmark, RQ2_RULES, RQ2_PREFIXES, "rq2")
    steps.step("RQ2 rows")
    rows = {"image_metadata": images.num_rows, "benchmark": benchmark.num_rows}
    if benchmark_cd is not None:
        checker.check_rows("benchmark_cd", benchmark_cd, RQ3_RULES, RQ3_PREFIXES, "rq3")
        rows["benchmark_cd"] = benchmark_cd.num_rows
    steps.step("RQ3 rows")
    if unassembled is not None:
        checker.check_complete("rq2", "benchmark", unassembled)
        steps.step("RQ2 complete")
        if benchmark_cd is not None:
            checker.check_complete("rq3", "benchmark_cd", unassembled)
        rows["unassembled"] = unassembled.num_rows
    steps.finish()
    return ValidationReport(violations=_row_major(checker.violations), rows_checked=rows)


def _row_major(violations: list[Violation]) -> list[Violation]:
    """Violations by table, then row (whole-table ones last), each row's in the order its checks ran."""
    tables = {"image_metadata": 0, "benchmark": 1, "benchmark_cd": 2, "unassembled": 3}
    return sorted(violations, key=lambda v: (tables.get(v.table, 4), v.row is None, v.row or 0))
