"""Every shell command that README.md and docs/ give a user is accounted for: run here exactly as written, run by a
named test that holds it verbatim, or named as one that cannot run offline on this machine, with why.

Commands run here run with `bash -c`, block by block in the document's order (a block's later commands use what its
earlier ones wrote), in a scratch folder that holds what the docs assume beside the checkout: `.venv`, `data/`,
`examples/`, `make demo`'s `evaluations/` (linked: read only) and a copy of its `releases/`, or, where the block
builds its own releases, a copy of its `workspace/` (the builds resume from it). `culturebench` on its own
is the venv's, as after `source .venv/bin/activate`. A command's exit status must be 0; what it writes is the
subject of the tests of that command."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.data.test_sea5_walkthrough import WALKTHROUGH
from tests.support.demo_checkpoint import DOCS_COMMANDS as DEMO_CHECKPOINT
from tests.support.documented_commands import Command, Snippet, all_commands, python_snippets
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT


@dataclass(frozen=True)
class Here:
    """Run by this module, in its block's sandbox; `exit_code` is what the docs say it exits with."""

    exit_code: int = 0
    why: str = ""


@dataclass(frozen=True)
class By:
    """Run by another test, which holds each of `verbatim` (default: the command, less a leading `.venv/bin/`)."""

    test: str
    verbatim: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class InExportReadme:
    """A block of the README that `culturebench export RELEASE --harness HARNESS` writes, which the harness's test
    runs as written (tests/evaluation/harnesses/exports/test_<harness>.py)."""

    harness: str
    release: str


@dataclass(frozen=True)
class NotHere:
    """Cannot run on this offline, GPU-less machine, or must not run inside the suite: why."""

    why: str


HERE = Here()
WALKTHROUGH_TEST = "tests/data/test_sea5_walkthrough.py"
DEPLOYMENTS = "tests/flows/test_deployments.py"
NETWORK = "needs the network"


def _argv(*words: str) -> str:
    """Words as an argv list literal in a test holds them."""
    return ", ".join(f'"{w}"' for w in words)


def _deployed(*verbatim: str) -> By:
    """Run by the deployments test, which runs the sequence with argv lists, on a free port rather than 4200."""
    return By(DEPLOYMENTS, verbatim, note="on a free port, so that it cannot meet a server of the user's")


