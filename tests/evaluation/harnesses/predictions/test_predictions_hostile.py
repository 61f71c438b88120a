"""Hostile prediction files, third round (issue 38): `evaluate mixcube RELEASE --predictions FILE`.

- a VLMEvalKit xlsx of a few KB whose references or shared strings would build gigabytes is refused in one line, in
  bounded memory (each memory case runs in a child process under an address-space cap, so a regression fails with a
  MemoryError there instead of taking the machine); a shared-string index of -1 names the cell; DTDs stay refused;
- an answer longer than a model's answer may be (1 MiB) is refused, naming the file and the row or line;
- answers that name more than one culture are counted in metrics.json and noted in the card;
- an lmms-eval samples line nested 100,000 deep is refused in one line; an answer holding U+2028 or U+0085 is read.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.reference import default_pack
from evaluation.harnesses.predictions import MAX_ANSWER_BYTES, PredictionsError
from evaluation.harnesses.predictions import lmms_eval as lmms_reader
from evaluation.harnesses.predictions import vlmevalkit as xlsx_reader
from evaluation.mixcube import task as mx
from tests.evaluation.harnesses.predictions.test_predictions import default_rows, error_line, invoke, write_tsv
from tests.support.paths import REPO_ROOT

MIX = default_pack().mixcube()
ROOT = REPO_ROOT
MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
WORKBOOK = (
    f'<workbook xmlns="{MAIN}" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
    '<sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>'
)
RELS = (
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Target="worksheets/sheet1.xml" Type="http://schemas.openxmlformats.org/'
    'officeDocument/2006/relationships/worksheet"/></Relationships>'
)
#: Headroom over the child's address space after its imports: the fixed code needs a few tens of MB; the old code
#: needed gigabytes for these files (22 GB RSS, 2.3 GB).
MEMORY_HEADROOM = 512 << 20


def inline(reference: str, text: str) -> str:
    return f'<c r="{reference}" t="inlineStr"><is><t>{text}</t></is></c>'


def sheet(rows: list[str]) -> str:
    return f'<worksheet xmlns="{MAIN}"><sheetData>{"".join(rows)}</sheetData></worksheet>'


def header_row(columns: list[str]) -> str:
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return "<row>" + "".join(inline(f"{letters[i]}1", name) for i, name in enumerate(columns)) + "</row>"


def write_xlsx(path: Path, worksheet: str, shared: str | None = None, **members: str) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/workbook.xml", members.pop("workbook", WORKBOOK))
        archive.writestr("xl/_rels/workbook.xml.rels", RELS)
        archive.writestr("xl/worksheets/sheet1.xml", worksheet)
        if shared is not None:
            archive.writestr("xl/sharedStrings.xml", shared)
    return path


def read_capped(path: Path) -> dict[str, Any]:
    """`read_table(path)` in a child process whose address space is capped at its size after the imports plus
    `MEMORY_HEADROOM`: the refusal's message, the rows read, or the error that ended it, and the peak RSS."""
    script = textwrap.dedent(
        """
        import json, resource, sys
        from pathlib import Path
        from evaluation.harnesses.predictions import PredictionsError
        from evaluation.harnesses.predictions import vlmevalkit

        def vm_bytes() -> int:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
            raise RuntimeError("no VmSize")

        cap = vm_bytes() + int(sys.argv[2])
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        out = {}
        try:
            out["rows"] = len(vlmevalkit.read_table(Path(sys.argv[1])))
        except PredictionsError as exc:
            out["refused"] = str(exc)
        # VmHWM, not ru_maxrss: after fork and exec, ru_maxrss keeps the forking parent's peak (a large pytest).
        hwm = [line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:")]
        out["peak_rss_mb"] = int(hwm[0].split()[1]) / 1024
        print(json.dumps(out))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(path), str(MEMORY_HEADROOM)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]  # a MemoryError traceback: the file took the memory
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def refused(path: Path, needle: str) -> str:
    with pytest.raises(PredictionsError) as caught:
        xlsx_reader.read_table(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path)) and needle in message, message
    return message


# -- item 2: xlsx that takes all memory -----------------------------------------------------------------------------
def test_a_cell_reference_far_past_xfd_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """One cell `r="ZZZZZZZ999"` made the reader build a row 26^7 wide (killed at 22 GB)."""
    path = write_xlsx(
        tmp_path / "col_MixCuBe.xlsx",
        sheet([header_row(["index", "prediction"]), "<row>" + inline("ZZZZZZZ999", "Korean") + "</row>"]),
    )
    result = read_capped(path)
    assert "ZZZZZZZ999" in result.get("refused", "") and "past XFD" in result["refused"], result
    # just past XFD is refused too; XFD itself is a worksheet's last column
    refused(write_xlsx(tmp_path / "xfe_MixCuBe.xlsx", sheet(["<row>" + inline("XFE1", "x") + "</row>"])), "XFE1")
    wide = xlsx_reader.read_table(write_xlsx(tmp_path / "x_MixCuBe.xlsx", sheet([f"<row>{inline('XFD1', 'x')}</row>"])))
    assert len(wide[0]) == 16384 and wide[0][-1] == "x"


def test_a_cell_past_the_header_is_refused_naming_it(tmp_path: Path) -> None:
    path = write_xlsx(
        tmp_path / "m_MixCuBe.xlsx",
        sheet([header_row(["index", "prediction"]), "<row>" + inline("A2", "0") + inline("C2", "stray") + "</row>"]),
    )
    message = refused(path, "cell C2 lies past the header")
    assert "last column is B" in message


def test_rows_padded_to_a_wide_header_are_bounded(tmp_path: Path) -> None:
    """A header as wide as a worksheet, then many rows of one cell in its last column: each row pads to 16,384
    cells, so 100,000 such rows (a few MB of XML) would be 13 GB of row lists without the bound on cells built."""
    rows = ["<row>" + inline("XFD1", "h") + "</row>"] + [
        f'<row><c r="XFD{n}"><v>1</v></c></row>' for n in range(2, 100_002)
    ]
    path = write_xlsx(tmp_path / "wide_MixCuBe.xlsx", sheet(rows))
    result = read_capped(path)
    assert "more than" in result.get("refused", "") and "cells" in result["refused"], result


@pytest.mark.slow
def test_a_shared_strings_part_of_millions_of_tiny_items_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """A 331 KB xlsx whose sharedStrings.xml holds 127 MiB of tiny <si> entries took 2.3 GB."""
    path = tmp_path / "strings_MixCuBe.xlsx"
    item = b"<si><t>a</t></si>"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/workbook.xml", WORKBOOK)
        archive.writestr("xl/_rels/workbook.xml.rels", RELS)
        archive.writestr("xl/worksheets/sheet1.xml", sheet([header_row(["index", "prediction"])]))
        with archive.open("xl/sharedStrings.xml", "w") as member:  # streamed: the test holds 1 MiB at a time
            member.write(f'<sst xmlns="{MAIN}">'.encode())
            chunk = item * ((1 << 20) // len(item))
            for _ in range(127):
                member.write(chunk)
            member.write(b"</sst>")
    assert path.stat().st_size < 1 << 20
    result = read_capped(path)
    assert "sharedStrings.xml holds more than" in result.get("refused", ""), result
    assert result["peak_rss_mb"] < 400, result


def test_a_negative_shared_string_index_is_refused_naming_the_cell(tmp_path: Path) -> None:
    """`<c t="s"><v>-1</v>` took the last shared string (Python's negative index)."""
    shared = f'<sst xmlns="{MAIN}"><si><t>index</t></si><si><t>prediction</t></si><si><t>Korean</t></si></sst>'
    rows = [
        '<row><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row>',
        '<row><c r="A2"><v>0</v></c><c r="B2" t="s"><v>-1</v></c></row>',
    ]
    message = refused(write_xlsx(tmp_path / "m_MixCuBe.xlsx", sheet(rows), shared), "cell B2")
    assert "'-1'" in message and "3 shared strings" in message
    rows[1] = '<row><c r="A2"><v>0</v></c><c r="B2" t="s"><v>2</v></c></row>'  # a real index still reads
    table = xlsx_reader.read_table(write_xlsx(tmp_path / "ok_MixCuBe.xlsx", sheet(rows), shared))
    assert table == [["index", "prediction"], ["0", "Korean"]]


#: case -> (the part's DTD, what its text then says: the entity, referenced where a cell's text would be)
DTD_CASES = {
    "xxe": ('<!DOCTYPE w [<!ENTITY x SYSTEM "file:///etc/passwd">]>', "&x;"),
    "external-dtd": ('<!DOCTYPE w SYSTEM "http://127.0.0.1:9/evil.dtd">', "prediction"),
    "billion-laughs": (
        '<!DOCTYPE w [<!ENTITY a "aaaaaaaaaa">'
        + "".join(f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(9))
        + "]>",
        "&j;",  # 10^9 x "aaaaaaaaaa"
    ),
}


@pytest.mark.parametrize("case", sorted(DTD_CASES))
@pytest.mark.parametrize("part", ["workbook", "sheet"])
def test_a_dtd_in_any_part_is_refused(tmp_path: Path, case: str, part: str) -> None:
    """Kept from before (a referenced external entity and entity expansion were refused): no entity is resolved or
    expanded, and now any DTD (no spreadsheet part has one) is refused, unreferenced or external ones included."""
    doctype, text = DTD_CASES[case]
    if part == "workbook":
        worksheet = sheet([header_row(["index", "prediction"])])
        members = {"workbook": doctype + WORKBOOK.replace("<sheets>", f"<fileVersion/>{text}<sheets>")}
    else:
        worksheet = doctype + sheet([header_row(["index", text])])
        members = {}
    path = write_xlsx(tmp_path / "dtd_MixCuBe.xlsx", worksheet, **members)
    with pytest.raises(PredictionsError) as caught:
        xlsx_reader.read_table(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)
    assert "root:" not in str(caught.value)


def test_a_zip_directory_larger_than_any_spreadsheets_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """zipfile keeps ~400 bytes per 46-byte directory entry: a 256 MiB file of entries would take gigabytes."""
    path = write_xlsx(tmp_path / "many_MixCuBe.xlsx", sheet([header_row(["index", "prediction"])]))
    with zipfile.ZipFile(path, "a") as archive:
        for n in range(25_000):
            archive.writestr(f"m{n}", b"")
    refused(path, "zip directory")


def test_a_real_spreadsheet_still_reads(tmp_path: Path) -> None:
    """Shared and inline strings, rich text with a phonetic run, `_xHHHH_` escapes, a cell without a reference,
    an empty row and a shorter row."""
    shared = (
        f'<sst xmlns="{MAIN}"><si><t>index</t></si><si><t>prediction</t></si>'
        "<si><r><t>Kor</t></r><r><t>ean</t></r><rPh><t>ignored</t></rPh></si><si><t>_x0041_ text</t></si></sst>"
    )
    rows = [
        '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c><c t="str"><v>note</v></c></row>',
        '<row r="2"><c r="A2"><v>0</v></c><c r="B2" t="s"><v>2</v></c><c r="C2" t="s"><v>3</v></c></row>',
        '<row r="3"/>',
        '<row r="4"><c r="A4"><v>1</v></c><c r="B4" t="inlineStr"><is><t>Japan</t></is></c></row>',
    ]
    table = xlsx_reader.read_table(write_xlsx(tmp_path / "m_MixCuBe.xlsx", sheet(rows), shared))
    assert table == [["index", "prediction", "note"], ["0", "Korean", "A text"], [], ["1", "Japan"]]


# -- item 11: answers' size, answers naming every culture ---------------------------------------------------------
def synthetic_rows() -> pa.Table:
    return pa.table(
        {"sample_id": ["s-0", "s-1"], "category": ["Food", "Clothes"], "image_sha256": ["a" * 64, "b" * 64]}
    )


def test_the_answer_cap_is_a_models_answer_cap() -> None:
    from evaluation.models.vlm.openai import OpenAIChatConfig

    assert OpenAIChatConfig.model_fields["max_response_bytes"].default == MAX_ANSWER_BYTES


@pytest.mark.parametrize("suffix", [".tsv", ".xlsx"])
def test_an_answer_longer_than_a_models_is_refused_naming_the_row(tmp_path: Path, suffix: str) -> None:
    rows = synthetic_rows()
    at_cap = "é" * (MAX_ANSWER_BYTES // 2)  # the cap is on UTF-8 bytes, not characters
    over = at_cap + "x"

    def file(answer: str, name: str) -> Path:
        if suffix == ".tsv":
            return write_tsv(
                tmp_path / name, ["index", "sample_id", "prediction"], [[0, "s-0", "Korea"], [1, "s-1", answer]]
            )
        body = [header_row(["index", "sample_id", "prediction"])] + [
            f"<row>{inline(f'A{n + 2}', str(n))}{inline(f'B{n + 2}', f's-{n}')}{inline(f'C{n + 2}', text)}</row>"
            for n, text in enumerate(["Korea", answer])
        ]
        return write_xlsx(tmp_path / name, sheet(body))

    assert xlsx_reader.read_predictions(file(at_cap, f"ok_MixCuBe{suffix}"), rows)["s-1"] == at_cap
    path = file(over, f"big_MixCuBe{suffix}")
    with pytest.raises(PredictionsError) as caught:
        xlsx_reader.read_predictions(path, rows)
    message = str(caught.value)
    assert message.startswith(f"{path}: row 3 (index 1, sample 's-1'): the answer is longer than 1 MiB"), message


def test_an_lmms_eval_answer_longer_than_a_models_is_refused_naming_the_line(tmp_path: Path) -> None:
    from tests.evaluation.harnesses.predictions.test_lmms_eval import SAMPLES, sample_line, write_samples

    rows = synthetic_rows()
    path = write_samples(
        tmp_path / SAMPLES, [sample_line(0, "s-0", "Korea"), sample_line(1, "s-1", "x" * (MAX_ANSWER_BYTES + 1))]
    )
    with pytest.raises(PredictionsError) as caught:
        lmms_reader.read_predictions(path, rows)
    assert str(caught.value).startswith(f"{path}: line 2 (doc_id 1): the answer is longer than 1 MiB")


@pytest.mark.slow
def test_twenty_huge_answers_are_refused_by_evaluate_and_nothing_is_written(
    small_releases: dict[str, Path], tmp_path: Path
) -> None:
    release = small_releases["mixcube"]
    rows = [
        [i, r["sample_id"], r["country"] + " " + "x" * (2 * MAX_ANSWER_BYTES)]
        for i, r in enumerate(default_rows(release))
    ]
    file = write_tsv(tmp_path / "m_MixCuBe.tsv", ["index", "sample_id", "prediction"], rows)
    out = tmp_path / "out"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--out", str(out))
    assert result.exit_code == 2, result.output
    line = error_line(result.output, "longer than 1 MiB")
    assert "row 2 (index 0" in " ".join(result.output.split()) and file.name in line
    assert not out.exists()


def per_image(answers: list[tuple[str | None, str, str | None]]) -> pa.Table:
    """Per-image rows of (answer, culture, error), scored by §3's rule as `evaluate_images` scores them."""
    rows = []
    for n, (answer, country, error) in enumerate(answers):
        correct = None if error else mx.is_correct(answer or "", country, MIX)
        rows.append({"sample_id": f"s-{n}", "original_id": f"o-{n}", "country": country, "category": "Clothes",
                     "ethnicity": "original", "placeholder": False, "answer": answer, "correct": correct,
                     "error": error})  # fmt: skip
    names = [f.name for f in mx.MIXCUBE_PER_IMAGE]
    return pa.Table.from_pylist([{k: r.get(k) for k in names} for r in rows], schema=mx.MIXCUBE_PER_IMAGE)


def test_answers_naming_several_cultures_are_counted() -> None:
    every = ", ".join(c.adjective for c in MIX.cultures)
    culture = MIX.cultures[0].adjective
    other = MIX.cultures[1].name
    table = per_image(
        [
            (every, culture, None),  # names all: correct by §3, counted
            (f"{culture} or maybe {other}", MIX.cultures[2].adjective, None),  # two, both wrong: counted
            (f"It is {culture}.", culture, None),  # one: not counted
            (every, culture, "timeout"),  # unscored: not counted
        ]
    )
    metrics = mx.summary(table, MIX)
    assert metrics["answers_naming_several_cultures"] == 2
    assert metrics["correct_naming_several_cultures"] == 1
    assert mx.several_cultures_warnings(metrics) and not mx.several_cultures_warnings(
        mx.summary(table.slice(2, 1), MIX)
    )


def test_an_answer_naming_every_culture_scores_everything_and_the_card_says_so(
    small_releases: dict[str, Path], tmp_path: Path
) -> None:
    release = small_releases["mixcube"]
    every = " ".join(c.name for c in MIX.cultures) + " " + " ".join(c.adjective for c in MIX.cultures)
    rows = [[i, r["sample_id"], every] for i, r in enumerate(default_rows(release))]
    file = write_tsv(tmp_path / "m_MixCuBe.tsv", ["index", "sample_id", "prediction"], rows)
    out = tmp_path / "out"
    result = invoke("evaluate", "mixcube", str(release), "--predictions", str(file), "--out", str(out))
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["accuracy"] == 1.0  # the paper's rule allows it ...
    assert metrics["answers_naming_several_cultures"] == metrics["answered"] == len(rows)  # ... and it is counted
    assert metrics["correct_naming_several_cultures"] == len(rows)
    card = " ".join((out / "README.md").read_text().split())
    assert f"{len(rows)} of {len(rows)} scored answers name more than one culture" in card
    # one culture per answer: no note
    single = write_tsv(
        tmp_path / "s_MixCuBe.tsv",
        ["index", "prediction"],
        [[i, r["country"]] for i, r in enumerate(default_rows(release))],
    )
    quiet = tmp_path / "quiet"
    assert invoke("evaluate", "mixcube", str(release), "--predictions", str(single), "--out", str(quiet)).exit_code == 0
    assert json.loads((quiet / "metrics.json").read_text())["answers_naming_several_cultures"] == 0
    assert "more than one culture" not in (quiet / "README.md").read_text()
    assert pq.read_table(quiet / "per_query.parquet").num_rows == len(rows)


# -- item 14: lmms-eval samples files ------------------------------------------------------------------------------
def test_a_samples_line_nested_100000_deep_is_one_line_naming_the_line(tmp_path: Path) -> None:
    from tests.evaluation.harnesses.predictions.test_lmms_eval import SAMPLES, sample_line, write_samples

    path = write_samples(tmp_path / SAMPLES, [sample_line(0, "s-0", "Korea"), "[" * 100_000])
    with pytest.raises(PredictionsError) as caught:
        lmms_reader.read_predictions(path, synthetic_rows())
    message = str(caught.value)
    assert message.startswith(f"{path}: line 2 is not JSON") and "\n" not in message, message
    # so is a results.json beside it: no model name from it, and no traceback
    results = path.with_name(SAMPLES.replace("_samples_culturebench_mixcube.jsonl", "_results.json"))
    results.write_text('{"model_name": ' + "[" * 100_000)
    assert lmms_reader.model_name(path) is None


def test_a_samples_line_nested_deep_is_refused_by_evaluate(small_releases: dict[str, Path], tmp_path: Path) -> None:
    from tests.evaluation.harnesses.predictions.test_lmms_eval import SAMPLES, write_samples

    path = write_samples(tmp_path / SAMPLES, ["[" * 100_000])
    out = tmp_path / "out"
    result = invoke("evaluate", "mixcube", str(small_releases["mixcube"]), "--predictions", str(path),
                    "--predictions-format", "lmms-eval", "--predictions-model", "m", "--out", str(out))  # fmt: skip
    assert result.exit_code == 2, result.output
    error_line(result.output, "line 1 is not JSON")
    assert not out.exists()


@pytest.mark.parametrize("breaker", ["\u2028", "\u2029", "\u0085"])
def test_an_answer_holding_a_unicode_line_break_is_read(tmp_path: Path, breaker: str) -> None:
    """lmms-eval writes ensure_ascii=False: these stay raw in the line, which str.splitlines() would split."""
    from tests.evaluation.harnesses.predictions.test_lmms_eval import SAMPLES, sample_line, write_samples

    answer = f"Korea{breaker}or Japan"
    path = write_samples(tmp_path / SAMPLES, [sample_line(0, "s-0", answer), sample_line(1, "s-1", "UK")])
    assert breaker in path.read_text(encoding="utf-8")  # written raw, as lmms-eval does
    assert lmms_reader.read_predictions(path, synthetic_rows()) == {"s-0": answer, "s-1": "UK"}


def test_memory_cap_helper_really_caps() -> None:
    """The child's cap is real: a 1 GiB allocation under it is a MemoryError (so the memory tests can fail)."""
    script = textwrap.dedent(
        """
        import resource, sys
        from pathlib import Path
        import evaluation.harnesses.predictions.vlmevalkit
        size = next(int(l.split()[1]) * 1024 for l in Path("/proc/self/status").read_text().splitlines()
                    if l.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (size + int(sys.argv[1]), size + int(sys.argv[1])))
        try:
            bytearray(1 << 30)
        except MemoryError:
            print("capped")
        """
    )
    run = subprocess.run([sys.executable, "-c", script, str(MEMORY_HEADROOM)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert run.stdout.strip() == "capped", run.stderr[-2000:]
    assert resource.RLIMIT_AS  # the cap is set in the child only
