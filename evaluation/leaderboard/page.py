"""`evaluate compare --html DIR`: a static leaderboard page, `DIR/index.html`, that stands alone and works offline.

DIR holds the page and a copy of each result's card (`README.md`) and figures under `results/<NN>-<folder>/`, laid out
as in the result folder so the card's own figure links still resolve; nothing is fetched from anywhere (the page's
Content-Security-Policy allows its own inline style and script, by hash, and images from DIR, nothing else). Columns
sort on a click (a few lines of inline script). Every text read from a result folder is escaped (`_text`); a figure
or card that is not a plain file of ours (a link, another format, an odd name) is one error naming it.

One page shows one benchmark and one release (its version and manifest sha256): results of another are refused,
except the random demo model's, whose rows are references (chance level) and may come from another release of the
benchmark; the page names it. DIR is written whole, beside itself, and renamed into place; it may replace only a
page this module wrote (`MARKER` lists its files), never another folder, an input, or anything in a release."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

from data.output_paths import OutputPathError, check_output
from data.text_safety import visible
from evaluation import registry
from evaluation.leaderboard.paired import ALPHA, CORRECTION, TEST
from evaluation.leaderboard.spec import Cell
from evaluation.leaderboard.summary import FILE, comparison, comparison_json
from evaluation.leaderboard.tables import (
    LeaderboardError,
    PageRelease,
    Result,
    Row,
    Table,
    number,
    page_release,
    published_notice,
    tables,
)
from evaluation.results.figures import Point, compare_png
from evaluation.results.folder import CARD
from evaluation.results.names import unique

INDEX = "index.html"
PLOT = "comparison.png"
#: The list of files a page wrote; a folder that holds one (and nothing else) is a page that may be replaced.
MARKER = ".culturebench-leaderboard.json"
#: A figure or card larger than this is not one of ours.
MAX_ASSET_BYTES = 32 << 20
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 78rem; padding: 0 1rem; color: #1d1d1f; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; } code { font-size: 90%; }
dl.release { display: grid; grid-template-columns: max-content auto; gap: .1rem 1rem; }
dl.release dt { color: #666; } dl.release dd { margin: 0; overflow-wrap: anywhere; }
.note { color: #555; max-width: 60rem; } nav a { margin-right: .8rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: .6rem 0; font-variant-numeric: tabular-nums; }
th, td { padding: .25rem .6rem; border-bottom: 1px solid #e5e5e5; text-align: right; white-space: nowrap; }
th[scope=row], td.text, thead th:nth-child(-n+2) { text-align: left; }
thead th { position: sticky; top: 0; background: #f6f6f6; }
thead button { all: inherit; cursor: pointer; padding: 0; }
thead button::after { content: " \\2195"; color: #aaa; }
th[aria-sort=descending] button::after { content: " \\2193"; color: #000; }
th[aria-sort=ascending] button::after { content: " \\2191"; color: #000; }
tr.demo { color: #777; font-style: italic; } tr.published { background: #eef4fb; }
.elsewhere { margin-left: 1rem; border-left: 3px solid #c9d9ee; padding-left: .8rem; }
.elsewhere h3 { font-size: 100%; }
.ci { display: block; font-size: 75%; color: #888; }
.figures { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; max-width: 36rem; } figure img { max-width: 100%; border: 1px solid #eee; }
figure.plot { max-width: 100%; } th[scope=row] { max-width: 22rem; overflow: hidden; text-overflow: ellipsis; }
.rank { color: #888; font-size: 85%; } td.paired { color: #555; }
figcaption { font-size: 85%; color: #555; }
"""

# Sorts a table by the clicked column: numbers by their data-sort value (a cell with none, a dash, always last),
# text by its letters; a first click sorts numbers high to low and text A to Z, the next click reverses.
SCRIPT = """
(function () {
  function key(cell, numeric) {
    if (!numeric) { return cell.textContent.trim().toLowerCase(); }
    var raw = cell.getAttribute('data-sort');
    return raw === null || raw === '' ? null : Number(raw);
  }
  function order(a, b, descending) {
    if (a === b) { return 0; }
    if (a === null) { return 1; }
    if (b === null) { return -1; }
    var less = a < b ? -1 : 1;
    return descending ? -less : less;
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (head, column) {
      var button = head.querySelector('button');
      var numeric = head.getAttribute('data-type') === 'number';
      button.addEventListener('click', function () {
        var now = head.getAttribute('aria-sort');
        var descending = now === 'none' || now === null ? numeric : now === 'ascending';
        Array.prototype.forEach.call(heads, function (h) { h.setAttribute('aria-sort', 'none'); });
        head.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          return order(key(a.cells[column], numeric), key(b.cells[column], numeric), descending);
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
})();
"""


