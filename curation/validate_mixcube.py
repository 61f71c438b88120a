"""The rules a MixCuBe release's `default` table keeps (MixCuBe §2, Fig. 2; `curation/quintets.py` builds it):

- rows come in quintets, each original followed by its swaps in the reference order of ethnicities;
- a quintet shares its original's id, country and category, and its sample ids are `<original_id>-original` and
  `<original_id>-<ethnicity in lower case>`, unique across the table;
- countries and categories are the reference's; an original is not synthesized and has no attempt, a swap is
  synthesized, has its attempt and was accepted in review;
- every mask a row names is in the release's `masks/` folder (when the release ships masks).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from curation.validate import ValidationReport, Violation
from data.reference import MixCubeReference
from data.review_labels import ACCEPT
from data.schemas import MIXCUBE_ROWS

TABLE = "default"


def validate_quintets(rows: pa.Table, mix: MixCubeReference, masks: set[str] | None = None) -> ValidationReport:
    """Every rule above on the `default` table (without image bytes); `mix`: the reference pack's cultures and
    ethnicities the release was built for; `masks`: the sha256 of the masks shipped."""
    missing = [name for name in MIXCUBE_ROWS.names if name not in rows.column_names]
    if missing:
        return _report([Violation(table=TABLE, row=None, rule="schema", detail=f"missing columns {missing}")], rows)
    violations = list(_violations(rows.select(MIXCUBE_ROWS.names).to_pylist(), mix, masks))
    if rows.num_rows == 0:
        violations.append(Violation(table=TABLE, row=None, rule="non_empty", detail="the release has no quintet"))
    return _report(violations, rows)


def _report(violations: list[Violation], rows: pa.Table) -> ValidationReport:
    return ValidationReport(violations=violations, rows_checked={TABLE: rows.num_rows})


def _violations(
    rows: Sequence[Mapping[str, object]], mix: MixCubeReference, masks: set[str] | None
) -> Iterator[Violation]:
    order = [mix.original_label, *(e.label for e in mix.ethnicities)]
    countries = {c.adjective for c in mix.cultures}
    seen: set[object] = set()  # cells as the table holds them
    originals: set[object] = set()

    def bad(r: int | None, rule: str, detail: str) -> Violation:
        return Violation(table=TABLE, row=r, rule=rule, detail=detail)

    if len(rows) % len(order):
        yield bad(None, "quintets", f"{len(rows)} rows are not whole quintets of {len(order)}")
    for r, row in enumerate(rows):
        first = rows[r - r % len(order)]
        expected = order[r % len(order)]
        original = row["ethnicity"] == mix.original_label
        if row["ethnicity"] != expected:
            yield bad(r, "quintet_order", f"ethnicity {row['ethnicity']!r} where {expected!r} belongs")
        for column in ("original_id", "country", "category"):
            if row[column] != first[column]:
                yield bad(r, "quintet_shares_original", f"{column} {row[column]!r}, its original's {first[column]!r}")
        suffix = "original" if original else str(row["ethnicity"]).lower()
        if row["sample_id"] != f"{row['original_id']}-{suffix}":
            yield bad(r, "sample_id", f"{row['sample_id']!r} is not {row['original_id']}-{suffix}")
        if row["sample_id"] in seen:
            yield bad(r, "unique_sample_id", f"{row['sample_id']!r} appears twice")
        seen.add(row["sample_id"])
        if original and row["original_id"] in originals:
            yield bad(r, "unique_original", f"original {row['original_id']!r} heads two quintets")
        originals.add(row["original_id"] if original else "")
        if row["country"] not in countries:
            yield bad(r, "known_country", f"{row['country']!r} is not a MixCuBe culture")
        if row["category"] not in mix.categories:
            yield bad(r, "known_category", f"{row['category']!r} is not one of {mix.categories}")
        if row["synthesized"] == original:
            yield bad(r, "synthesized", f"synthesized is {row['synthesized']} for ethnicity {row['ethnicity']!r}")
        if original and row["attempt_id"] is not None:
            yield bad(r, "original_has_no_attempt", f"the original names attempt {row['attempt_id']!r}")
        if not original and (row["attempt_id"] is None or row["review_decision"] != ACCEPT):
            yield bad(r, "swap_accepted", f"attempt {row['attempt_id']!r}, review {row['review_decision']!r}")
        if masks is not None and row["mask_sha256"] is not None and row["mask_sha256"] not in masks:
            yield bad(r, "mask_shipped", f"masks/{row['mask_sha256']}.png is not in the release")


def shipped_masks(folder: Path) -> set[str] | None:
    """The sha256 of every mask in the release's `masks/`, or None when it ships none."""
    masks = folder / "masks"
    return {p.stem for p in masks.glob("*.png")} if masks.is_dir() else None
