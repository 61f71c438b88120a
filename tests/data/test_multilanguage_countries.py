"""A country of several languages (issue 57, part 3): Peru speaks Spanish and Quechua. One row of countries.csv per
language; queries per (concept, language); each language its own translations, descriptors and group; the reading of
3XCM §3.2's candidate rules for such a country (docs/reference-packs.md, "Countries of several languages") holds in
the built release, which validates, audits, reassembles, evaluates and exports."""

from __future__ import annotations

import csv
import glob
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from data.reference import load_pack
from flows.cli import app
from tests.support.paths import REPO_ROOT
from tests.support.release_tamper import rehash_manifest

GLOBALRG = REPO_ROOT / "examples" / "packs" / "globalrg"
QUECHUA_ROW = "Peru,PE,peru,qu,Quechua,qu,pe-es,Latin America\n"
# Drafts for the test (awaiting native review): the names with Quechua's genitive -pa as descriptor forms.
QUECHUA_NAMES = {"VN": "Witnam", "ID": "Indunisya", "KE": "Kinya", "GH": "Gana", "PE": "Piruw"}
QUECHUA_CONCEPTS = {13: ("transport", "apakuy"), 14: ("dance", "tusuy"), 16: ("festival", "raymi")}


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def add_quechua(pack: Path) -> None:
    """Peru's second language: its row in countries.csv, and i18n/qu/ by hand."""
    with (pack / "countries.csv").open("a", encoding="utf-8") as handle:
        handle.write(QUECHUA_ROW)
    folder = pack / "i18n" / "qu"
    folder.mkdir()
    language = {
        "code": "qu",
        "name": "Quechua",
        "native_name": "runasimi",
        "descriptor_template": "{country} {concept}",
    }
    (folder / "language.json").write_text(json.dumps(language), encoding="utf-8")
    countries = "iso2,country,name,descriptor_country,review_status\n" + "".join(
        f"{iso},{name},{QUECHUA_NAMES[iso]},{QUECHUA_NAMES[iso]}pa,awaiting_native_review\n"
        for iso, name in (("VN", "Vietnam"), ("ID", "Indonesia"), ("KE", "Kenya"), ("GH", "Ghana"), ("PE", "Peru"))
    )
    (folder / "countries.csv").write_text(countries, encoding="utf-8")
    concepts = "concept_id,concept,text,descriptor_template,review_status\n" + "".join(
        f"{cid},{concept},{text},,awaiting_native_review\n" for cid, (concept, text) in QUECHUA_CONCEPTS.items()
    )
    (folder / "concepts.csv").write_text(concepts, encoding="utf-8")


@pytest.fixture(scope="module")
def peru_release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """The pack (five countries, Peru es+qu, three concepts) and its 3XCM demo release."""
    root = tmp_path_factory.mktemp("peru")
    pack = root / "sea5"
    code, output = cli(
        "reference", "init", pack, "--from", GLOBALRG,
        "--countries", "Indonesia,Ghana,Peru,Kenya,Vietnam", "--concepts", "dance,festival,transport",
    )  # fmt: skip
    assert code == 0, output
    add_quechua(pack)
    code, output = cli("reference", "check", pack, "--for", "3xcm", "--missing", root / "missing.csv")
    assert code == 0, output
    code, output = cli(
        "build", "3xcm", "--demo", "--engine", "local", "--reference", pack, "--workspace-root", root / "ws",
        "--release-root", root / "releases", "--version", "0.1.0-peru",
    )  # fmt: skip
    assert code == 0, output
    yield pack, root / "releases" / "3xcm" / "0.1.0-peru"


def table(release: Path, name: str) -> list[dict]:
    return pq.read_table(sorted(glob.glob(str(release / name / "*.parquet")))).to_pylist()


def test_a_country_row_per_language_is_one_country_of_several_languages(tmp_path: Path) -> None:
    code, output = cli("reference", "init", tmp_path / "p", "--from", GLOBALRG, "--countries", "Peru,Kenya")
    assert code == 0, output
    add_quechua_only_row = (tmp_path / "p" / "countries.csv").read_text(encoding="utf-8") + QUECHUA_ROW
    (tmp_path / "p" / "countries.csv").write_text(add_quechua_only_row, encoding="utf-8")
    pack = load_pack(tmp_path / "p")
    peru = pack.country_by_name()["Peru"]
    assert peru.language_codes == ["es", "qu"] and peru.language_code == "es"
    assert peru.language_groups == ["es", "qu"]
    assert [c.name for c in pack.countries] == ["Kenya", "Peru"]
    assert "qu" in pack.language_codes
    # what a build lacks names Quechua too, until i18n/qu/ exists
    code, output = cli("reference", "check", tmp_path / "p", "--for", "3xcm", "--missing", tmp_path / "m.csv")
    assert code == 2 and "1 language(s)" in output
    rows = list(csv.DictReader((tmp_path / "m.csv").open(encoding="utf-8")))
    assert {"language", "qu"} <= {v for r in rows for v in r.values()} and any(r["language"] == "qu" for r in rows)