def _hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


# Nothing but the page's own style and script, and images from its folder; no connection, frame, form or base.
CSP = (
    f"default-src 'none'; img-src 'self' file:; style-src {_hash(STYLE)}; script-src {_hash(SCRIPT)}; "
    "base-uri 'none'; form-action 'none'"
)


def _text(value: object) -> str:
    """Any value as literal HTML text or attribute value: one line, control and format characters (a bidi override)
    shown as escapes, `<>&"'` escaped."""
    return html.escape(visible(" ".join(str(value).split())), quote=True)


# -- checks and assets ----------------------------------------------------------------------------------------------
def check_page_dir(out: Path, inputs: Sequence[Path], option: str = "--html") -> None:
    """Before anything is read: `out` is a folder to be (or a page written before), never a file, an input, inside
    one or holding one, nor inside a release or result folder (OutputPathError, one line)."""
    if os.path.lexists(out) and not out.is_dir():
        raise OutputPathError(f"{option} {out} is not a folder: the leaderboard is a folder (index.html and copies)")
    target = check_output(out, inputs=inputs, option=option)
    for given in inputs:
        if target in given.resolve().parents:
            raise OutputPathError(f"{option} {out} holds the input {given}: choose a folder outside the inputs")
    if out.is_dir():
        _replaceable(out, option)


