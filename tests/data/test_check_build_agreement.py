"""`reference check DIR --for 3xcm|mixcube` says what the build says: for packs cut with random gaps from a seed
(whole languages, rows of a language's concepts.csv or countries.csv, a null RQ3 descriptor template, fewer of the
pack's own countries or concepts, MixCuBe pieces), the check exits 2 exactly when the build's own pre-flight (what
`culturebench build B --demo --reference DIR` runs before its first stage) refuses, and for 3XCM the check's
--missing file lists the rows the build's reference_missing.csv lists."""

from __future__ import annotations

import csv
import io
import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data.reference import load_pack
from flows import benchmarks
from flows.cli import app
from flows.cli.errors import as_cli_error
from flows.engine.config import build_config
from tests.support.paths import REPO_ROOT

GLOBALRG = REPO_ROOT / "examples" / "packs" / "globalrg"
# Two complete packs to cut gaps into: one with mixcube.json (two of its cultures are among the countries), one
# without (a MixCuBe build of it is refused whatever else it has).
BASES = {
    "shipped": (None, "UK,USA,Japan,Spain,Kenya", "dance,food,wedding,market"),
    "globalrg": (GLOBALRG, "Peru,Kenya,Japan,Germany", "dance,festival,transport"),
}
SEEDS = list(range(16))
GAPLESS = 0  # the seed that leaves its pack whole: both must agree that it builds


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    made = {}
    for name, (source, countries, concepts) in BASES.items():
        folder = root / name
        args = ["reference", "init", folder, "--countries", countries, "--concepts", concepts]
        code, output = cli(*args, *(["--from", source] if source else []))
        assert code == 0, output
        made[name] = folder
    assert (made["shipped"] / "mixcube.json").is_file() and not (made["globalrg"] / "mixcube.json").exists()
    return made


# --- the generator --------------------------------------------------------------------------------------------------


def _drop_rows(path: Path, rng: random.Random) -> str | None:
    """Remove one or more data rows of a CSV (never its header)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if len(lines) < 2:
        return None
    body = lines[1:]
    gone = set(rng.sample(range(len(body)), rng.randint(1, len(body))))
    path.write_text(lines[0] + "".join(row for i, row in enumerate(body) if i not in gone), encoding="utf-8")
    return f"{len(gone)} row(s) of {path.parent.name}/{path.name}"


def _null_template(folder: Path) -> str:
    path = folder / "language.json"
    language = json.loads(path.read_text(encoding="utf-8"))
    language["descriptor_template"] = None
    path.write_text(json.dumps(language, ensure_ascii=False), encoding="utf-8")
    return f"{folder.name}'s descriptor_template"


def _drop_countries(pack: Path, rng: random.Random) -> str:
    """Leave some of the pack's own countries out of countries.csv (and its demo selection), then prune the i18n/
    rows naming them as `reference prune` does: perhaps down to one country, which no 3XCM build takes."""
    lines = (pack / "countries.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    kept = sorted(rng.sample(range(1, len(lines)), rng.randint(1, len(lines) - 2)))
    (pack / "countries.csv").write_text(lines[0] + "".join(lines[i] for i in kept), encoding="utf-8")
    info = json.loads((pack / "pack.json").read_text(encoding="utf-8"))
    names = {lines[i].split(",")[0] for i in kept}
    if info["demo"]["countries"] is not None:
        info["demo"]["countries"] = [c for c in info["demo"]["countries"] if c in names]
    (pack / "pack.json").write_text(json.dumps(info, ensure_ascii=False), encoding="utf-8")
    code, output = cli("reference", "prune", pack)
    assert code == 0, output
    return f"countries.csv down to {sorted(names)}"


def _drop_concepts(pack: Path, rng: random.Random, keep: int | None = None) -> str:
    """Leave some of the pack's concepts out of concepts.csv (and its demo selection), keeping one at least (or
    `keep`); then prune as `reference prune` does."""
    lines = (pack / "concepts.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    count = rng.randint(1, len(lines) - 2) if keep is None else keep
    kept = sorted(rng.sample(range(1, len(lines)), count))
    (pack / "concepts.csv").write_text(lines[0] + "".join(lines[i] for i in kept), encoding="utf-8")
    info = json.loads((pack / "pack.json").read_text(encoding="utf-8"))
    names = {next(csv.reader([lines[i]]))[1] for i in kept}
    info["demo"]["concepts"] = [c for c in info["demo"]["concepts"] if c in names]
    if len(info["demo"]["concepts"]) < 2:  # a demo selection names two at least; without one, a demo takes all
        info["demo"] = None
    (pack / "pack.json").write_text(json.dumps(info, ensure_ascii=False), encoding="utf-8")
    code, output = cli("reference", "prune", pack)
    assert code == 0, output
    return f"concepts.csv down to {sorted(names)}"


def _cut_mixcube(pack: Path, rng: random.Random) -> str:
    path = pack / "mixcube.json"
    mix = json.loads(path.read_text(encoding="utf-8"))
    piece = rng.choice(["file", "culture", "culture", "ethnicity", "category", "category", "prompt"])
    if piece == "file":
        path.unlink()
        return "mixcube.json"
    if piece == "culture":
        mix["cultures"].pop(rng.randrange(len(mix["cultures"])))
    elif piece == "ethnicity":
        mix["ethnicities"].pop(rng.randrange(len(mix["ethnicities"])))
    elif piece == "category":  # with its prompts: still a MixCuBe reference, of fewer categories
        category = mix["categories"].pop(rng.randrange(len(mix["categories"])))
        for table in ("inpainting_prompts", "evaluation_prompts"):
            mix[table].pop(category)
    else:  # a category's prompt alone: mixcube.json no longer parses
        mix["inpainting_prompts"].pop(rng.choice(mix["categories"]))
    path.write_text(json.dumps(mix, ensure_ascii=False), encoding="utf-8")
    return f"mixcube.json's {piece}"


def _gaps_for_3xcm(pack: Path, rng: random.Random) -> list[str]:
    """A few of the gaps a 3XCM build may trip on: perhaps fewer of the pack's own countries or concepts (first:
    they prune i18n/), then some languages' folders, rows or RQ3 templates."""
    gaps = []
    if rng.random() < 0.3:
        gaps.append(_drop_countries(pack, rng))
    if rng.random() < 0.2:
        gaps.append(_drop_concepts(pack, rng))
    in_languages: list[Callable[[], str | None]] = []
    for folder in sorted((pack / "i18n").iterdir()):
        in_languages.append(lambda folder=folder: shutil.rmtree(folder) or f"i18n/{folder.name}/")
        for name in ("concepts.csv", "countries.csv"):
            in_languages.append(lambda path=folder / name: _drop_rows(path, rng) if path.exists() else None)
        in_languages.append(lambda folder=folder: _null_template(folder) if folder.exists() else None)
    chosen = sorted(rng.sample(range(len(in_languages)), rng.randint(0 if gaps else 1, 3)))
    return gaps + [g for g in (in_languages[i]() for i in chosen) if g]