def test_a_second_row_that_disagrees_on_the_country_is_refused(tmp_path: Path) -> None:
    code, output = cli("reference", "init", tmp_path / "p", "--from", GLOBALRG, "--countries", "Peru,Kenya")
    assert code == 0, output
    with (tmp_path / "p" / "countries.csv").open("a", encoding="utf-8") as handle:
        handle.write("Peru,PE,peru,qu,Quechua,qu,pe-es,South America\n")  # another region than its first row
    code, output = cli("reference", "check", tmp_path / "p")
    assert code == 2 and "countries.csv" in output and "Peru" in output, output
    assert len(output.strip().splitlines()) <= 3


def test_each_language_has_its_queries_images_and_descriptors(peru_release: tuple[Path, Path]) -> None:
    _, release = peru_release
    images = table(release, "image_metadata")
    peru = [r for r in images if r["country"] == "Peru"]
    quechua = [r for r in peru if r["image_id"].endswith("-nav-qu")]
    assert quechua and all(r["language_code"] == "qu" and r["query_lang"] == "nav" for r in quechua)
    assert {r["concept_in_native"] for r in quechua} <= {text for _, text in QUECHUA_CONCEPTS.values()}
    assert all(r["language_group"] == "es+qu" for r in peru)
    rq2 = table(release, "benchmark")
    by_language = {r["query_language"] for r in rq2 if r["query_country"] == "Peru"}
    assert by_language == {"es", "qu"}
    quechua_text = {r["query_text"] for r in rq2 if r["query_language"] == "qu"}
    assert quechua_text <= {text for _, text in QUECHUA_CONCEPTS.values()}
    rq3 = table(release, "benchmark_cd")
    descriptors = [r["query_text"] for r in rq3 if r["query_language"] == "qu"]
    assert descriptors and all(text.split(" ")[0].endswith("pa") for text in descriptors)  # "{country} {concept}"


def test_the_candidate_rules_hold_by_our_reading(peru_release: tuple[Path, Path]) -> None:
    """RQ2: a correct or irrelevant candidate's country speaks no language of the query's group (so for a Quechua
    query neither Peru, whose languages include qu, nor, for a Spanish one, any Spanish-speaking country)."""
    pack, release = peru_release
    countries = load_pack(pack).country_by_name()
    rq2 = table(release, "benchmark")
    assert rq2
    for row in rq2:
        group = row["query_language"]  # each language its own group in this pack
        for slot in ("semantically_relevant", "non_relevant"):
            candidate = countries[row[f"{slot}_candidate_country"]]
            assert group not in candidate.language_groups, (row["query_image_id"], slot)
        assert row["culturally_relevant_candidate_country"] == row["query_country"]
    rq3 = table(release, "benchmark_cd")
    for row in rq3:
        x, y = countries[row["query_country"]], countries[row["descriptor_country"]]
        assert row["query_language"] not in y.language_groups  # the descriptor country is outside the query's group
        z = countries[row["object_relevant_candidate_country"]]
        assert not set(z.language_groups) & ({row["query_language"]} | set(y.language_groups))
        assert x.name == row["query_country"]


def test_the_release_validates_audits_reassembles(peru_release: tuple[Path, Path], tmp_path: Path) -> None:
    _, release = peru_release
    code, output = cli("validate", release)
    assert code == 0 and "valid" in output, output
    code, output = cli("audit", release)
    assert code == 0 and "no violations" in output, output
    code, output = cli("reassemble", "--pool", release, "--out", tmp_path / "again")
    assert code == 0 and "valid" in output, output


def test_a_forged_language_tag_is_a_violation(peru_release: tuple[Path, Path], tmp_path: Path) -> None:
    """An id tagged `nav-es` names Peru's first language, which is plain `nav`: validate says so, by that image."""
    _, release = peru_release
    forged = tmp_path / "forged"
    shutil.copytree(release, forged)
    part = sorted((forged / "image_metadata").glob("*.parquet"))[0]
    images = pq.read_table(part)
    ids = images.column("image_id").to_pylist()
    at = next(i for i, v in enumerate(ids) if v.endswith("-nav-qu"))
    wrong = ids[at].replace("-nav-qu", "-nav-es")
    ids[at] = wrong
    pq.write_table(images.set_column(images.column_names.index("image_id"), "image_id", pa.array(ids)), part)
    rehash_manifest(forged)
    code, output = cli("validate", forged)
    assert code == 1, output
    assert "image_id_scheme" in output and wrong in output, output


def test_evaluation_and_exports_by_language(peru_release: tuple[Path, Path], tmp_path: Path) -> None:
    _, release = peru_release
    code, output = cli("evaluate", "3xcm", release, "--demo-model", "--task", "all", "--out", tmp_path / "eval")
    assert code == 0, output
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text(encoding="utf-8"))
    languages = {g["group"] for g in metrics["rq2"]["by_language"]}
    assert {"es", "qu"} <= languages
    for harness in ("mteb", "clip-benchmark"):
        code, output = cli("export", release, "--harness", harness, "--out", tmp_path / harness)
        assert code == 0, (harness, output)
    assert (tmp_path / "clip-benchmark" / "3xcm_classification_qu").is_dir()