def _replaceable(out: Path, option: str) -> None:
    """`out` may be replaced: it is empty, or a page this module wrote, holding nothing else."""
    present = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() or p.is_symlink())
    if not present:
        return
    try:
        listed = json.loads((out / MARKER).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        raise OutputPathError(
            f"{option} {out} is a folder that holds other files, not a leaderboard page: choose a new or empty folder"
        ) from None
    extra = [p for p in present if p not in set(listed) | {MARKER}]
    if extra:
        raise OutputPathError(
            f"{option} {out} holds files the leaderboard did not write (e.g. {extra[0]}): choose a new or empty folder"
        )


def _asset(path: Path, what: str) -> bytes:
    if path.is_symlink() or not path.is_file():
        raise LeaderboardError(f"{path}: a {what} must be a plain file, not a link or anything else")
    if not SAFE_NAME.fullmatch(path.name):
        raise LeaderboardError(f"{path}: a {what}'s name must be letters, digits, '.', '_' and '-'")
    if path.stat().st_size > MAX_ASSET_BYTES:
        raise LeaderboardError(f"{path}: larger than {MAX_ASSET_BYTES >> 20} MB; not a {what} we wrote")
    return path.read_bytes()


def _figures(result: Result) -> list[tuple[str, bytes]]:
    """The result's PNG figures (`figures/`, and each further task's `<task>/figures/`), by path in the folder."""
    found = []
    for where in ["figures", *(f"{task}/figures" for task in registry.get(result.benchmark).task_names[1:])]:
        folder = result.folder / where
        if not os.path.lexists(folder):
            continue
        if folder.is_symlink() or not folder.is_dir():
            raise LeaderboardError(f"{folder}: a figures folder must be a plain folder, not a link or a file")
        for path in sorted(folder.iterdir()):
            data = _asset(path, "figure")
            if path.suffix != ".png" or not data.startswith(PNG_SIGNATURE):
                raise LeaderboardError(f"{path}: a figure must be a PNG file (figures/*.png)")
            found.append((f"{where}/{path.name}", data))
    return found


def _slug(position: int, result: Result) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", result.folder.resolve().name).strip("-.")[:60] or "result"
    return f"results/{position + 1:02d}-{name}"


# -- the page -------------------------------------------------------------------------------------------------------
def _cell(cell: Cell, published: bool) -> str:
    """A figure, and under it its 95% interval: always for ours (an end the resamples leave undefined, such as SP's
    upper end where M_cr is 0 in some, is a dash, and the hover says so); a paper's figure has none."""
    sort = "" if cell.value is None else repr(cell.value)
    interval = cell.value is not None and not published
    title = ""
    if interval:
        undefined = [end for end, v in (("lower", cell.low), ("upper", cell.high)) if v is None]
        title = f"95% CI [{number(cell.low)}, {number(cell.high)}]"
        if undefined:
            title += f"; its {' and '.join(undefined)} end undefined (not finite in the resamples, or not computed)"
    if published and cell.value is not None:
        title = f"published value {cell.value:.6g}"
    ci = f'<span class="ci">[{number(cell.low)}, {number(cell.high)}]</span>' if interval else ""
    return f'<td data-sort="{_text(sort)}" title="{_text(title)}">{_text(number(cell.value))}{ci}</td>'


def _label(row: Row, slugs: list[str], release: PageRelease, names: Sequence[str] = ()) -> tuple[str, str]:
    """The row's model cell and source cell: ours by its short display name, the full id on hover."""
    if row.kind == "published":
        source = f'<span title="{_text(row.source)}">published, {_text(row.cited)}</span>'
        return f'<span title="{_text(row.full_name)}">{_text(row.label)}</span>', source
    assert row.result is not None
    shown = names[row.result] if row.result < len(names) else row.label
    hover = f'title="{_text(row.label)}" data-model-id="{_text(row.label)}"'
    link = f'<a href="{_text(slugs[row.result])}/{CARD}" {hover}>{_text(shown)}</a>' if slugs[row.result] else ""
    label = link or f"<span {hover}>{_text(shown)}</span>"
    if row.kind == "demo":
        other = f", release {row.release}" if row.release != release.version else ""
        return label, _text(f"random demo model (meaningless{other})")
    return label, "evaluated here"


def _ranked(table: Table) -> list[Row]:
    """Rows by the table's main figure, highest first, a row without one last (the page's first view)."""
    if table.rank_by is None:
        return table.rows
    column = table.rank_by

    def key(row: Row) -> tuple[bool, float]:
        value = row.cells.get(column, Cell(None)).value
        return (value is None, -(value or 0.0))

    return sorted(table.rows, key=key)


PAIRED_COLUMN = "paired test"


def _paired(table: Table, row: Row, ranks: dict[int, int]) -> str:
    """The row's paired-test cell: the ranks (#k, in the first view) of the models it cannot be told apart from."""
    if row.result is None or not any(row.result in (t.a, t.b) for t in table.tests):
        return '<td class="text paired" data-paired=""></td>'
    alike = sorted(
        ranks[t.b if t.a == row.result else t.a]
        for t in table.tests
        if row.result in (t.a, t.b) and not t.distinguishable
    )
    shown = "≈ " + ", ".join(f"#{k}" for k in alike) if alike else "apart from all"
    return f'<td class="text paired" data-paired="{" ".join(map(str, alike))}">{_text(shown)}</td>'


def _paired_note(table: Table) -> str:
    if not table.tests:
        return ""
    return (
        f'<p class="note paired-note">{_text(PAIRED_COLUMN)}: {_text(TEST)} on {_text(table.rank_by or "")} '
        f"between every two models of this release, over the queries both answered; {len(table.tests)} pair(s), "
        f"{_text(CORRECTION)}-corrected. ≈ #k: not distinguishable from the model ranked #k at α = {ALPHA} "
        "(family-wise); apart from all: distinguishable from every other.</p>"
    )


def _table(
    table: Table, card_slugs: list[str], release: PageRelease, notice: str = "", names: Sequence[str] = ()
) -> str:
    heads = ['<th scope="col" data-type="text"><button type="button">model</button></th>']
    heads.append('<th scope="col" data-type="text"><button type="button">source</button></th>')
    for column in table.columns:
        sort = "descending" if column == table.rank_by else "none"
        heads.append(
            f'<th scope="col" data-type="number" aria-sort="{sort}"><button type="button">{_text(column)}</button></th>'
        )
    if table.tests:
        heads.append(f'<th scope="col" data-type="text"><button type="button">{PAIRED_COLUMN}</button></th>')
    ranked = _ranked(table)
    ranks = {row.result: k for k, row in enumerate(ranked, start=1) if row.result is not None}
    body = []
    for k, row in enumerate(ranked, start=1):
        label, source = _label(row, card_slugs, release, names)
        cells = "".join(_cell(row.cells.get(c, Cell(None)), row.kind == "published") for c in table.columns)
        cells += _paired(table, row, ranks) if table.tests else ""
        rank = f'<span class="rank">#{k}</span> ' if table.rank_by else ""
        body.append(
            f'<tr class="{row.kind}" data-rank="{k}"><th scope="row">{rank}{label}</th><td class="text">{source}</td>'
            f"{cells}</tr>"
        )
    intervals = f'<p class="note intervals">Intervals: {_text(table.intervals)}.</p>' if table.intervals else ""
    return (
        f'<section id="{_text(table.key)}"><h2>{_text(table.title)}</h2><p class="note">{_text(table.note)}</p>'
        f"{intervals}{_paired_note(table)}"
        f'<div class="scroll"><table class="sortable" data-table="{_text(table.key)}"><thead><tr>{"".join(heads)}'
        f"</tr></thead><tbody>\n{chr(10).join(body)}\n</tbody></table></div>"
        f"{_elsewhere(table, notice, release)}</section>"
    )


def _elsewhere(table: Table, notice: str, release: PageRelease) -> str:
    """The published rows measured on another release: a block of their own under the ranking, never in it."""
    if not table.elsewhere:
        return ""
    heads = "".join(f'<th scope="col">{_text(c)}</th>' for c in ["model", "source", *table.columns])
    body = []
    for row in table.elsewhere:
        label, source = _label(row, [], release)
        cells = "".join(_cell(row.cells.get(c, Cell(None)), True) for c in table.columns)
        body.append(f'<tr class="published"><th scope="row">{label}</th><td class="text">{source}</td>{cells}</tr>')
    return (
        f'<div class="elsewhere"><h3>Published on another release: not ranked here</h3>'
        f'<p class="note">{_text(notice)}</p><div class="scroll"><table data-table="{_text(table.key)}-elsewhere">'
        f"<thead><tr>{heads}</tr></thead><tbody>\n{chr(10).join(body)}\n</tbody></table></div></div>"
    )


def display_names(results: Sequence[Result]) -> list[str]:
    """Each result's short name, as every table, the plot and the JSON show it (a repeated one numbered)."""
    return unique([r.display_name for r in results])


def plot_png(results: Sequence[Result], names: Sequence[str], page_tables: Sequence[Table]) -> bytes:
    """Each headline figure with its interval, per model: the models in the first ranked table's order (best on
    top), the demo model's and every other result after them."""
    first = next((t for t in page_tables if t.rank_by is not None), None)
    order = [r.result for r in _ranked(first) if r.result is not None] if first is not None else []
    order += [p for p in range(len(results)) if p not in order]
    metrics: dict[str, list[Point]] = {}
    for task in registry.get(results[0].benchmark).task_names:
        headlines = [results[p].headline(task) if task in results[p].tasks else {} for p in order]
        for column in dict.fromkeys(name for cells in headlines for name in cells):
            metrics[column] = [(c.value, c.low, c.high) for c in (h.get(column, Cell(None)) for h in headlines)]
    title = f"{registry.get(results[0].benchmark).title}: headline figures, 95% intervals"
    return compare_png([names[p] for p in order], metrics, title)


def _plot(plot: str) -> str:
    if not plot:
        return ""
    return (
        f'<section id="plot"><h2>Headline figures</h2><figure class="plot"><img src="{_text(plot)}" '
        'alt="each model\'s headline figures with their 95% intervals">'
        "<figcaption>A dot per model at its value, a bar across its 95% interval; best first by the paper's main "
        "figure.</figcaption></figure></section>"
    )


def _model_facts(result: Result) -> list[str]:
    model = result.metrics["model"]
    facts = [(k, model.get(k)) for k in ("backend", "name", "weights_sha256")]
    return [f"{_text(k)} <code>{_text(v)}</code>" for k, v in facts if isinstance(v, str) and v]


def render(
    results: Sequence[Result],
    release: PageRelease,
    card_slugs: list[str],
    figures: list[list[str]],
    page_tables: Sequence[Table],
    names: Sequence[str],
    plot: str,
) -> str:
    """The page: release, the plot, tables (ours, the demo model's and the papers'), each result with its card and
    figures."""
    benchmark = results[0].benchmark
    shown = registry.get(benchmark).title if registry.is_registered(benchmark) else benchmark
    facts = [
        ("release", f"{release.name} {release.version}"),
        ("release manifest sha256", release.manifest_sha256),
    ]
    if release.others:
        facts.append(("demo reference rows from", ", ".join(release.others)))
    items = "".join(f"<dt>{_text(k)}</dt><dd><code>{_text(v)}</code></dd>" for k, v in facts)
    nav = " ".join(f'<a href="#{_text(t.key)}">{_text(t.key)}</a>' for t in page_tables)
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_text(CSP)}">',
        '<meta name="referrer" content="no-referrer">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_text(shown)} {_text(release.version)} leaderboard</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<header><h1>{_text(shown)} {_text(release.version)} leaderboard</h1>",
        f'<dl class="release">{items}</dl>',
        '<p class="note">Rows: models evaluated here; the random demo model (a reference, its numbers meaningless); '
        "and, where the papers measured on this very release, their published baselines; the papers' numbers on their "
        "own data are shown apart under each table, never ranked. Click a column's name to sort by it.</p>",
        f'<nav>{nav} <a href="#results">results</a> <a href="{FILE}">{FILE}</a></nav></header>',
        _plot(plot),
        *(_table(t, card_slugs, release, published_notice(benchmark), names) for t in page_tables),
        '<section id="results"><h2>Results, cards and figures</h2>',
    ]
    for position, result in enumerate(results):
        card = f'<a href="{_text(card_slugs[position])}/{CARD}">card</a>' if card_slugs[position] else "no card"
        kind = " (random demo model: meaningless)" if result.demo else ""
        about = [card, f"release {_text(result.release[1])}", f"tasks {_text(', '.join(result.tasks))}"]
        lines.append(
            f'<article id="result-{position + 1}"><h3 title="{_text(result.model_id)}">{_text(names[position])}'
            f"{_text(kind)}</h3><p><code>{_text(result.model_id)}</code></p>"
            f"<p>{'; '.join(about + _model_facts(result))}</p>"
        )
        images = [
            f'<figure><img src="{_text(src)}" alt="{_text(src.rsplit("/", 1)[-1])}">'
            f"<figcaption>{_text(src.rsplit('/', 1)[-1])}</figcaption></figure>"
            for src in figures[position]
        ]
        lines.append(f'<div class="figures">{"".join(images)}</div></article>')
    lines += ["</section>", f"<script>{SCRIPT}</script>", "</body></html>", ""]
    return "\n".join(lines)


