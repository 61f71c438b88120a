"""Hostile reference packs, fourth round (issue 56): values that become ids, file names or card cells; templates
with conversions, format specs or nested fields; drafts checked before they are written; no pack command writes
into a release; the reader's FIFOs, deep folders, huge integers and URLs; errors capped per file; one root cause
reported once; hidden characters in translations.

Each case names the file and the field in one line, exits 2, and leaves every file as it was."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows.cli
from data.reference_parse import MAX_ERRORS_PER_FILE
from flows.cli import app
from tests.support.fake_gemini import FakeGemini, json_reply

SpoilFn = Callable[[Path], str]


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows.cli.console, "width", 1000)


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def new_pack(tmp_path: Path, name: str = "pack") -> Path:
    folder = tmp_path / name
    code, output = cli("reference", "init", folder)
    assert code == 0, output
    return folder


def culturebench() -> str:
    return str(Path(sys.executable).parent / "culturebench")


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def edit_rows(path: Path, change: Callable[[list[dict[str, str]]], list[dict[str, str]]]) -> None:
    table = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
    header = list(table[0])
    table = change(table)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    path.write_text(buffer.getvalue(), encoding="utf-8")


def refused(folder: Path, *expected: str) -> list[str]:
    """`reference check` exits 2, every line names the pack, and one line holds all of `expected`."""
    code, output = cli("reference", "check", folder)
    lines = output.strip().splitlines()
    assert code == 2, output
    assert all(line.startswith(str(folder)) for line in lines), output
    assert any(all(e in line for e in expected) for line in lines), output
    return lines


# -- item 2: mixcube.json values that become ids, file names and card cells -----------------------------------


def _label(value: str) -> SpoilFn:
    def spoil(folder: Path) -> str:
        edit_json(folder / "mixcube.json", lambda d: d["ethnicities"][0].update(label=value))
        return "ethnicities.0.label"

    return spoil


def _category(value: str) -> SpoilFn:
    def spoil(folder: Path) -> str:
        def change(d: dict) -> None:
            old = d["categories"][0]
            d["categories"][0] = value
            for table in ("inpainting_prompts", "evaluation_prompts"):
                d[table][value] = d[table].pop(old)

        edit_json(folder / "mixcube.json", change)
        return "categories.0"

    return spoil


def _adjective(value: str) -> SpoilFn:
    def spoil(folder: Path) -> str:
        edit_json(folder / "mixcube.json", lambda d: d["cultures"][0].update(adjective=value))
        return "cultures.0.adjective"

    return spoil


def _alias(value: str) -> SpoilFn:
    def spoil(folder: Path) -> str:
        edit_json(folder / "mixcube.json", lambda d: d["cultures"][3]["label_aliases"].append(value))
        return "cultures.3.label_aliases"

    return spoil


@pytest.mark.parametrize(
    "spoil",
    [
        _label("<script>alert(1)</script>"),
        _label("../../etc"),
        _label("East/Asian"),
        _label("Black Male"),
        _category("Fo/od"),
        _category("=cmd"),
        _adjective('=HYPERLINK("http://x","y")'),
        _adjective("<b>British</b>"),
        _alias("UK\u202e"),
        _alias("| cell |"),
    ],
)
def test_a_mixcube_value_that_would_become_an_id_or_a_card_cell_is_refused(tmp_path: Path, spoil: SpoilFn) -> None:
    folder = new_pack(tmp_path)
    field = spoil(folder)
    refused(folder, "mixcube.json", field)


def test_a_mixcube_build_from_a_pack_with_a_markup_label_is_refused_before_any_work(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    _label("<script>alert(1)</script>")(folder)
    releases = tmp_path / "releases"
    code, output = cli(
        "build", "mixcube", "--demo", "--engine", "local", "--reference", folder, "--release-root", releases,
        "--workspace-root", tmp_path / "ws",
    )  # fmt: skip
    assert code == 2, output
    assert "mixcube.json: ethnicities.0.label" in output, output
    assert not releases.exists()


# -- item 3: templates hold bare named fields only; drafts are checked before they are written ---------------


@pytest.mark.parametrize(
    "template",
    ["{country}の{concept!r:>99999999}", "{concept:{country}}", "{country}{concept:>9}", "{concept.__class__}{country}",
     "{0}{concept}{country}", "{concept} of {country}\u202e"],
)  # fmt: skip
def test_a_descriptor_template_with_a_conversion_spec_or_nested_field_is_refused(tmp_path: Path, template: str) -> None:
    folder = new_pack(tmp_path)
    edit_json(folder / "i18n" / "ja" / "language.json", lambda d: d.update(descriptor_template=template))
    started = time.monotonic()
    refused(folder, "i18n/ja/language.json", "descriptor_template")
    assert time.monotonic() - started < 30  # never formatted: no 100 MB string is built


def test_an_inpainting_prompt_with_a_format_spec_is_refused(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    edit_json(
        folder / "mixcube.json", lambda d: d["inpainting_prompts"].update(Food="{ethnicity!r:>99999999} with food")
    )
    refused(folder, "mixcube.json", "conversion or format spec")


def test_a_concept_translation_with_a_template_spec_is_refused(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)

    def change(table: list[dict[str, str]]) -> list[dict[str, str]]:
        table[0]["descriptor_template"] = "{concept:>999999999} の {country}"
        return table

    edit_rows(folder / "i18n" / "ja" / "concepts.csv", change)
    refused(folder, "i18n/ja/concepts.csv", "row 2", "descriptor_template")


def _hostile_drafts(request: object) -> object:
    """The fake model's answers to `reference translate`: a format-spec template and each country's form with
    markup, a bidi override or ESC; concept texts likewise."""
    from tests.support.fake_gemini import default_responder, forms_answer, translation_answer

    properties = request.schema_properties  # type: ignore[attr-defined]
    if {"descriptor_template", "countries"} <= properties:
        answer = forms_answer(request)  # type: ignore[arg-type]
        answer["descriptor_template"] = "{concept:>999999999} {country}"
        return json_reply(answer)
    if "translations" in properties:
        answer = translation_answer(request)  # type: ignore[arg-type]
        bad = ["<script>x</script>", "train\u202e", "a\x1b[31mb", "=HYPERLINK(1)"]
        for i, item in enumerate(answer["translations"]):
            item["text"] = bad[i % len(bad)]
        return json_reply(answer)
    return default_responder(request)  # type: ignore[arg-type]


def test_hostile_drafts_from_a_model_are_never_written_into_the_pack(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    before = snapshot(folder)
    with FakeGemini(_hostile_drafts) as fake:  # type: ignore[arg-type]
        settings = tmp_path / "gemini.yaml"
        settings.write_text(json.dumps({"gemini": {"base_url": fake.base_url, "max_invalid_answers": 1}}))
        command = [culturebench(), "reference", "translate", str(folder), "--languages", "id"]
        command += ["--config", str(settings)]
        env = {**os.environ, "GEMINI_API_KEY": "fake-key", "COLUMNS": "1000"}
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output, output
    assert snapshot(folder) == before, output  # nothing of the hostile drafts reached the pack
    assert "drafting failed (invalid_output)" in output, output
    code, output = cli("reference", "check", folder)
    assert code == 0, output


def test_a_draft_a_pack_may_not_hold_is_refused_by_the_writer_with_nothing_written(tmp_path: Path) -> None:
    """The writer's own guard, whatever the drafter let through: the pack with the drafts is checked as a whole."""
    from data.reference import load_pack
    from data.reference_models import CountryName
    from data.reference_write import add_language_drafts

    folder = new_pack(tmp_path)
    before = snapshot(folder)
    pack = load_pack(folder)
    good = CountryName(iso2="JP", country="Japan", language_code="ja", name="日本", descriptor_country="日本")
    orphan = good.model_copy(update={"iso2": "ZZ", "country": "Nowhere"})  # no model check: the pack's check
    with pytest.raises(ValueError, match="countries the pack does not hold"):
        add_language_drafts(pack.files, "ja", None, [good, orphan], [])
    assert snapshot(folder) == before