def generate(seed: int, bases: dict[str, Path], into: Path) -> tuple[Path, list[str]]:
    """A copy of a complete base pack with random gaps drawn from `seed` (none for GAPLESS), and what was cut: a
    few of the 3XCM gaps, MixCuBe pieces, or both."""
    rng = random.Random(seed)
    base = "shipped" if seed % 2 == 0 else "globalrg"
    pack = into / f"pack-{seed}"
    shutil.copytree(bases[base], pack)
    gaps: list[str] = []
    if seed == GAPLESS:
        return pack, gaps
    cut = rng.choice(["3xcm", "mixcube", "both"]) if (pack / "mixcube.json").exists() else "3xcm"
    while not gaps:
        if cut != "mixcube":
            gaps += _gaps_for_3xcm(pack, rng)
        if cut != "3xcm":
            gaps.append(_cut_mixcube(pack, rng))
    return pack, gaps


# --- the two answers ------------------------------------------------------------------------------------------------


@dataclass
class Answer:
    refused: bool
    missing: set[tuple[str, ...]] | None  # the rows of the missing file, None where none was written
    line: str = ""
    # Where the build refused: "config" (its config, naming the pack, or its preflight) or "pack" (its copy of the
    # pack checked before the first stage, which writes reference_missing.csv); None where it would build.
    at: str | None = None


def _rows(data: bytes) -> set[tuple[str, ...]]:
    reader = csv.reader(io.StringIO(data.decode("utf-8")))
    header = next(reader)
    assert header == ["kind", "language", "concept_id", "concept", "country"], header
    rows = [tuple(r) for r in reader]
    assert len(rows) == len(set(rows)), rows  # each entry once
    return set(rows)


def checked(pack: Path, benchmark: str, missing: Path) -> Answer:
    code, output = cli("reference", "check", pack, "--for", benchmark, "--missing", missing)
    assert code in (0, 2), output
    return Answer(code == 2, _rows(missing.read_bytes()) if missing.exists() else None, output)


def pre_flight(pack: Path, benchmark: str, root: Path) -> Answer:
    """What `culturebench build <benchmark> --demo --engine local --reference PACK` does before its first stage
    (`Benchmark.run` up to the stages): the config, its preflight, then the build's copy of the pack checked."""
    bench = benchmarks.get(benchmark)
    overrides = {"reference": str(pack), "workspace_root": str(root / "ws"), "release": {"root": str(root / "rel")}}
    ws, at = None, "config"
    try:
        config = build_config({}, True, overrides, model=bench.config)
        if benchmark == "3xcm":  # a build of the pack's own countries and concepts
            own = load_pack(pack)
            assert config.countries == [c.name for c in own.countries]
            assert sorted(config.concepts.include) == sorted(c.concept for c in own.concepts)
        bench._before_work(config)
        build = bench.build(config)
        ws, at = build.ws, "pack"
        bench.prepare_reference(build)
    except Exception as exc:  # a refusal: a domain error the CLI prints as one line, exit 2
        error = as_cli_error(exc)
        if error is None or error.exit_code != 2:
            raise
        refusal = str(exc)
    else:
        refusal, at = None, None
    written = None
    if ws is not None and ws.storage.exists(ws.file_path("reference_missing.csv")):
        written = _rows(ws.storage.read_bytes(ws.file_path("reference_missing.csv")))
    return Answer(refusal is not None, written, refusal or "", at)