def page_files(results: Sequence[Result]) -> dict[str, bytes]:
    """Every file of the page by its path in DIR: index.html, each result's card and figures, and MARKER."""
    release = page_release(results)
    files: dict[str, bytes] = {}
    card_slugs: list[str] = []
    figures: list[list[str]] = []
    for position, result in enumerate(results):
        slug = _slug(position, result)
        card = result.folder / CARD
        has_card = os.path.lexists(card)
        if has_card:
            files[f"{slug}/{CARD}"] = _asset(card, "card")
        card_slugs.append(slug if has_card else "")
        shown = []
        for rel, data in _figures(result):
            files[f"{slug}/{rel}"] = data
            shown.append(f"{slug}/{rel}")
        figures.append(shown)
    page_tables = tables(results, published=True)
    names = display_names(results)
    files[PLOT] = plot_png(results, names, page_tables)
    files[FILE] = comparison_json(comparison(results, names, page_tables))
    files[INDEX] = render(results, release, card_slugs, figures, page_tables, names, PLOT).encode()
    files[MARKER] = (json.dumps({"files": sorted(files)}, indent=1) + "\n").encode()
    return files


def write_page(out: Path, files: dict[str, bytes]) -> None:
    """Stage the whole page beside `out`, then rename it into place (a page `out` held before is moved aside first
    and removed after): a reader sees the old page or the new one, never half of one."""
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    staging, old = parent / f".staging-{out.name}-{token}", parent / f".old-{out.name}-{token}"
    try:
        for rel, data in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        replacing = out.is_dir() and any(out.iterdir())
        if replacing:
            os.rename(out, old)
        try:
            os.rename(staging, out)  # onto nothing, or an empty folder
        except OSError:
            if replacing:
                os.rename(old, out)  # the page before stays
            raise
        if replacing:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