# -- item 5: no pack command writes into a release -------------------------------------------------------------


def fake_release(tmp_path: Path) -> Path:
    release = tmp_path / "releases" / "3xcm" / "0.1.0"
    release.mkdir(parents=True)
    (release / "manifest.json").write_text("{}")
    return release


def test_reference_init_refuses_a_folder_inside_a_release(tmp_path: Path) -> None:
    release = fake_release(tmp_path)
    (release / "emptydir").mkdir()
    code, output = cli("reference", "init", release / "emptydir")
    assert code == 2 and "immutable" in output, output
    assert snapshot(release) == {"manifest.json": hashlib.sha256(b"{}").hexdigest()}


def test_reference_translate_refuses_a_release_s_own_pack(tmp_path: Path) -> None:
    pack = new_pack(tmp_path, "reference_src")
    release = fake_release(tmp_path)
    os.rename(pack, release / "reference")
    before = snapshot(release)
    code, output = cli("reference", "translate", release / "reference", "--languages", "id")
    assert code == 2 and "immutable" in output, output
    assert snapshot(release) == before


def test_reference_init_onto_a_link_to_nothing_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "packs").mkdir()
    link = tmp_path / "packs" / "dangling"
    link.symlink_to(tmp_path / "missing" / "pack")
    code, output = cli("reference", "init", link)
    assert code == 2 and "link to nothing" in output, output
    assert sorted(p.name for p in (tmp_path / "packs").iterdir()) == ["dangling"]
    assert not (tmp_path / "missing").exists()


# -- item 8: the reader ------------------------------------------------------------------------------------------


