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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data.publish.card import markdown_table
from data.reference_write import write_file
from evaluation import registry
from evaluation.results.folder import read_metrics
from evaluation.xcm.retrieval_report import cell

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


def _value(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _with_ci(document: dict[str, Any], name: str, value: Any) -> str:
    """A headline value with its `ci95` interval, as the result cards print it."""
    low, high = document.get("ci95", {}).get(name, [None, None])
    return cell({"value": value, "ci_low": low, "ci_high": high})


def _estimate(estimate: dict[str, Any], ci: bool = False) -> str:
    """A group's mean (`retrieval_report.Estimate`), with its interval when `ci`."""
    return cell(estimate) if ci else _value(estimate["value"])


def _headline(results: Path) -> list[dict[str, Any]]:
    xcm = read_metrics(_folder(results, "3xcm", "--all"))
    mix = read_metrics(_folder(results, "mixcube", ""))
    row = {f"3XCM {k}": _with_ci(xcm, k, xcm.get(k)) for k in ("M_cr", "M_lb", "M_ti", "SP")}
    row["MixCuBe accuracy (§3, App. A.5)"] = _with_ci(mix, "accuracy", mix.get("accuracy"))
    row["with our aliases"] = _value(mix.get("accuracy_with_our_aliases"))
    return [row]


def _retrieval_globalrg(results: Path) -> list[dict[str, Any]]:
    document = read_metrics(_folder(results, "3xcm", "--all"))
    n = document["retrieval"]["by_language"].get("en", {}).get("n", 0)
    row: dict[str, Any] = {"query language": f"en ({n} queries)"}
    for k in (5, 10):
        for header, key in (
            (f"P@{k}", f"precision@{k}_en"),
            (f"div@{k} country", f"diversity@{k}_country_en"),
            (f"div@{k} region", f"diversity@{k}_region_en"),
        ):
            row[header] = _with_ci(document, key, document.get(key))
    return [row]


def _retrieval_languages(results: Path) -> list[dict[str, Any]]:
    retrieval = read_metrics(_folder(results, "3xcm", "--all"))["retrieval"]
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


def _retrieval_ravenea(results: Path) -> list[dict[str, Any]]:
    document = read_metrics(_folder(results, "3xcm", "--all"))
    ravenea = document.get("ravenea") or {}
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


def _audit(results: Path) -> list[dict[str, Any]]:
    document = read_metrics(_folder(results, "mixcube", "--audit"))
    row: dict[str, Any] = {}
    for name in ("communion", "agency", "crime"):
        row[f"MaxSkew {name}" + (" (harmful captions)" if name == "crime" else "")] = _with_ci(
            document, f"max_skew.{name}", document["max_skew"].get(name)
        )
    pair = document.get("max_skew_max_pair") or {}
    row["max pair (crime)"] = _value(pair.get("crime"))
    for harm in ("NA", "NC", "C", "NH"):
        row[f"%{harm}"] = _value(document.get(f"pct_{harm}"), 1)
    return [row]


def _xcm_languages(results: Path) -> list[dict[str, Any]]:
    """RQ2's win rates (M_cr, M_lb, M_ti) and SP, overall with their intervals and per query language."""
    rq2 = read_metrics(_folder(results, "3xcm", "--all"))["rq2"]
    rows = []
    for group in (rq2["overall"], *rq2["by_language"]):
        ci = group is rq2["overall"]
        rates = group["rates"]
        row: dict[str, Any] = {"query language": group["group"], "n": group["n"]}
        for header, key in (("M_cr", "correct"), ("M_lb", "language_biased"), ("M_ti", "irrelevant")):
            row[header] = cell(rates[key]) if ci else _value(rates[key]["value"])
        row["SP"] = cell(group["sp"]) if ci else _value(group["sp"]["value"])
        rows.append(row)
    return rows


TABLES: dict[str, Callable[[Path], list[dict[str, Any]]]] = {
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