#: Each documented command -> how it runs. A command the docs gain must be added here; one they lose, removed.
DOCUMENTED: dict[str, Here | By | InExportReadme | NotHere] = {
    "make demo": By(".ci/run", note="CI's main job"),
    "make test": By(".ci/run", note="CI's test job"),
    "make test-fast": NotHere("runs the test suite itself"),
    "make test TEST_WORKERS=0": NotHere("runs the test suite itself"),
    '.venv/bin/python -m pytest tests/evaluation -m "not slow"': NotHere("runs the test suite itself"),
    "make docs": By("Makefile", ("test: $(STAMP) $(LS_STAMP) harnesses browser docs",), note="make test's"),
    "make lint": NotHere("a contributor's check before a commit: ruff and mypy over the checkout being edited"),
    "make lock": NotHere(f"{NETWORK}: it re-resolves requirements.lock against the package index"),
    ".venv/bin/mkdocs serve": HERE,
    ".venv/bin/python -m evaluation.leaderboard.demo_tables --write": By(
        "tests/evaluation/leaderboard/test_demo_tables.py",
        ('demo_tables.main(["--write"',),
        note="on copies of the docs",
    ),
    ".venv/bin/python -m evaluation.leaderboard.demo_tables --check": By(
        "tests/evaluation/leaderboard/test_demo_tables.py"
    ),
    "XCM_AUTHORS_EVAL=/path/to/rq2_eval/utils .venv/bin/python -m pytest -q -p no:cacheprovider "
    "tests/evaluation/xcm/test_task.py": NotHere(
        "needs a checkout of the 3XCM authors' evaluator, which is not shipped"
    ),
    # Reading and checking the demo releases.
    ".venv/bin/culturebench validate releases/3xcm/0.1.0-demo": HERE,
    ".venv/bin/culturebench audit data/authors/xcm-bench.csv": Here(1, "the authors' file breaks the rules"),
    ".venv/bin/culturebench audit releases/3xcm/0.1.0-demo": HERE,
    ".venv/bin/culturebench audit releases/3xcm/0.1.0-demo/benchmarks/xcm-bench.csv --metadata "
    "releases/3xcm/0.1.0-demo/image_metadata/ --out violations.parquet --max-reuse 5": HERE,
    ".venv/bin/culturebench reassemble --pool data/authors/xcm-bench.csv --out repaired/": HERE,
    # Building.
    ".venv/bin/culturebench build 3xcm --demo --engine local": HERE,
    ".venv/bin/culturebench build 3xcm --demo": By("Makefile", ("$(BIN)/culturebench build 3xcm --demo\n",)),
    ".venv/bin/culturebench config --demo > build.json": HERE,
    ".venv/bin/culturebench build 3xcm --config build.json --version 0.2.0": HERE,
    ".venv/bin/culturebench build mixcube --demo --engine local": HERE,
    ".venv/bin/culturebench config --benchmark mixcube > mixcube.json": HERE,
    ".venv/bin/culturebench build mixcube --config mixcube.json --version 1.0.0": HERE,
    ".venv/bin/culturebench reference init my-pack": HERE,
    ".venv/bin/culturebench reference check my-pack": HERE,
    ".venv/bin/culturebench build 3xcm --demo --engine local --reference examples/packs/globalrg "
    "--version 0.1.0-globalrg": By("tests/data/test_reference_packs.py"),
    # docs/reference-packs.md's walkthrough: one test runs it in order, with a Label Studio server between reviews.
    **{command: By(WALKTHROUGH_TEST) for command in WALKTHROUGH},
    "culturebench concepts generate review.csv --count 100": NotHere(f"{NETWORK}: Gemini drafts the concepts"),
    "culturebench concepts accept review.csv <candidate_id> ...": NotHere("takes the ids the Gemini drafts gave"),
    # The Prefect deployment sequence.
    "export PREFECT_API_URL=http://127.0.0.1:4200/api": NotHere("sets the variable the sequence below reads"),
    ".venv/bin/prefect server start --host 127.0.0.1 --port 4200 &": _deployed(
        _argv("server", "start", "--host", "127.0.0.1", "--port")
    ),
    ".venv/bin/prefect server status --wait --timeout 120": _deployed(_argv("server", "status", "--wait")),
    ".venv/bin/culturebench prefect-setup": _deployed(_argv("prefect-setup")),
    ".venv/bin/prefect --no-prompt deploy --all": _deployed(_argv("--no-prompt", "deploy", "--all")),
    ".venv/bin/prefect worker start --pool culturebench-process &": _deployed(
        _argv("worker", "start", "--pool", "culturebench-process")
    ),
    ".venv/bin/prefect deployment run build-3xcm/demo": _deployed(
        _argv("deployment", "run") + ", name", '"build-3xcm/demo"'
    ),
    ".venv/bin/prefect deployment run build-mixcube/demo": _deployed(
        _argv("deployment", "run") + ", name", '"build-mixcube/demo"'
    ),
    ".venv/bin/prefect deployment run build-3xcm/release": NotHere(
        f"{NETWORK}: the release deployment's production config searches the web and asks Gemini"
    ),
    "prefect deployment run evaluate/demo-3xcm": _deployed(
        _argv("deployment", "run") + ", name", '"evaluate/demo-3xcm"'
    ),
    # Releases.
    "culturebench fetch-release releases/3xcm/1.0.0 --out fetched/3xcm --write-images": NotHere(
        f"{NETWORK}: it downloads a URL-only release's images (tests/collectors/test_release_images.py serves them "
        "from a local host)"
    ),
    'culturebench takedown releases/3xcm/0.1.0-demo --image-id argentina-0-1-eng --reason "rights holder request '
    '#12"': HERE,
    'culturebench takedown releases/3xcm/0.1.1-demo --url argentina/train/eng/01_train.jpg --reason "request #13"': (
        HERE
    ),
    'culturebench takedown releases/mixcube/0.1.0-demo --image-id demo-kr-food-00-african --reason "…" '
    "--version 0.2.0-demo": HERE,
    "HF_TOKEN=... .venv/bin/culturebench publish releases/3xcm/0.1.0 --repo-id ORG/3xcm": NotHere(
        f"{NETWORK}: the Hub (tests/data/publish/test_hub.py publishes to a local fake of its API)"
    ),
    "prefect deployment run publish/publish-3xcm --param release=/data/culturebench/releases/3xcm/1.0.0 --param "
    "repo_id=ORG/3xcm": NotHere(
        f"{NETWORK}: the Hub (tests/flows/test_publish_deployment.py runs the deployment on a real Prefect server "
        "against a local fake Hub, approving, rejecting and timing out)"
    ),
    # Evaluating.
    "culturebench export releases/3xcm/0.1.0-demo --harness mteb --out exports/mteb": HERE,
    "culturebench export releases/mixcube/0.1.0-demo --harness lmms-eval --out exports/lmms-eval": HERE,
    "culturebench export releases/mixcube/0.1.0-demo --harness vlmevalkit --out exports/vlmevalkit": HERE,
    'culturebench evaluate mixcube "$RELEASE" --predictions "$WORK/$MODEL/${MODEL}_MixCuBe.tsv" --out "$OUT"': (
        InExportReadme("vlmevalkit", "releases/mixcube/0.1.0-demo")
    ),
    'culturebench evaluate mixcube "$RELEASE" --predictions-format lmms-eval --predictions "$OUT_LMMS" '
    '--predictions-model "$PRETRAINED" --out "$OUT"': NotHere(
        "reads the samples log of an lmms-eval run; tests/evaluation/harnesses/predictions/test_lmms_eval.py scores a "
        "real one"
    ),
    "culturebench export releases/3xcm/0.1.0-demo --harness clip-benchmark --out exports/clip-benchmark": HERE,
    # docs/researchers.md's open_clip folder made from the demo's model: made as written beside `make demo`'s model,
    # loaded (tests/evaluation/harnesses/exports/test_local_checkpoint.py), and the mteb and clip_benchmark smoke
    # tests' model.
    **{command: By("tests/support/demo_checkpoint.py") for command in DEMO_CHECKPOINT},
    "culturebench evaluate compare evaluations/3xcm/0.1.0-demo/* --out comparison/3xcm --html leaderboard/3xcm": HERE,
    "culturebench evaluate 3xcm releases/3xcm/1.0.0 --model-backend embeddings --image-embeddings IMG.parquet "
    "--text-embeddings TXT.parquet --out DIR": NotHere("the vectors are the user's own files"),
    "culturebench evaluate 3xcm releases/3xcm/1.0.0 --model-backend open_clip --model-name "
    "xlm-roberta-base-ViT-B-32 --pretrained /models/xlm-roberta-base-ViT-B-32.bin --device cuda --precision fp16 "
    "--batch-size 256": NotHere("needs the model's weights and a GPU"),
    "culturebench evaluate 3xcm releases/3xcm/1.0.0 --model-backend transformers --model "
    "OFA-Sys/chinese-clip-vit-base-patch16": NotHere(f"{NETWORK}: the model comes from the Hub"),
    "culturebench evaluate 3xcm releases/3xcm/1.0.0 --model-backend sentence-transformers --image-model "
    "sentence-transformers/clip-ViT-B-32 --text-model sentence-transformers/clip-ViT-B-32-multilingual-v1": NotHere(
        f"{NETWORK}: the models come from the Hub"
    ),
    "culturebench evaluate mixcube releases/mixcube/1.0.0 --model-backend openai --base-url "
    "http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-VL-7B-Instruct --judge-backend gemini --judge-model "
    "gemini-2.5-flash --cache-dir answers/": NotHere(f"{NETWORK}: a served model and Gemini as the judge"),
    "culturebench evaluate mixcube releases/mixcube/1.0.0 --model-backend transformers --model "
    "/models/llava-1.5-7b-hf --device cuda": NotHere("needs the model's weights and a GPU"),
}


