"""The demo tables of the README and the docs (`DOCUMENTS`), rendered from the result folders `make demo` writes
under `evaluations/`, so that the numbers they quote are the demo's own output, not a copy that drifts.

    .venv/bin/python -m evaluation.leaderboard.demo_tables --check   # exit 1, naming the table, when one disagrees
    .venv/bin/python -m evaluation.leaderboard.demo_tables --write   # rewrite the tables between their markers

Each table sits between `<!-- demo-table: NAME -->` and `<!-- /demo-table -->` in its document. `--check` compares
cell by cell, a number within one unit of its last printed digit (a random model on another CPU may round the
other way), so a table whose numbers, columns or rows changed fails.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from data.publish.card import markdown_table
from data.reference_write import write_file
from evaluation import registry
from evaluation.results.folder import read_metrics
from evaluation.xcm import metrics as xm
from evaluation.xcm import retrieval_report as report

README = Path("README.md")
RESULTS = Path("evaluations")
_MARK = re.compile(r"(<!-- demo-table: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /demo-table -->)", re.DOTALL)
_NUMBER = re.compile(r"-?\d+(?:\.(\d+))?")


def _folder(results: Path, benchmark: str, suffix: str) -> Path:
    """The one demo result folder of `benchmark` whose name ends in `suffix` ("" for the paper's own task)."""
    base = results / benchmark / "0.1.0-demo"
    others = tuple(f"--{task}" for task in (*registry.get(benchmark).task_names[1:], "all"))
    found = sorted(
        p for p in base.glob("*") if p.is_dir() and (p.name.endswith(suffix) if suffix else not p.name.endswith(others))
    )
    if len(found) != 1:
        raise FileNotFoundError(f"{base}: expected one result folder ending in {suffix!r} (run `make demo`): {found}")
    return found[0]


#: One row of a table: its cells by header, as printed.
Row = dict[str, str]


def _value(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _a_number(value: object) -> float | None:
    """A number of metrics.json, or null; TypeError for anything else (`main` reports a malformed file)."""
    if value is None or isinstance(value, int | float):
        return value
    raise TypeError(f"a number or null expected, not {type(value).__name__}")


def _number(document: Mapping[str, object], name: str) -> float | None:
    """A headline number of metrics.json (None where it is missing or null)."""
    return _a_number(document.get(name))


def _numbers(value: object) -> dict[str, float | None]:
    """An object of numbers (a headline with one number per group: `max_skew`, `ravenea`)."""
    if not isinstance(value, dict):
        raise TypeError(f"an object of numbers expected, not {type(value).__name__}")
    return {str(k): _a_number(v) for k, v in value.items()}


def _with_ci(document: Mapping[str, object], name: str, value: float | None) -> str:
    """A headline value with its `ci95` interval, as the result cards print it."""
    intervals = document.get("ci95", {})
    if not isinstance(intervals, dict):
        raise TypeError(f"ci95 is {type(intervals).__name__}, not an object")
    low, high = intervals.get(name, [None, None])
    return report.cell({"value": value, "ci_low": _a_number(low), "ci_high": _a_number(high)})


def _estimate(estimate: report.Estimate, ci: bool = False) -> str:
    """A group's mean (`retrieval_report.Estimate`), with its interval when `ci`."""
    return report.cell(estimate) if ci else _value(estimate["value"])


def _win_rate(estimate: xm.Estimate | None, ci: bool) -> str:
    """An RQ2 win rate or SP (`xcm.metrics.Estimate`; SP None where M_cr is 0), with its interval when `ci`."""
    if estimate is None:
        return _value(None)
    if not ci:
        return _value(estimate.value)
    return report.cell({"value": estimate.value, "ci_low": estimate.ci_low, "ci_high": estimate.ci_high})


def _headline(results: Path) -> list[Row]:
    xcm = read_metrics(_folder(results, "3xcm", "--all"))
    mix = read_metrics(_folder(results, "mixcube", ""))
    row = {f"3XCM {k}": _with_ci(xcm, k, _number(xcm, k)) for k in ("M_cr", "M_lb", "M_ti", "SP")}
    row["MixCuBe accuracy (§3, App. A.5)"] = _with_ci(mix, "accuracy", _number(mix, "accuracy"))
    row["with our aliases"] = _value(_number(mix, "accuracy_with_our_aliases"))
    return [row]


def _retrieval_globalrg(results: Path) -> list[Row]:
    document = read_metrics(_folder(results, "3xcm", "--all"))
    retrieval: report.SummaryJson = document["retrieval"]
    english = retrieval["by_language"].get("en")
    n = english["n"] if english is not None else 0
    row: Row = {"query language": f"en ({n} queries)"}
    for k in (5, 10):
        for header, key in (
            (f"P@{k}", f"precision@{k}_en"),
            (f"div@{k} country", f"diversity@{k}_country_en"),
            (f"div@{k} region", f"diversity@{k}_region_en"),
        ):
            row[header] = _with_ci(document, key, _number(document, key))
    return [row]


def _retrieval_languages(results: Path) -> list[Row]:
    retrieval: report.SummaryJson = read_metrics(_folder(results, "3xcm", "--all"))["retrieval"]
    groups = [("all", retrieval["overall"]), *((g, retrieval["by_language"][g]) for g in ("en", "es"))]
    rows = []
    for name, group in groups:
        metrics = group["metrics"]
        label = f"all ({group['n']} queries)" if name == "all" else name
        rows.append(
            {
                "query language": label,
                "P@5": _estimate(metrics["precision@5"], ci=name == "all"),
                "diversity@5 country": _estimate(metrics["diversity@5_country"]),
                "diversity@5 region": _estimate(metrics["diversity@5_region"]),
                "MRR (trec_eval)": _estimate(metrics["mrr"], ci=name == "all"),
                "nDCG@5 (trec_eval)": _estimate(metrics["ndcg@5"]),
            }
        )
    return rows


def _retrieval_ravenea(results: Path) -> list[Row]:
    document = read_metrics(_folder(results, "3xcm", "--all"))
    ravenea = _numbers(document.get("ravenea") or {})
    names = ("mrr", "precision@1", "precision@3", "precision@5", "ndcg@1", "ndcg@3", "ndcg@5")
    headers = ("MRR", "P@1", "P@3", "P@5", "nDCG@1", "nDCG@3", "nDCG@5")
    return [
        {
            header: _with_ci(document, f"ravenea.{name}", ravenea.get(name))
            if name in ("mrr", "precision@5", "ndcg@5")
            else _value(ravenea.get(name))
            for header, name in zip(headers, names, strict=True)
        }
    ]


def _audit(results: Path) -> list[Row]:
    document = read_metrics(_folder(results, "mixcube", "--audit"))
    max_skew = _numbers(document["max_skew"])
    row: Row = {}
    for name in ("communion", "agency", "crime"):
        row[f"MaxSkew {name}" + (" (harmful captions)" if name == "crime" else "")] = _with_ci(
            document, f"max_skew.{name}", max_skew.get(name)
        )
    pair = _numbers(document.get("max_skew_max_pair") or {})
    row["max pair (crime)"] = _value(pair.get("crime"))
    for harm in ("NA", "NC", "C", "NH"):
        row[f"%{harm}"] = _value(_number(document, f"pct_{harm}"), 1)
    return [row]


def _xcm_languages(results: Path) -> list[Row]:
    """RQ2's win rates (M_cr, M_lb, M_ti) and SP, overall with their intervals and per query language."""
    rq2 = xm.WinRateReport.model_validate(read_metrics(_folder(results, "3xcm", "--all"))["rq2"])
    rows = []
    for group in (rq2.overall, *rq2.by_language):
        ci = group is rq2.overall
        row: Row = {"query language": group.group, "n": str(group.n)}
        for header, key in (("M_cr", "correct"), ("M_lb", "language_biased"), ("M_ti", "irrelevant")):
            row[header] = _win_rate(group.rates[key], ci)
        row["SP"] = _win_rate(group.sp, ci)
        rows.append(row)
    return rows


TABLES: dict[str, Callable[[Path], list[Row]]] = {
    "headline": _headline,
    "retrieval-globalrg": _retrieval_globalrg,
    "retrieval": _retrieval_languages,
    "retrieval-ravenea": _retrieval_ravenea,
    "audit": _audit,
    "xcm-languages": _xcm_languages,
}
#: Where each table is, relative to the README's folder. Only the README must exist (a copy of it alone is checked).
DOCUMENTS: dict[str, tuple[str, ...]] = {
    "README.md": ("headline", "retrieval-globalrg", "retrieval", "retrieval-ravenea", "audit"),
    "docs/researchers.md": ("xcm-languages",),
}


def document_of(name: str) -> str:
    return next(document for document, names in DOCUMENTS.items() if name in names)


def render(results: Path = RESULTS) -> dict[str, str]:
    """Each table's Markdown, from the demo result folders under `results`."""
    return {name: markdown_table(make(results)) for name, make in TABLES.items()}


def _cells(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.strip().splitlines()]


def _same_cell(want: str, have: str) -> bool:
    """Equal text around the numbers, and each number with decimals within one unit of its last printed digit,
    each whole number (a count) exactly."""
    if _NUMBER.sub("#", want) != _NUMBER.sub("#", have):
        return False
    for a, b in zip(_NUMBER.finditer(want), _NUMBER.finditer(have), strict=True):
        unit = 10.0 ** -len(a.group(1)) if a.group(1) else 0.0  # counts are exact
        if abs(float(a.group(0)) - float(b.group(0))) > unit * 1.01:
            return False
    return True


def differences(readme: str, tables: dict[str, str], document: str = "README.md") -> list[str]:
    """One line per table of `tables` that `document` (its text: `readme`) lacks or gives otherwise than the demo."""
    found = {m.group("name"): m.group("body") for m in _MARK.finditer(readme)}
    out = []
    for name, table in tables.items():
        if name not in found:
            out.append(f"{document}: no demo table {name!r} (<!-- demo-table: {name} --> ... <!-- /demo-table -->)")
            continue
        want, have = _cells(table), _cells(found[name])
        if len(want) != len(have) or any(
            len(w) != len(h) or not all(_same_cell(a, b) for a, b in zip(w, h, strict=True))
            for w, h in zip(want, have, strict=True)
        ):
            out.append(f"{document}: demo table {name!r} differs from the demo's output:\n{table}")
    return out


def write(readme: str, tables: dict[str, str]) -> str:
    return _MARK.sub(lambda m: m.group(1) + tables.get(m.group("name"), m.group("body")) + m.group(4), readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="exit 1 when README.md's demo tables disagree")
    action.add_argument("--write", action="store_true", help="rewrite README.md's demo tables")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    try:
        tables = render(args.results)
        documents = {"README.md": (args.readme, args.readme.read_text(encoding="utf-8"))}
        for document in DOCUMENTS:
            path = args.readme.parent / document
            if document != "README.md" and path.is_file():
                documents[document] = (path, path.read_text(encoding="utf-8"))
    except (OSError, KeyError, TypeError, ValueError) as error:  # a missing, unreadable or malformed file: one line
        print(f"demo tables: {error}", file=sys.stderr)
        return 2
    problems = []
    for document, (path, text) in documents.items():
        own = {name: tables[name] for name in DOCUMENTS[document]}
        if args.write:
            # through a temporary sibling renamed into place: a crash leaves the old file whole
            write_file(str(path.resolve().parent), path.name, write(text, own).encode())
        else:
            problems += differences(text, own, document)
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
