"""A real lmms-eval 0.7.3 run of the exported MixCuBe task, offline, in .venv-harness-lmms-eval (`make harnesses`):
`run_lmms_eval`, with the plugin model `culturebench_answers` (tests/support/harness_scripts/culturebench_lmms_plugin)
answering each image from a JSON map {sample_id: answer}; `readme_blocks` and `run_block`, the export README's own
command and check, run as written with its variables set (`readme_env`). Shared by
tests/evaluation/harnesses/exports/test_lmms_eval.py and tests/evaluation/harnesses/predictions/test_lmms_eval.py."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from evaluation.harnesses.exports import lmms_eval as lx
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
HARNESS_PYTHON = ROOT / ".venv-harness-lmms-eval" / "bin" / "python"
PLUGIN_PATH = Path(__file__).resolve().parent / "harness_scripts"
SKIP_REASON = "lmms-eval's venv is missing: run `make harnesses` (make test builds it)"
#: Run by the harness's python (`-m`, PYTHONPATH as `harness_env` sets it): the rows a folder or an exported task
#: YAML loads (`raw:FOLDER`, `task:YAML`).
TASK_ROWS = "culturebench_lmms_plugin.task_rows"


def harness_env(home: Path, plugin: bool = True) -> dict[str, str]:
    """Offline, HOME and the Hugging Face caches under `home`; with `plugin`, lmms-eval finds the
    `culturebench_answers` model (LMMS_EVAL_PLUGINS)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HF_HOME": str(home / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
    }
    if plugin:
        env |= {"PYTHONPATH": str(PLUGIN_PATH), "LMMS_EVAL_PLUGINS": "culturebench_lmms_plugin"}
    return env


def readme_env(home: Path, *, plugin: bool = False, **variables: str) -> dict[str, str]:
    """`harness_env` with the README's variables set, and the harness venv's `python` first on PATH, as a user
    who installed lmms-eval has it."""
    env = harness_env(home, plugin) | variables
    env["PATH"] = f"{HARNESS_PYTHON.parent}{os.pathsep}{env['PATH']}"
    return env


def readme_blocks(exported: Path) -> list[str]:
    """The export README's ```bash blocks, in order: the command, then the check of its files."""
    text = (exported / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def run_block(block: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A README block, run as written by bash."""
    return subprocess.run(["bash", "-c", block], env=env, cwd=cwd, capture_output=True, text=True, timeout=900)


def run_lmms_eval(
    exported: Path, answers: Path, results_dir: Path, workdir: Path, *, model_args: str = ""
) -> subprocess.CompletedProcess[str]:
    """`python -m lmms_eval` on the export with the answer map `answers`, logging samples under `results_dir`;
    `model_args` are appended to the plugin model's (`seen=PATH`, `pretrained=NAME`, ...)."""
    command = [
        str(HARNESS_PYTHON),
        "-m",
        "lmms_eval",
        "--model",
        "culturebench_answers",
        "--model_args",
        f"answers={answers}" + (f",{model_args}" if model_args else ""),
        "--tasks",
        lx.TASK,
        "--include_path",
        str(exported / lx.TASK),
        "--batch_size",
        "1",
        "--log_samples",
        "--output_path",
        str(results_dir),
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=900, cwd=workdir, env=harness_env(workdir / "home")
    )
