"""Native-speaker review of a pack's translations against the real Label Studio server (issue 57, part 5): one
project per language, two annotators with their own tokens voting through the API, the export read back, the
majority deciding (ties undecided, corrections that differ undecided), and Fleiss' kappa checked against a
computation of our own."""

from __future__ import annotations

import csv
import re
import uuid
from pathlib import Path

import numpy as np
import pytest
from label_studio_sdk import LabelStudio

from annotation.label_configs import (
    CORRECTION_CONTROL,
    SPECS,
    TRANSLATION_ACCEPT,
    TRANSLATION_CORRECT,
    TRANSLATION_REJECT,
    check_label_config,
)
from annotation.label_studio import project_key
from data.reference import load_pack
from tests.data.test_reference_packs import cli
from tests.support.label_studio_server import RunningLabelStudio, signup_annotator
from tests.support.paths import REPO_ROOT
from tests.support.review_inputs import verdict

TOKEN_ENV = "CULTUREBENCH_TEST_LS_TOKEN"
KIND = "translation_review"


def vote(choice: str, correction: str | None = None) -> list[dict]:
    result = verdict(KIND, choice)
    if correction is not None:
        result.append(
            {"from_name": CORRECTION_CONTROL, "to_name": "draft", "type": "textarea", "value": {"text": [correction]}}
        )
    return result


def fleiss_kappa_by_hand(table: np.ndarray) -> float:
    """Fleiss (1971), eq. for kappa: (P_bar - P_e) / (1 - P_e), from an items x categories count table."""
    raters = table.sum(axis=1)[0]
    p_j = table.sum(axis=0) / table.sum()
    p_i = ((table**2).sum(axis=1) - raters) / (raters * (raters - 1))
    p_bar, p_e = p_i.mean(), (p_j**2).sum()
    return float((p_bar - p_e) / (1 - p_e))


def test_the_translation_review_interface_parses() -> None:
    check_label_config(SPECS[KIND])


def test_two_native_speakers_review_a_language_in_label_studio(
    label_studio: RunningLabelStudio, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TOKEN_ENV, label_studio.admin_token)
    name = f"sea-{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "pack"
    globalrg = REPO_ROOT / "examples" / "packs" / "globalrg"
    code, output = cli(
        "reference", "init", folder, "--from", globalrg, "--countries", "Vietnam,Kenya", "--concepts",
        "dance,festival", "--name", name,
    )  # fmt: skip
    assert code == 0, output
    server = ["--url", label_studio.url, "--api-key-env", TOKEN_ENV, "--annotators", "2"]
    code, output = cli("review", "translations", folder, "--languages", "vi", *server)
    assert code == 0, output
    drafts = [e for e in load_pack(folder).language_pack("vi").concepts.values()]
    assert re.search(r"vi: (\d+)\s+entries\s+to\s+review\s+\(\1\s+new\)", output), output
    code, again = cli("review", "translations", folder, "--languages", "vi", *server)
    assert code == 0 and "(0 new)" in again, again  # the project is found again; nothing imported twice

    admin = LabelStudio(base_url=label_studio.url, api_key=label_studio.admin_token)
    key = project_key(f"{name}-0.1.0-vi", KIND)
    project = next(p for p in admin.projects.list() if (p.description or "").splitlines()[:1] == [key])
    tasks = {t.data["item_key"]: t.id for t in admin.tasks.list(project=project.id)}
    assert "i18n/vi/concepts.csv#14.text" in tasks and "i18n/vi/language.json#descriptor_template" in tasks
    tag = uuid.uuid4().hex[:8]
    tokens = [signup_annotator(label_studio, f"vi{n}-{tag}@example.com", f"pw-{tag}-{n}-xyz") for n in range(2)]
    speakers = [LabelStudio(base_url=label_studio.url, api_key=token) for token in tokens]
    plan = {
        "i18n/vi/concepts.csv#14.text": [vote(TRANSLATION_ACCEPT), vote(TRANSLATION_ACCEPT)],
        "i18n/vi/concepts.csv#16.text": [vote(TRANSLATION_CORRECT, "ngày hội"), vote(TRANSLATION_CORRECT, "ngày  hội")],
        "i18n/vi/countries.csv#VN.name": [vote(TRANSLATION_ACCEPT), vote(TRANSLATION_REJECT)],  # a tie
        "i18n/vi/countries.csv#KE.name": [vote(TRANSLATION_REJECT), vote(TRANSLATION_REJECT)],
        "i18n/vi/language.json#descriptor_template": [
            vote(TRANSLATION_CORRECT, "{concept} của {country}"),
            vote(TRANSLATION_CORRECT, "{concept} ở {country}"),
        ],  # corrections that differ
        "i18n/vi/language.json#native_name": [vote(TRANSLATION_ACCEPT)],  # one of two: no majority of two
    }
    for item, results in plan.items():
        for speaker, result in zip(speakers, results, strict=False):
            speaker.annotations.create(id=tasks[item], result=result)

    decisions = tmp_path / "decisions.csv"
    code, output = cli(
        "review", "translations", folder, "--languages", "vi", "--collect", *server, "--decisions", decisions
    )
    assert code == 0, output
    vietnamese = load_pack(folder).language_pack("vi")
    accepted = vietnamese.concepts[14]
    assert (accepted.review_status, accepted.reviewers) == ("native_reviewed", 2)
    assert accepted.text == next(d.text for d in drafts if d.concept_id == 14)  # accepted as drafted
    corrected = vietnamese.concepts[16]
    assert (corrected.text, corrected.review_status, corrected.origin) == ("ngày hội", "native_reviewed", "review")
    assert vietnamese.countries["Vietnam"].review_status == "awaiting_native_review"  # the tie decides nothing
    assert vietnamese.countries["Kenya"].review_status == "awaiting_native_review"  # rejected: still a draft
    assert vietnamese.language.descriptor_template == "{concept} {country}"  # unchanged
    assert vietnamese.language.review_status == "awaiting_native_review"
    rows = {(r["file"], r["key"]): r for r in csv.DictReader(decisions.open(encoding="utf-8"))}
    assert rows[("i18n/vi/countries.csv", "VN.name")]["reason"] == "no_majority"
    assert rows[("i18n/vi/countries.csv", "KE.name")]["decision"] == TRANSLATION_REJECT
    assert rows[("i18n/vi/language.json", "descriptor_template")]["reason"] == "corrections_differ"
    assert rows[("i18n/vi/language.json", "native_name")]["reason"].startswith("too_few_annotations")
    # Fleiss' kappa over the five entries both voted on, in the order accept, correct, reject.
    table = np.array([[2, 0, 0], [0, 2, 0], [1, 0, 1], [0, 0, 2], [0, 2, 0]])
    expected = fleiss_kappa_by_hand(table)
    printed = re.search(r"Fleiss'\s+kappa\s+(-?\d\.\d{3})\s+over\s+(\d+)\s+entries\s+rated\s+by\s+2", output)
    assert printed and int(printed.group(2)) == 5, output
    assert float(printed.group(1)) == pytest.approx(expected, abs=5e-4)
    code, output = cli("reference", "check", folder)
    assert code == 0, output
