"""A further task's part of a result folder (`retrieval/` of a 3XCM result, `audit/` of a MixCuBe one): its own
per-query table, tables, figures and card section, written under the part's folder, and its metrics under its own
key in `metrics.json`, with its headline figures also at the top level (where `compare` reads them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

#: A headline value: a number (or null), or one number per group (`max_skew` per prompt set), which `compare` and
#: the card show as `name.group`.
Headline = float | None | dict[str, float | None]


@dataclass
class ResultPart:
    per_query: pa.Table  # written as <part>/per_query.parquet
    tables: dict[str, pa.Table]  # <part>/<name>.parquet
    metrics: dict[str, Any]  # metrics.json["<part>"]: everything, JSON-ready (NaN becomes null)
    headline: dict[str, Headline]  # also at metrics.json's top level, in the card's order
    ci95: dict[str, list[float | None]]  # 95% interval per flattened headline name ("mrr", "max_skew.agency")
    figures: dict[str, bytes]  # <part>/figures/<name> (PNG)
    card: list[str]  # the card's Markdown section(s) for this part, headings included
    skipped: list[str] = field(default_factory=list)  # what was not computed, and why
    warnings: list[str] = field(default_factory=list)  # what makes the numbers not what they seem (first in card)