def expected_missing(pack: Path) -> set[tuple[str, ...]]:
    """What a 3XCM build of the pack lacks, read from its files alone: each of its countries' languages and English
    (which the reader makes from countries.csv where i18n/en/ is absent) without its folder or RQ3 template, each
    country it does not name, and, English aside, each concept it does not translate."""

    def table(path: Path) -> list[dict[str, str]]:
        return list(csv.DictReader(path.open(encoding="utf-8"))) if path.exists() else []

    countries = table(pack / "countries.csv")
    names = list(dict.fromkeys(row["name"] for row in countries))
    concepts = [(row["concept_id"], row["concept"]) for row in table(pack / "concepts.csv")]
    rows: set[tuple[str, ...]] = set()
    for code in {row["language_code"] for row in countries} | {"en"}:
        folder = pack / "i18n" / code
        if not folder.exists() and code == "en":
            continue
        if not folder.exists():
            rows.add(("language", code, "", "", ""))
        elif json.loads((folder / "language.json").read_text(encoding="utf-8"))["descriptor_template"] is None:
            rows.add(("descriptor", code, "", "", ""))
        named = {row["country"] for row in table(folder / "countries.csv")}
        rows |= {("country_name", code, "", "", name) for name in names if name not in named}
        if code != "en":
            have = {row["concept_id"] for row in table(folder / "concepts.csv")}
            rows |= {("translation", code, cid, name, "") for cid, name in concepts if cid not in have}
    return rows


@pytest.mark.parametrize("seed", SEEDS)
def test_check_for_a_build_says_what_the_build_says(seed: int, bases: dict[str, Path], tmp_path: Path) -> None:
    pack, gaps = generate(seed, bases, tmp_path)
    assert bool(gaps) == (seed != GAPLESS)
    for benchmark in ("3xcm", "mixcube"):
        check = checked(pack, benchmark, tmp_path / f"missing-{benchmark}.csv")
        build = pre_flight(pack, benchmark, tmp_path / benchmark)
        why = f"seed {seed}, gaps {gaps}, {benchmark}:\ncheck: {check.line}\nbuild ({build.at}): {build.line}"
        assert check.refused == build.refused, why
        if seed == GAPLESS:
            assert not build.refused and check.missing is None and build.missing is None, why
        if benchmark != "3xcm":
            continue
        if build.at == "config":  # refused before it took its copy of the pack (one country, a broken file)
            assert build.missing is None, why
            continue
        assert check.missing == build.missing, why
        # refused at its pack check exactly when it lacks something, each entry listed
        assert (build.missing is not None) == build.refused and build.missing != set(), why
        assert (build.missing or set()) == expected_missing(pack), why  # non-empty wherever the files lack one


def test_the_seeds_reach_each_answer(bases: dict[str, Path], tmp_path: Path) -> None:
    """The seeds give a pack that builds, a 3XCM build refused at its pack check for lacking translations, one
    refused before it (its config), and a MixCuBe build refused and one not despite gaps: the agreement above is
    not vacuous."""
    reached = set()
    for seed in SEEDS:
        pack, gaps = generate(seed, bases, tmp_path / str(seed))
        xcm = pre_flight(pack, "3xcm", tmp_path / str(seed) / "3xcm")
        if xcm.missing and any(row[0] == "translation" for row in xcm.missing):
            reached.add("3xcm lacks translations")
        reached.add(f"3xcm refused at {xcm.at}" if xcm.refused else "3xcm builds" + (" with gaps" if gaps else ""))
        if xcm.at == "config" and "invalid config: countries" in xcm.line:
            reached.add("3xcm refused for its one country")
        mix = pre_flight(pack, "mixcube", tmp_path / str(seed) / "mixcube")
        reached.add("mixcube refused" if mix.refused else "mixcube builds" + (" with gaps" if gaps else ""))
    assert reached >= {
        "3xcm builds",
        "3xcm builds with gaps",
        "3xcm lacks translations",
        "3xcm refused at pack",
        "3xcm refused at config",
        "3xcm refused for its one country",
        "mixcube refused",
        "mixcube builds",
        "mixcube builds with gaps",
    }, reached


def test_a_pack_without_concepts_is_refused_by_both(bases: dict[str, Path], tmp_path: Path) -> None:
    pack = tmp_path / "no-concepts"
    shutil.copytree(bases["shipped"], pack)
    _drop_concepts(pack, random.Random(0), keep=0)
    assert load_pack(pack).concepts == ()
    check = checked(pack, "3xcm", tmp_path / "missing.csv")
    assert check.refused and "holds no concept" in check.line, check.line
    build = pre_flight(pack, "3xcm", tmp_path / "3xcm")
    assert build.refused, "the build's pre-flight takes a pack with no concept"
