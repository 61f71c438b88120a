"""docs/researchers.md's "A local checkpoint, offline": its commands, run as written beside the demo's model
(tests/support/demo_checkpoint.py), make the folder it draws, and open_clip (in the mteb / clip_benchmark venv,
`make harnesses`) loads that folder's weights, which are the demo's; a `.pt` in such a folder is not loaded, as the
docs warn: open_clip starts the model at random (what clip_benchmark then scores) unless asked to require weights
(what run_mteb.py asks). The mteb and clip_benchmark smoke tests run on this folder (test_mteb.py,
test_clip_benchmark.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.demo_checkpoint import DOCS_COMMANDS, demo_clip, demo_models, docs_commands
from tests.support.paths import REPO_ROOT

HARNESS_PYTHON = REPO_ROOT / ".venv-harness-embedding" / "bin" / "python"

#: Run by the harness venv's Python: `WEIGHTS FOLDER REQUIRE [FOLDER REQUIRE ...]` -> a JSON line per folder: whether
#: open_clip loaded it (`local-dir:`, as clip_benchmark and run_mteb.py name it; `require_pretrained` as REQUIRE says),
#: and whether the model's state equals WEIGHTS' state_dict. One process: torch and open_clip load once.
LOAD = """
import json, sys, torch, open_clip
weights, cases = sys.argv[1], sys.argv[2:]
saved = torch.load(weights, map_location="cpu")
for folder, require in zip(cases[::2], cases[1::2]):
    try:
        model, _, _ = open_clip.create_model_and_transforms(f"local-dir:{folder}", require_pretrained=require == "1")
    except RuntimeError as exc:
        print(json.dumps({"loaded": False, "error": str(exc)}))
        continue
    state = model.state_dict()
    same = set(state) == set(saved) and all(torch.equal(state[k], saved[k]) for k in state)
    print(json.dumps({"loaded": True, "same_weights": same}))
"""


def test_the_docs_give_the_commands_the_tests_run() -> None:
    assert docs_commands() == list(DOCS_COMMANDS)


def test_the_commands_make_the_layout_the_docs_draw(tmp_path: Path) -> None:
    folder = demo_clip(tmp_path)
    models = demo_models(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["open_clip_config.json", "open_clip_pytorch_model.bin"]
    config = json.loads((folder / "open_clip_config.json").read_text(encoding="utf-8"))
    architecture = json.loads((models / "configs" / "demo-random-clip.json").read_text(encoding="utf-8"))
    assert config == {"model_cfg": architecture, "preprocess_cfg": {}}
    assert (folder / "open_clip_pytorch_model.bin").read_bytes() == (models / "demo-random-clip-seed0.pt").read_bytes()


def _load(weights: Path, cases: list[tuple[Path, bool]], tmp_path: Path) -> list[dict[str, object]]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    argv = [str(HARNESS_PYTHON), "-c", LOAD, str(weights)]
    for folder, require in cases:
        argv += [str(folder), "1" if require else "0"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.strip().splitlines()[-len(cases) :]]


@pytest.mark.harness
def test_open_clip_loads_the_demo_weights_from_the_folder_and_no_pt_file(tmp_path: Path) -> None:
    if not HARNESS_PYTHON.is_file():
        pytest.skip("the mteb / clip_benchmark venv .venv-harness-embedding is missing: run `make harnesses`")
    folder = demo_clip(tmp_path / "checkout")
    weights = demo_models(tmp_path / "checkout") / "demo-random-clip-seed0.pt"
    # The weights as a `.pt` beside the same config: not read. Required (run_mteb.py), it is an error; not required
    # (clip_benchmark), the model is random.
    pt_only = tmp_path / "pt-only"
    pt_only.mkdir()
    shutil.copy(folder / "open_clip_config.json", pt_only)
    shutil.copy(weights, pt_only / "weights.pt")
    made, required, not_required = _load(weights, [(folder, True), (pt_only, True), (pt_only, False)], tmp_path)
    assert made == {"loaded": True, "same_weights": True}
    assert required["loaded"] is False and "could not be loaded" in str(required["error"])
    assert not_required == {"loaded": True, "same_weights": False}