def test_a_fifo_in_a_pack_is_refused_without_being_opened(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    (folder / "README.md").unlink()
    os.mkfifo(folder / "README.md")
    command = [culturebench(), "reference", "check", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "1000"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "README.md: is not a regular file" in done.stdout + done.stderr


def test_folders_deeper_than_a_pack_are_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    deep = folder / "i18n"
    for _ in range(1200):  # one level at a time: os.makedirs itself recurses
        deep = deep / "d"
        os.mkdir(deep)
    try:
        lines = refused(folder, "i18n/d/d/", "deeper than a pack holds")
        assert len(lines) == 1, lines
    finally:  # shutil.rmtree (pytest's clean-up) recurses too
        while deep != folder / "i18n":
            os.rmdir(deep)
            deep = deep.parent


def test_a_5000_digit_integer_in_a_pack_json_is_one_line(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    path = folder / "audit_prompts.json"
    path.write_text(path.read_text(encoding="utf-8").replace('"version": "1"', '"version": ' + "9" * 5000))
    refused(folder, "audit_prompts.json", "5,000 digits")


# -- item 9 and 16: errors capped per file, the root cause once ----------------------------------------------


def test_a_table_of_many_bad_rows_stops_at_the_cap(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    path = folder / "countries.csv"
    header = path.read_text(encoding="utf-8").splitlines()[0]
    bad = "\n".join(f"=bad{i},XX,bad,qq,Q,qq,xx,R" for i in range(20_000))
    path.write_text(f"{header}\n{bad}\n", encoding="utf-8")
    lines = refused(folder, "countries.csv", f"{MAX_ERRORS_PER_FILE} errors shown")
    own = [line for line in lines if "/countries.csv:" in line and "/i18n/" not in line]
    assert len(own) <= MAX_ERRORS_PER_FILE + 2, len(own)
    assert len(lines) <= MAX_ERRORS_PER_FILE + 3, len(lines)


def test_a_broken_concepts_header_is_reported_once_not_per_translation(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    path = folder / "concepts.csv"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("concept_id", "conceptid", 1), encoding="utf-8")
    lines = refused(folder, "concepts.csv: header")
    assert len(lines) <= 3, lines  # the header, and one line naming the files left unchecked
    assert any("were not checked against it" in line for line in lines), lines


def test_rows_left_behind_by_a_cut_are_one_line_per_file_with_a_count(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    edit_rows(folder / "concepts.csv", lambda t: t[:4])
    edit_rows(folder / "countries.csv", lambda t: [r for r in t if r["name"] in ("Japan", "Kenya", "Spain")])
    edit_json(folder / "pack.json", lambda d: d.pop("demo", None))
    lines = refused(folder, "i18n/ja/concepts.csv", "135 row(s) name concepts the pack does not hold", "prune")
    per_file: dict[str, int] = {}
    for line in lines:
        per_file[line.split(":")[0]] = per_file.get(line.split(":")[0], 0) + 1
    assert set(per_file.values()) == {1}, lines  # one line per file
    assert len(lines) < 40, len(lines)


# -- item 13: hidden characters in a translation ----------------------------------------------------------------


@pytest.mark.parametrize("character", ["\u202e", "\u200b", "\x1b"])
def test_a_translation_holding_a_bidi_override_zwsp_or_esc_is_refused(tmp_path: Path, character: str) -> None:
    folder = new_pack(tmp_path)

    def change(table: list[dict[str, str]]) -> list[dict[str, str]]:
        table[0]["text"] = f"電{character}車"
        return table

    edit_rows(folder / "i18n" / "ja" / "concepts.csv", change)
    refused(folder, "i18n/ja/concepts.csv", "row 2", "text", f"U+{ord(character):04X}")


def test_joiners_that_scripts_need_are_kept(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)

    def change(table: list[dict[str, str]]) -> list[dict[str, str]]:
        table[0]["text"] = "क्\u200dष"  # a ZWJ, as Devanagari writes some conjuncts
        return table

    edit_rows(folder / "i18n" / "hi" / "concepts.csv", change)
    code, output = cli("reference", "check", folder)
    assert code == 0, output


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("s3://bucket/pack", "s3://bucket/pack: cannot read"),
        ("zip://x::http://127.0.0.1:9/", "chained fsspec URL"),
        ("reference://x", "not a storage protocol"),
        ("https://127.0.0.1:9/pack", "https://127.0.0.1:9/pack: cannot read (cannot connect"),
        ("http://169.254.169.254/latest", "link-local"),
        ("http://hub.example.org/base", "plain http://"),
    ],
)
def test_a_pack_url_that_is_refused_or_fails_is_one_line(
    location: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "")  # no credentials reach a real bucket
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, output = cli("reference", "check", location)
    lines = output.strip().splitlines()
    assert code == 2, output
    assert len(lines) == 1 and expected in lines[0], output
    assert "cannot write" not in output