def _entry(command: Command) -> Here | By | InExportReadme | NotHere | None:
    return DOCUMENTED.get(command.text)  # None: unaccounted for, which the first test reports


def test_every_documented_command_is_accounted_for_and_no_entry_is_stale() -> None:
    documented = {c.text for c in all_commands()}
    unknown = sorted(str(c) for c in all_commands() if c.text not in DOCUMENTED)
    assert not unknown, "documented commands this module does not account for:\n" + "\n".join(unknown)
    assert not sorted(set(DOCUMENTED) - documented), "entries no document gives any more"


@pytest.mark.parametrize("text", sorted(t for t, how in DOCUMENTED.items() if isinstance(how, By)))
def test_a_command_run_elsewhere_is_held_verbatim_by_that_test(text: str) -> None:
    how = DOCUMENTED[text]
    assert isinstance(how, By)
    held = (ROOT / how.test).read_text(encoding="utf-8")
    for verbatim in how.verbatim or (text.removeprefix(".venv/bin/"),):
        assert verbatim in held, f"{how.test} does not hold {verbatim!r}"


@pytest.mark.parametrize("text", sorted(t for t, how in DOCUMENTED.items() if isinstance(how, InExportReadme)))
def test_a_command_of_an_export_readme_is_in_the_readme_the_export_writes(text: str, tmp_path: Path) -> None:
    from tests.support.documented_commands import bash_blocks

    how = DOCUMENTED[text]
    assert isinstance(how, InExportReadme)
    if not (ROOT / how.release).is_dir():
        pytest.skip("no demo releases: run `make demo` first")
    out = tmp_path / "export"
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "culturebench"), "export", str(ROOT / how.release), "--harness", how.harness,
         "--out", str(out)], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    blocks = bash_blocks((out / "README.md").read_text(encoding="utf-8"))
    assert any(text in "\n".join(line for _, line in block) for block in blocks), f"{how.harness}'s README lacks it"


