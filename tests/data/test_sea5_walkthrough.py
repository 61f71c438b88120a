"""docs/reference-packs.md's walkthrough, run exactly as written (issue 57: done when): a pack for Indonesia, Ghana,
Peru (Spanish and Quechua), Kenya and Vietnam with four concepts, cut with `init --from`, filled by a sheet,
reviewed in Label Studio by two annotators (the real server; the annotators vote through its API with their own
tokens, between the two review commands), built, validated, evaluated and exported."""

from __future__ import annotations

import csv
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from label_studio_sdk import LabelStudio

from annotation.label_configs import CORRECTION_CONTROL, TRANSLATION_ACCEPT, TRANSLATION_CORRECT
from annotation.label_studio import project_key
from data.reference import load_pack
from tests.support.documented_commands import commands
from tests.support.label_studio_server import RunningLabelStudio, signup_annotator
from tests.support.paths import REPO_ROOT
from tests.support.review_inputs import verdict

GUIDE = REPO_ROOT / "docs" / "reference-packs.md"

#: The walkthrough's four blocks, as the guide gives them (the first test holds the guide to these).
CUT = [
    "culturebench reference init sea5 --from examples/packs/globalrg --countries Indonesia,Ghana,Peru,Kenya,Vietnam --concepts dance,festival,transport,breakfast --name sea5",  # noqa: E501
    "echo 'Peru,PE,peru,qu,Quechua,qu,pe-es,Latin America' >> sea5/countries.csv",
    "culturebench reference check sea5",
]
FILL = [
    "culturebench reference translate sea5 --languages qu",
    "culturebench reference sheet sea5 --out sea5-sheet.csv",
    "culturebench reference fill sea5 examples/sheets/sea5-filled.csv",
    "culturebench reference check sea5 --for 3xcm",
]
REVIEW = [
    'culturebench review translations sea5 --languages qu --url "$LABEL_STUDIO_URL"',
    'culturebench review translations sea5 --languages qu --url "$LABEL_STUDIO_URL" --collect --decisions sea5-review.csv',  # noqa: E501
]
BUILD = [
    "culturebench build 3xcm --demo --engine local --reference sea5 --version 0.1.0-sea5",
    "culturebench validate releases/3xcm/0.1.0-sea5",
    "culturebench evaluate 3xcm releases/3xcm/0.1.0-sea5 --demo-model --task all",
    "culturebench export releases/3xcm/0.1.0-sea5 --harness mteb --out exports/sea5-mteb",
]
WALKTHROUGH = [*CUT, *FILL, *REVIEW, *BUILD]
#: The Quechua entry both reviewers correct (CLDR's Spanish spelling of Peru, in the Quechua template).
CORRECTED = ("i18n/qu/countries.csv#PE.descriptor_country", "Peru")


def test_the_guide_gives_the_walkthrough_as_this_test_runs_it() -> None:
    given = [c.text for c in commands(GUIDE)]
    start = given.index(WALKTHROUGH[0])
    assert given[start : start + len(WALKTHROUGH)] == WALKTHROUGH


def run(command: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{output[-4000:]}"
    assert "Traceback" not in output, output
    return output


def review_like_two_native_speakers(server: RunningLabelStudio, pack: Path) -> int:
    """Two annotators sign up and vote on every Quechua task: both accept, and both correct `CORRECTED`."""
    info = load_pack(pack).info
    admin = LabelStudio(base_url=server.url, api_key=server.admin_token)
    key = project_key(f"{info.name}-{info.version}-qu", "translation_review")
    project = next(p for p in admin.projects.list() if (p.description or "").splitlines()[:1] == [key])
    tasks = {t.data["item_key"]: t.id for t in admin.tasks.list(project=project.id)}
    tag = uuid.uuid4().hex[:8]
    tokens = [signup_annotator(server, f"qu{n}-{tag}@example.com", f"pw-{tag}-{n}-xyz") for n in range(2)]
    correction = {"from_name": CORRECTION_CONTROL, "to_name": "draft", "type": "textarea"}
    for token in tokens:
        speaker = LabelStudio(base_url=server.url, api_key=token)
        for item, task_id in tasks.items():
            if item == CORRECTED[0]:
                result = [
                    *verdict("translation_review", TRANSLATION_CORRECT),
                    {**correction, "value": {"text": [CORRECTED[1]]}},
                ]
            else:
                result = verdict("translation_review", TRANSLATION_ACCEPT)
            speaker.annotations.create(id=task_id, result=result)
    return len(tasks)


@pytest.mark.slow
def test_the_walkthrough_runs_as_written(label_studio: RunningLabelStudio, tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    for name in (".venv", "data", "examples"):
        (cwd / name).symlink_to(REPO_ROOT / name, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PREFECT_API"))}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), COLUMNS="200")
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), PATH=f"{REPO_ROOT / '.venv' / 'bin'}:{env['PATH']}")
    env.update(LABEL_STUDIO_URL=label_studio.url, LABEL_STUDIO_API_KEY=label_studio.admin_token)

    outputs = [run(command, cwd, env) for command in CUT]
    assert "build 3xcm: would be refused" in outputs[-1]  # breakfast and Quechua are missing
    missing = list(csv.DictReader((cwd / "reference_missing.csv").open(encoding="utf-8")))
    assert {row["language"] for row in missing} >= {"qu"} and any(r["concept"] == "breakfast" for r in missing)
    pack = cwd / "sea5"
    assert load_pack(pack).country_by_name()["Peru"].language_codes == ["es", "qu"]

    outputs = [run(command, cwd, env) for command in FILL]
    assert "build 3xcm: has what it needs" in outputs[-1]
    quechua = load_pack(pack).language_pack("qu")
    assert quechua.language.native_name == "Runasimi" and quechua.language.origin == "sheet"
    assert quechua.concepts[0].text == "tutamanta mikhuy" and quechua.concepts[0].review_status != "native_reviewed"

    run(REVIEW[0], cwd, env)
    voted = review_like_two_native_speakers(label_studio, pack)
    collected = run(REVIEW[1], cwd, env)
    assert "Fleiss" in collected
    quechua = load_pack(pack).language_pack("qu")
    assert quechua.countries["Peru"].descriptor_country == CORRECTED[1]
    assert all(t.review_status == "native_reviewed" and t.reviewers == 2 for t in quechua.concepts.values())
    assert quechua.language.review_status == "native_reviewed"
    decisions = list(csv.DictReader((cwd / "sea5-review.csv").open(encoding="utf-8")))
    assert len(decisions) == voted and {d["status"] for d in decisions} == {"decided"}

    for command in BUILD:
        run(command, cwd, env)
    release = cwd / "releases" / "3xcm" / "0.1.0-sea5"
    card = (release / "README.md").read_text(encoding="utf-8")
    row = next(line for line in card.splitlines() if line.startswith("| qu |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[-1] == "2" and int(cells[-2]) == voted  # every Quechua entry native-reviewed, by 2
    assert "shipped" not in card.lower()
    assert load_pack(release / "reference").language_pack("qu").countries["Peru"].descriptor_country == "Peru"
    assert any((cwd / "evaluations" / "3xcm" / "0.1.0-sea5").iterdir())
    assert (cwd / "exports" / "sea5-mteb" / "README.md").is_file()
