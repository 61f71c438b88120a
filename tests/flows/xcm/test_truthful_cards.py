"""Issue 57 part 9: a release card tells the truth about a pack of one's own. It states where the translations came
from, per language (CLDR, drafted, filled by sheet, by hand; native-reviewed, with the most reviewers), where the
concept list came from (the pack's concepts.csv), and says "shipped" of nothing but the default pack."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows.cli.output
from data.pack_entries import provenance_counts
from data.reference import load_pack
from flows.cli import app
from tests.support.paths import REPO_ROOT

GLOBALRG = REPO_ROOT / "examples" / "packs" / "globalrg"
DEFAULT_CARD = REPO_ROOT / "releases" / "3xcm" / "0.1.0-demo" / "README.md"


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows.cli.output.console, "width", 1000)


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def origins_table(card: str) -> dict[str, dict[str, str]]:
    """The card's translation-origins table, by language."""
    start = card.index("Where its translations came from")
    lines = [line for line in card[start:].splitlines()[1:] if line.startswith("|")]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    header, body = rows[0], rows[2:]
    return {cells[0]: dict(zip(header, cells, strict=True)) for cells in body}


@pytest.fixture(scope="module")
def own_release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A pack cut from globalrg with one Swahili concept text removed and filled back by a sheet, and its release."""
    root = tmp_path_factory.mktemp("own")
    pack = root / "two"
    code, output = cli(
        "reference", "init", pack, "--from", GLOBALRG, "--countries", "Peru,Kenya", "--concepts", "dance,festival"
    )
    assert code == 0, output
    concepts = pack / "i18n" / "sw" / "concepts.csv"
    rows = list(csv.DictReader(concepts.open(encoding="utf-8")))
    kept = [r for r in rows if r["concept"] != "dance"]
    with concepts.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
    sheet = root / "sheet.csv"
    code, output = cli("reference", "sheet", pack, "--out", sheet)
    assert code == 0, output
    filled = list(csv.DictReader(sheet.open(encoding="utf-8")))
    for row in filled:
        if row["status"] == "missing":
            row["translation"], row["reviewer"] = "ngoma", "amina"
    with sheet.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(filled[0]))
        writer.writeheader()
        writer.writerows(filled)
    code, output = cli("reference", "fill", pack, sheet)
    assert code == 0, output
    code, output = cli(
        "build", "3xcm", "--demo", "--reference", pack, "--engine", "local",
        "--workspace-root", root / "ws", "--release-root", root / "rel",
    )  # fmt: skip
    assert code == 0, output
    return pack, root / "rel" / "3xcm" / "0.1.0-demo"


def test_the_card_states_each_languages_translation_origins(own_release: tuple[Path, Path]) -> None:
    pack_dir, release = own_release
    card = (release / "README.md").read_text(encoding="utf-8")
    table = origins_table(card)
    pack = load_pack(pack_dir)
    expected = provenance_counts(pack, sorted(pack.languages))
    assert set(table) == set(expected)
    for code, counts in expected.items():
        assert int(table[code]["entries"]) == counts["entries"]
        assert int(table[code]["native-reviewed"]) == counts["reviewed"]
    assert int(table["sw"]["filled by sheet"]) == 1  # the one entry the sheet filled
    assert int(table["es"]["filled by sheet"]) == 0
    assert sum(int(row["entries"]) for row in table.values()) == sum(c["entries"] for c in expected.values())


def test_the_card_says_where_the_concepts_came_from_and_shipped_of_nothing(own_release: tuple[Path, Path]) -> None:
    _, release = own_release
    card = (release / "README.md").read_text(encoding="utf-8")
    assert "concepts from the reference pack's concept list (`concepts.csv` of `two`" in card
    assert re.search(r"shipped", card, re.IGNORECASE) is None, [
        line for line in card.splitlines() if "shipped" in line.lower()
    ]
    code, output = cli("validate", release)
    assert code == 0, output  # the card's second table is not taken for the pack's places


def test_the_default_card_keeps_its_wording() -> None:
    if not DEFAULT_CARD.is_file():
        pytest.skip("needs the demo release (make demo)")
    card = DEFAULT_CARD.read_text(encoding="utf-8")
    assert "Translations are the shipped drafts, awaiting native review." in card
    assert "Where its translations came from" not in card
