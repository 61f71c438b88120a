"""The open_clip checkpoint folder that docs/researchers.md ("A local checkpoint, offline") makes from the demo's
model, made by running that block's commands as written (`demo_clip`), for the mteb and clip_benchmark smoke tests
(tests/evaluation/harnesses/exports/test_clip_benchmark.py, test_mteb.py) and the test of its layout
(test_local_checkpoint.py). The commands are held here verbatim (`DOCS_COMMANDS`: tests/test_documented_commands.py
checks each), and `demo_clip` runs them only when the docs give exactly these."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.documented_commands import commands
from tests.support.paths import REPO_ROOT

DOCUMENT = REPO_ROOT / "docs" / "researchers.md"
#: The folder the commands make, under the folder they run in (the checkout, in the docs).
FOLDER = Path("checkpoints") / "demo-clip"
#: The demo's model as `make demo` leaves it (evaluation/config.py, `demo_clip`: demo.models.random_open_clip).
DEMO_MODELS = Path("workspace") / "demo-models"
DEMO_NAME = "demo-random-clip"
DEMO_CONFIG = DEMO_MODELS / "open_clip" / "configs" / f"{DEMO_NAME}.json"
DEMO_WEIGHTS = DEMO_MODELS / "open_clip" / f"{DEMO_NAME}-seed0.pt"
#: The docs' commands, verbatim.
DOCS_COMMANDS = (
    "mkdir -p checkpoints/demo-clip",
    "cp workspace/demo-models/open_clip/demo-random-clip-seed0.pt checkpoints/demo-clip/open_clip_pytorch_model.bin",
    r"""(printf '{"model_cfg": '; cat workspace/demo-models/open_clip/configs/demo-random-clip.json; printf ', "preprocess_cfg": {}}\n') > checkpoints/demo-clip/open_clip_config.json""",  # noqa: E501  # verbatim
)


def docs_commands() -> list[str]:
    """The commands of the docs' block that makes the folder (the bash block that names it), in order."""
    found = [c for c in commands(DOCUMENT) if str(FOLDER) in c.text]
    blocks = {c.block for c in found}
    assert len(blocks) == 1, f"{DOCUMENT}: {len(blocks)} bash blocks name {FOLDER}, not 1"
    return [c.text for c in commands(DOCUMENT) if c.block in blocks]


def demo_models(root: Path) -> Path:
    """`root/workspace/demo-models/open_clip`, as `make demo` leaves it: the checkout's, linked (read only), or
    built the same way when the checkout has none."""
    target = root / DEMO_MODELS / "open_clip"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if (REPO_ROOT / DEMO_WEIGHTS).is_file() and (REPO_ROOT / DEMO_CONFIG).is_file():
        target.symlink_to(REPO_ROOT / DEMO_MODELS / "open_clip", target_is_directory=True)
    else:
        from demo.models import random_open_clip

        random_open_clip(target, name=DEMO_NAME)
    return target


def demo_clip(root: Path) -> Path:
    """The docs' commands run as written by bash in `root` (beside the demo's models, `demo_models`); returns the
    folder they made."""
    documented = docs_commands()
    assert documented == list(DOCS_COMMANDS), f"{DOCUMENT}'s block is not the one held here: {documented}"
    root.mkdir(parents=True, exist_ok=True)
    demo_models(root)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root)}
    for command in documented:
        done = subprocess.run(["bash", "-c", command], cwd=root, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-2000:]}"
    return root / FOLDER
