"""Reference packs: a benchmark for any countries, languages, concepts and cultures.

`culturebench reference init|check|translate`, every hostile pack refused in one line naming its file and field,
a build refused before its first stage when its pack lacks what it needs (or drafting it with Gemini, against the
fake server), and a release that carries its pack and needs nothing else.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows.cli
from data.reference import DEFAULT_PACK_DIR, PackErrors, default_pack, load_pack
from data.reference_files import MAX_FILE_BYTES
from flows.cli import app
from tests.support.fake_gemini import FakeGemini
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
GLOBALRG = ROOT / "examples" / "packs" / "globalrg"


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's messages are one line each; a terminal of 80 columns would wrap them."""
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


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))


def write_rows(path: Path, table: list[dict[str, str]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(table[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    path.write_text(buffer.getvalue(), encoding="utf-8")


# -- init and check ---------------------------------------------------------------------------------------------


def test_init_writes_the_default_pack_and_check_says_so(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    assert load_pack(folder).digest == default_pack().digest  # byte for byte the shipped pack
    code, output = cli("reference", "check", folder)
    lines = output.splitlines()
    assert code == 0 and lines[0].startswith("valid: ") and len(lines) == 3, output
    assert lines[1:] == ["build 3xcm: has what it needs", "build mixcube: has what it needs"], output
    assert "16 countries" in output and "the shipped default" in output
    edited = rows(folder / "countries.csv")
    edited[0]["region"] = "Somewhere"
    write_rows(folder / "countries.csv", edited)
    code, output = cli("reference", "check", folder)
    assert code == 0 and "the shipped default" not in output  # an edited copy is a pack of its own


def test_init_refuses_a_folder_that_holds_files(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    code, output = cli("reference", "init", tmp_path / "taken")
    assert code == 2 and "not an empty folder" in output
    assert sorted(p.name for p in (tmp_path / "taken").iterdir()) == ["notes.txt"]


def test_the_default_pack_is_read_by_the_same_loader() -> None:
    assert default_pack() == load_pack(DEFAULT_PACK_DIR)
    assert default_pack().is_default and len(default_pack().countries) == 16


def _duplicate_country(folder: Path) -> str:
    table = rows(folder / "countries.csv")
    write_rows(folder / "countries.csv", [*table, {**table[1], "iso2": "ZZ"}])
    return "countries.csv: row 18, name: country 'Australia' repeats row 3"


def _duplicate_iso(folder: Path) -> str:
    table = rows(folder / "countries.csv")
    write_rows(folder / "countries.csv", [*table, {**table[0], "name": "Atlantis", "slug": "atlantis"}])
    return "countries.csv: row 18, iso2: ISO code 'AR' repeats row 2"


def _duplicate_concept(folder: Path) -> str:
    table = rows(folder / "concepts.csv")
    write_rows(folder / "concepts.csv", [*table, {**table[0], "concept": "locomotive"}])
    return "concepts.csv: row 141, concept_id: concept id '0' repeats row 2"


def _unknown_language(folder: Path) -> str:
    table = rows(folder / "countries.csv")
    table[0]["language_code"] = "qq"
    write_rows(folder / "countries.csv", table)
    return "countries.csv: row 2, language_code: 'qq' is not a language code CLDR knows"


def _two_regions(folder: Path) -> str:
    table = rows(folder / "countries.csv")
    write_rows(folder / "countries.csv", [*table, {**table[7], "region": "Oceania"}])  # Japan again
    return "countries.csv: region: country 'Japan' is in two regions: ['East Asia', 'Oceania']"


def _group_without_language(folder: Path) -> str:
    table = rows(folder / "countries.csv")
    table[0]["language_group"] = "latino"
    write_rows(folder / "countries.csv", table)
    return "countries.csv: row 2, language_group: 'latino' names no language"


def _bad_placeholder(folder: Path) -> str:
    path = folder / "i18n" / "de" / "language.json"
    language = json.loads(path.read_text(encoding="utf-8"))
    language["descriptor_template"] = "{concept} aus {cuntry}"
    path.write_text(json.dumps(language), encoding="utf-8")
    return "i18n/de/language.json: descriptor_template: template '{concept} aus {cuntry}' has the placeholder"


def _formula(folder: Path) -> str:
    table = rows(folder / "i18n" / "es" / "countries.csv")
    table[0]["name"] = '=HYPERLINK("http://x")'
    write_rows(folder / "i18n" / "es" / "countries.csv", table)
    return "i18n/es/countries.csv: row 2, name: '=HYPERLINK(\"http://x\")' starts like a spreadsheet formula"


def _link_outside(folder: Path) -> str:
    outside = folder.parent / "secret.csv"
    outside.write_text("concept_id,concept\n0,train\n")
    (folder / "concepts.csv").unlink()
    os.symlink(outside, folder / "concepts.csv")
    return "concepts.csv: is a link that leads outside the pack folder"


def _unknown_file(folder: Path) -> str:
    (folder / "i18n" / "ja" / "concept.csv").write_text("a typo of concepts.csv\n")
    return "i18n/ja/concept.csv: is not a file a pack holds"


def _too_large(folder: Path) -> str:
    with open(folder / "README.md", "ab") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)  # sparse: no need to write 16 MiB
    return f"README.md: {MAX_FILE_BYTES + 1:,} bytes, over the {MAX_FILE_BYTES:,}-byte cap"


def _not_utf8(folder: Path) -> str:
    path = folder / "i18n" / "fr" / "countries.csv"
    path.write_bytes(path.read_bytes().replace("é".encode(), "é".encode("latin-1"), 1))
    return "i18n/fr/countries.csv: not UTF-8 text (byte 0xe9 at offset"


@pytest.mark.parametrize(
    "spoil",
    [
        _duplicate_country,
        _duplicate_iso,
        _duplicate_concept,
        _unknown_language,
        _two_regions,
        _group_without_language,
        _bad_placeholder,
        _formula,
        _link_outside,
        _unknown_file,
        _too_large,
        _not_utf8,
    ],
)
def test_a_hostile_pack_is_refused_one_line_per_error(tmp_path: Path, spoil: object) -> None:
    folder = new_pack(tmp_path)
    expected = spoil(folder)  # type: ignore[operator]
    code, output = cli("reference", "check", folder)
    assert code == 2, output
    lines = output.strip().splitlines()
    assert any(line.startswith(str(folder)) and expected in line for line in lines), output
    assert all(line.startswith(str(folder)) for line in lines), output  # every line names the file
    with pytest.raises(PackErrors):
        load_pack(folder)


def test_a_build_from_a_hostile_pack_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    _duplicate_iso(folder)
    workspace, releases = tmp_path / "ws", tmp_path / "rel"
    code, output = cli(
        "build", "3xcm", "--demo", "--engine", "local", "--reference", folder,
        "--workspace-root", workspace, "--release-root", releases,
    )  # fmt: skip
    assert code == 2 and "ISO code 'AR' repeats row 2" in output, output
    assert not workspace.exists() and not releases.exists()


# -- what a build needs -----------------------------------------------------------------------------------------


def _without_japanese_train_and_kenya(folder: Path) -> None:
    write_rows(
        folder / "i18n" / "ja" / "concepts.csv",
        [r for r in rows(folder / "i18n" / "ja" / "concepts.csv") if r["concept"] not in ("train", "food")],
    )
    write_rows(
        folder / "i18n" / "th" / "countries.csv",
        [r for r in rows(folder / "i18n" / "th" / "countries.csv") if r["country"] != "Kenya"],
    )


def test_a_build_lacking_translations_is_refused_before_the_first_stage(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    _without_japanese_train_and_kenya(folder)
    workspace = tmp_path / "ws"
    code, output = cli(
        "build", "3xcm", "--demo", "--engine", "local", "--reference", folder, "--workspace-root", workspace,
        "--release-root", tmp_path / "rel",
    )  # fmt: skip
    assert code == 2, output
    line = next(line for line in output.splitlines() if "lacks" in line)
    assert "2 translation(s) (concept, language), 1 country name(s), 0 language(s)" in line
    listed = Path(line.split("each listed in ")[1].split(":")[0])
    assert listed.is_relative_to(workspace) and not listed.is_relative_to(folder)  # nothing written into the pack
    missing = {(r["kind"], r["language"], r["concept"], r["country"]) for r in rows(listed)}
    assert missing == {
        ("translation", "ja", "train", ""),
        ("translation", "ja", "food", ""),
        ("country_name", "th", "", "Kenya"),
    }
    assert not (workspace / listed.parent.parent.name / "tables").exists()  # no stage ran


@pytest.mark.slow
def test_a_gemini_build_drafts_what_its_pack_lacks_into_its_own_copy(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    _without_japanese_train_and_kenya(folder)
    before = load_pack(folder).digest
    with FakeGemini() as fake:
        config = tmp_path / "build.json"
        config.write_text(
            json.dumps(
                {
                    "reference": str(folder),
                    "translations": {"backend": "gemini", "gemini": {"base_url": fake.base_url}},
                    "demo_corpus": {
                        "countries": ["Japan", "Thailand", "Kenya", "UK"],
                        "concepts": ["train", "food"],
                        "images_per_query": 1,
                    },
                    "countries": ["Japan", "Thailand", "Kenya", "UK"],
                    "concepts": {"backend": "shipped", "include": ["train", "food"]},
                    "review": {"backend": "label_studio_files", "when_unreviewed": "auto_accept"},
                    "workspace_root": str(tmp_path / "ws"),
                    "release": {"root": str(tmp_path / "rel"), "version": "0.0.1"},
                }
            )
        )
        os.environ["GEMINI_API_KEY"] = "fake-key"
        try:
            code, output = cli("build", "3xcm", "--config", config, "--engine", "local")
        finally:
            del os.environ["GEMINI_API_KEY"]
        prompts = [r.prompt for r in fake.requests]
    assert code == 0, output
    assert load_pack(folder).digest == before  # the source pack is untouched
    release = tmp_path / "rel" / "3xcm" / "0.0.1"
    carried = load_pack(release / "reference")
    assert carried.language_pack("ja").concepts[0].text == "ja:train"  # the draft the build used
    assert carried.language_pack("ja").concepts[0].review_status == "awaiting_native_review"
    assert carried.language_pack("th").countries["Kenya"].descriptor_country.startswith("th:")
    assert any("train" in p for p in prompts)


def test_reference_translate_drafts_a_new_language_into_the_pack(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    with FakeGemini() as fake:
        settings = tmp_path / "gemini.yaml"
        settings.write_text(json.dumps({"gemini": {"base_url": fake.base_url}}))
        os.environ["GEMINI_API_KEY"] = "fake-key"
        try:
            code, output = cli("reference", "translate", folder, "--languages", "id", "--config", settings)
        finally:
            del os.environ["GEMINI_API_KEY"]
    assert code == 0, output
    pack = load_pack(folder)
    indonesian = pack.language_pack("id")
    assert indonesian.language.name == "Indonesian"  # CLDR's name, not the model's
    assert indonesian.countries["Japan"].name == "Jepang"  # CLDR's country name
    assert indonesian.countries["Japan"].review_status == "awaiting_native_review"
    assert len(indonesian.concepts) == len(pack.concepts)
    assert all(entry.review_status == "awaiting_native_review" for entry in indonesian.concepts.values())
    code, output = cli("reference", "check", folder)
    assert code == 0 and "13 languages" in output, output


def test_reference_translate_refuses_an_unknown_language(tmp_path: Path) -> None:
    folder = new_pack(tmp_path)
    code, output = cli("reference", "translate", folder, "--languages", "id,qq")
    assert code == 2 and "qq" in output


# -- a pack no shipped benchmark uses ---------------------------------------------------------------------------


def test_the_globalrg_pack_holds_table_1() -> None:
    pack = load_pack(GLOBALRG)
    assert len(pack.countries) == 49 and len(pack.regions) == 10  # the table lists 49, the text says 50
    assert pack.region_of("Kenya") == pack.region_of("Nigeria") == "Africa"
    assert pack.region_of("Jamaica") == "Caribbean"
    assert pack.info.demo is not None


README_GLOBALRG = (
    "culturebench build 3xcm --demo --engine local --reference examples/packs/globalrg --version 0.1.0-globalrg"
)


@pytest.fixture(scope="module")
def globalrg_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The globalrg demo, built by the README's command as written, in a folder holding a copy of the pack at the
    same relative path; the copy is deleted afterwards: whatever reads the release has only the release."""
    import shlex

    root = tmp_path_factory.mktemp("globalrg")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(line for line in readme.splitlines() if README_GLOBALRG in line)
    command = shlex.split(line.split("#")[0].strip())
    assert command[0].endswith("culturebench"), line
    shutil.copytree(GLOBALRG, root / "examples" / "packs" / "globalrg")
    demo = ROOT / "releases" / "3xcm" / "0.1.0-demo"
    if demo.is_dir():  # after `make demo`, as a user runs it: the README's command takes a version of its own
        shutil.copytree(demo, root / "releases" / "3xcm" / "0.1.0-demo")
    cwd = Path.cwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(app, command[1:])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    shutil.rmtree(root / "examples")
    return root / "releases" / "3xcm" / "0.1.0-globalrg"


@pytest.mark.slow
def test_the_globalrg_demo_builds_for_every_country_and_carries_its_pack(globalrg_release: Path) -> None:
    import pyarrow.parquet as pq

    images = pq.read_table(globalrg_release / "image_metadata", columns=["country"])
    assert set(images["country"].to_pylist()) == {c.name for c in load_pack(GLOBALRG).countries}
    assert load_pack(globalrg_release / "reference").digest == load_pack(GLOBALRG).digest
    manifest = json.loads((globalrg_release / "manifest.json").read_text())
    assert manifest["reference"]["name"] == "globalrg" and manifest["reference"]["default"] is False
    assert all(f"reference/{name}" in manifest["files"] for name in load_pack(GLOBALRG).files.files)
    card = (globalrg_release / "README.md").read_text()
    assert "## Reference pack" in card and "| Jamaica | JM |" in card and "Caribbean" in card
    croissant = json.loads((globalrg_release / "croissant.json").read_text())
    places = {p["name"]: p["containedInPlace"]["name"] for p in croissant["spatialCoverage"]}
    assert places["Kenya"] == "Africa" and len(places) == 49


@pytest.mark.slow
def test_a_moved_release_needs_nothing_but_itself(globalrg_release: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    """validate, evaluate (every task), export, reassemble, takedown and fetch-release on a copy of the release in
    another root, with the pack folder gone (a private copy of the pack, deleted before the commands run)."""
    moved = tmp_path / "elsewhere" / "3xcm" / globalrg_release.name
    shutil.copytree(globalrg_release, moved)
    code, output = cli("validate", moved)
    assert code == 0, output
    code, output = cli(
        "evaluate", "3xcm", moved, "--demo-model", "--task", "all", "--results-root", tmp_path / "results"
    )
    assert code == 0, output
    result = next((tmp_path / "results" / "3xcm" / moved.name).iterdir())
    metrics = json.loads((result / "metrics.json").read_text())
    regions = metrics["retrieval"]["settings"]["regions"]["by_country"]  # diversity@k by Table 1's regions
    assert regions["Kenya"] == "Africa" and regions["Jamaica"] == "Caribbean"
    assert metrics["diversity@5_region"] is not None
    for harness in ("mteb", "clip-benchmark"):
        code, output = cli("export", moved, "--harness", harness, "--out", tmp_path / f"export-{harness}")
        assert code == 0, output
    code, output = cli("reassemble", "--pool", moved, "--out", tmp_path / "reassembled")
    assert code == 0, output
    first = pq.read_table(moved / "image_metadata", columns=["image_id"])["image_id"][0].as_py()
    code, output = cli("takedown", moved, "--reason", "a test", "--image-id", first)
    assert code == 0, output
    patch = moved.parent / moved.name.replace("0.1.0", "0.1.1")  # the takedown's patch release
    assert load_pack(patch / "reference").digest == load_pack(GLOBALRG).digest  # a patch carries the pack on
    code, output = cli("validate", patch)
    assert code == 0, output


# -- MixCuBe with a sixth culture and a fifth ethnicity ---------------------------------------------------------


@pytest.mark.slow
def test_a_mixcube_pack_with_a_sixth_culture_and_a_fifth_ethnicity(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    folder = new_pack(tmp_path)
    path = folder / "mixcube.json"
    mix = json.loads(path.read_text(encoding="utf-8"))
    mix["cultures"].append(
        {"name": "Nigeria", "iso2": "NG", "adjective": "Nigerian", "resource_level": "medium",
         "label_aliases": ["Nigeria", "Nigerian"]}
    )  # fmt: skip
    mix["ethnicities"].append({"label": "MiddleEastern", "prompt_name": "Middle Eastern"})
    mix["food_label_examples"]["Nigeria"] = "Jollof rice"
    path.write_text(json.dumps(mix, ensure_ascii=False, indent=2), encoding="utf-8")
    config = tmp_path / "build.json"
    config.write_text(
        json.dumps({"reference": str(folder), "originals": {"backend": "demo", "per_cell": 1, "categories": ["Food"]}})
    )
    code, output = cli(
        "build", "mixcube", "--demo", "--config", config, "--engine", "local",
        "--workspace-root", tmp_path / "ws", "--release-root", tmp_path / "rel",
    )  # fmt: skip
    assert code == 0, output
    release = tmp_path / "rel" / "mixcube" / "0.1.0-demo"
    rows = pq.read_table(release / "default", columns=["country", "ethnicity"]).to_pylist()
    assert {r["country"] for r in rows} == {c["adjective"] for c in mix["cultures"]}  # six cultures
    assert len(rows) == 6 * (1 + 5)  # each original and its five swaps
    assert "MiddleEastern" in {r["ethnicity"] for r in rows}
    assert "five copies" in (release / "README.md").read_text() and "groups of 6" in (release / "README.md").read_text()
    code, output = cli("validate", release)
    assert code == 0, output
    code, output = cli("evaluate", "mixcube", release, "--demo-model", "--results-root", tmp_path / "results")
    assert code == 0, output
    result = next((tmp_path / "results" / "mixcube" / "0.1.0-demo").iterdir())
    metrics = json.loads((result / "metrics.json").read_text())
    assert set(metrics["accuracy_by_country"]) == {c["adjective"] for c in mix["cultures"]}
    assert list(metrics["accuracy_by_ethnicity"])[-1] == "MiddleEastern"  # in the pack's order, after the four
    code, output = cli(
        "evaluate", "mixcube", release, "--demo-model", "--task", "audit", "--results-root", tmp_path / "results"
    )
    assert code == 0, output


# -- the guide's commands, as written ---------------------------------------------------------------------------