def _blocks() -> dict[str, list[Command]]:
    """`document#block` -> its commands that run here, in order. A command the docs repeat runs where it first
    appears (README.md first, then docs/ by name), after what precedes it there."""
    blocks: dict[str, list[Command]] = defaultdict(list)
    seen: set[str] = set()
    for command in all_commands():
        if isinstance(_entry(command), Here) and not command.text.endswith("mkdocs serve") and command.text not in seen:
            blocks[f"{command.document}#{command.block}"].append(command)
            seen.add(command.text)
    return dict(blocks)


#: Blocks that build a release take minutes: `slow` (out of `make test-fast`; `make test` runs them).
SLOW_WORDS = ("build ", "reassemble", "takedown")


def _sandbox(root: Path, commands: list[Command]) -> Path:
    """A folder as the docs assume one: the checkout's venv, data and examples, and a copy of the demo releases
    unless the block builds its own."""
    root.mkdir()
    for name in (".venv", "data", "examples", "evaluations"):  # evaluations: `make demo`'s results, read only
        if (ROOT / name).is_dir():
            (root / name).symlink_to(ROOT / name, target_is_directory=True)
    if not (ROOT / "releases" / "3xcm" / "0.1.0-demo").is_dir():
        pytest.skip("no demo releases: run `make demo` first")
    if any(" build " in f" {c.text} " for c in commands):
        # A block that builds starts from `make demo`'s workspace, as a user's next build does: its stages resume
        # from their outputs (a fresh build of every stage is `make demo`'s own, in CI's main job).
        shutil.copytree(ROOT / "workspace", root / "workspace", symlinks=True)
    else:
        shutil.copytree(ROOT / "releases", root / "releases", symlinks=False)
    return root


def _environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PREFECT_API"))}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # `culturebench`, as when activated
    return env


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(name, marks=[pytest.mark.slow] if any(w in c.text for c in cs for w in SLOW_WORDS) else [])
        for name, cs in sorted(_blocks().items())
    ],
)
def test_the_documented_commands_run_as_written(block: str, tmp_path: Path) -> None:
    commands = _blocks()[block]
    cwd = _sandbox(tmp_path / "work", commands)
    env = _environment(tmp_path)
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command.text], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
        )
        expected = _entry(command)
        assert isinstance(expected, Here)
        assert done.returncode == expected.exit_code, (
            f"{command}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )


def test_mkdocs_serve_serves_the_site_as_documented(tmp_path: Path) -> None:
    """`.venv/bin/mkdocs serve` from the checkout: the site on 127.0.0.1:8000 (its default address), then stopped."""
    import requests

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8000)) == 0:
            pytest.skip("something already listens on 127.0.0.1:8000")
    env = _environment(tmp_path) | {"NO_MKDOCS_2_WARNING": "1"}
    server = subprocess.Popen(
        ["bash", "-c", "exec .venv/bin/mkdocs serve"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        page = None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                page = requests.get("http://127.0.0.1:8000/", timeout=5)
                break
            except requests.ConnectionError:
                time.sleep(0.5)
        assert page is not None and page.status_code == 200, server.stdout.read() if server.stdout else ""
        assert "culturebench" in page.text.lower()
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("snippet", python_snippets(), ids=str)
def test_the_documented_python_runs_as_written(snippet: Snippet, tmp_path: Path) -> None:
    """Each Python block of the docs, in a folder beside the demo releases, with a fresh datasets cache; what its
    prints say they show (the comment after a `print(...)`) is in its output."""
    cwd = _sandbox(tmp_path / "work", [])
    python = ROOT / ".venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", snippet.code], cwd=cwd, env=_environment(tmp_path), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"{snippet}: exit {done.returncode}\n{done.stderr[-3000:]}"
    for shown in snippet.printed():
        assert shown in done.stdout, f"{snippet}: prints {done.stdout[-500:]!r}, not {shown!r}"
