"""Hostile prediction files (issue 56, items 10 and 12), the code at 40d69ae against the current one:

- `unknown_ids`: a `sample_id,prediction` CSV of 150 good rows, then `--rows` ids the release does not have (the
  hostile tester's 10 M, scaled): refused at row 152 either way; old: after reading the whole file;
- `blank_lines`: a header, one row, then `--blank-mib` MiB of blank lines (the tester's 256 MiB, scaled: the old
  code held some 88 bytes a line);
- `huge_cell`: one `--cell-mib` MiB answer on one line (the tester's 200 MB, scaled);
- `scoring`: `--answers` answers of just under 1 MiB each (lorem ipsum, naming the row's culture at the end), scored
  as `evaluate_images` scores them (the paper's verdict and ours) and counted by `_several_cultures`; `--fill
  negated` fills them with "not Korean" instead, the slowest text for the answer rule (every mention read).

Each case runs in a child process, which reports its seconds and its memory peak over what its imports took
(VmHWM - VmRSS); the old code is 40d69ae's evaluation/predictions/ and evaluation/answer_match.py, from git, loaded
beside the current ones. Prints a line per case and implementation, and ends with one JSON line.

    .venv/bin/python perf/predictions_hostile.py            # all cases, old and new
    .venv/bin/python perf/predictions_hostile.py --cases scoring --answers 150 --skip-old
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OLD_COMMIT = "40d69ae"
OLD_PACKAGE = "_old_predictions"
OLD_FILES = ("__init__.py", "vlmevalkit.py", "lmms_eval.py")
CASES = ("unknown_ids", "blank_lines", "huge_cell", "scoring")
#: The synthetic release: image rows s-0 ... s-199.
RELEASE_ROWS = 200


def old_code(into: Path) -> None:
    """40d69ae's readers as the package `_old_predictions`, and its answer rule as `_old_answer_match`, in `into`."""
    package = into / OLD_PACKAGE
    package.mkdir()
    for name in OLD_FILES:
        text = git_show(f"evaluation/predictions/{name}").replace("evaluation.predictions", OLD_PACKAGE)
        (package / name).write_text(text, encoding="utf-8")
    (into / "_old_answer_match.py").write_text(git_show("evaluation/answer_match.py"), encoding="utf-8")


def git_show(path: str) -> str:
    return subprocess.run(
        ["git", "show", f"{OLD_COMMIT}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def write_case(case: str, folder: Path, args: argparse.Namespace) -> Path:
    """The case's prediction file (none for `scoring`, whose answers the child makes)."""
    if case == "unknown_ids":
        path = folder / "m_MixCuBe.csv"
        with path.open("w", encoding="utf-8") as out:
            out.write("sample_id,prediction\n")
            out.writelines(f"s-{i},Korean\n" for i in range(150))
            out.writelines(f"u-{i},Korean\n" for i in range(args.rows))
        return path
    if case == "blank_lines":
        path = folder / "m_MixCuBe.csv"
        with path.open("w", encoding="utf-8") as out:
            out.write("index,prediction\n0,Korean\n")
            out.write("\n" * (args.blank_mib << 20))
        return path
    if case == "huge_cell":
        path = folder / "m_MixCuBe.csv"
        with path.open("w", encoding="utf-8") as out:
            out.write("index,prediction\n0," + "x" * (args.cell_mib << 20) + "\n")
        return path
    return folder / "none"


def child(case: str, impl: str, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run one case here (in the child): its outcome, seconds and memory peak."""
    import pyarrow as pa

    if impl == "old":
        sys.path.insert(0, args.old_dir)
    rows = pa.table(
        {
            "sample_id": [f"s-{i}" for i in range(RELEASE_ROWS)],
            "category": ["Food"] * RELEASE_ROWS,
            "image_sha256": ["a" * 64] * RELEASE_ROWS,
        }
    )
    if case == "scoring":
        run = _scoring(impl, args)
    else:
        module = __import__(
            f"{OLD_PACKAGE if impl == 'old' else 'evaluation.predictions'}.vlmevalkit", fromlist=["read_predictions"]
        )
        errors = __import__(OLD_PACKAGE if impl == "old" else "evaluation.predictions", fromlist=["PredictionsError"])

        def run() -> str:
            try:
                return f"read {len(module.read_predictions(path, rows))} answers"
            except errors.PredictionsError as exc:
                text = str(exc).replace(str(path), "FILE")
                return text if len(text) < 160 else text[:157] + "..."
            except MemoryError:
                return "MemoryError"

    base = _status("VmRSS")
    start = time.perf_counter()
    outcome = run()
    seconds = time.perf_counter() - start
    return {"case": case, "impl": impl, "seconds": round(seconds, 3),
            "peak_mb": round((_status("VmHWM") - base) / 2**20, 1), "outcome": outcome}  # fmt: skip


def _scoring(impl: str, args: argparse.Namespace) -> Any:
    from data.reference import default_pack
    from evaluation import mixcube as mx

    if impl == "old":
        import _old_answer_match  # type: ignore[import-not-found]

        mx.answer_verdict = _old_answer_match.answer_verdict  # type: ignore[assignment]
        # 40d69ae asked every culture: no scan for the cultures an answer names at all
        mx.groups_named = lambda answer, groups: list(range(len(groups)))  # type: ignore[assignment]
    mix = default_pack().mixcube()
    cultures = [c.adjective for c in mix.cultures]
    size = (1 << 20) - 1024
    fill = "not Korean, " if args.fill == "negated" else "lorem ipsum dolor sit amet "
    answers, countries = [], []
    for n in range(args.answers):
        country = cultures[n % len(cultures)]
        answers.append((fill * (size // len(fill) + 1))[: size - 40] + f" It is {country}.")
        countries.append(country)

    def run() -> str:
        scorer = mx._Scorer(mix)
        correct = [scorer.verdict(a, c) == mx.CORRECT for a, c in zip(answers, countries, strict=True)]
        ours = [scorer.verdict(a, c, ours=True) for a, c in zip(answers, countries, strict=True)]
        score_s = time.perf_counter() - start
        table = pa_table(answers, countries, correct)
        several, several_correct = mx._several_cultures(table, mix)
        return (f"{sum(correct)} of {len(correct)} correct ({len(ours)} with ours), scored in {score_s:.1f} s; "
                f"{several} name several cultures ({several_correct} correct)")  # fmt: skip

    start = time.perf_counter()
    return run


def pa_table(answers: list[str], countries: list[str], correct: list[bool]) -> Any:
    import pyarrow as pa

    n = len(answers)
    return pa.table({"country": countries, "answer": answers, "error": pa.nulls(n, pa.string()), "correct": correct})


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES), help=f"some of {', '.join(CASES)}")
    parser.add_argument("--rows", type=int, default=1_000_000, help="unknown ids after the 150 good rows")
    parser.add_argument("--blank-mib", type=int, default=4, help="MiB of blank lines")
    parser.add_argument("--cell-mib", type=int, default=20, help="MiB of the one huge answer")
    parser.add_argument("--answers", type=int, default=150, help="answers of just under 1 MiB each to score")
    parser.add_argument("--fill", choices=("lorem", "negated"), default="lorem")
    parser.add_argument("--skip-old", action="store_true", help="the current code only")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "IMPL", "FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--old-dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, impl, file = args.child
        print(json.dumps(child(case, impl, Path(file), args)))
        return
    cases = [c for c in args.cases.split(",") if c]
    if unknown := set(cases) - set(CASES):
        parser.error(f"--cases: unknown {', '.join(sorted(unknown))}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        old_code(folder)
        passed = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k in ("rows", "blank_mib",
                  "cell_mib", "answers", "fill")]  # fmt: skip
        for case in cases:
            path = write_case(case, folder, args)
            for impl in ("new",) if args.skip_old else ("old", "new"):
                command = [sys.executable, __file__, "--child", case, impl, str(path), "--old-dir", str(folder)]
                command += passed
                done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
                if done.returncode != 0:
                    result = {"case": case, "impl": impl, "error": done.stderr.strip().splitlines()[-1:]}
                else:
                    result = json.loads(done.stdout.strip().splitlines()[-1])
                results.append(result)
                print(
                    f"{case:12s} {impl}: {result.get('seconds', '-')} s, peak +{result.get('peak_mb', '-')} MB: "
                    f"{result.get('outcome', result.get('error'))}",
                    flush=True,
                )
            path.unlink(missing_ok=True)
    print(json.dumps({"perf": "predictions_hostile", "commit_old": OLD_COMMIT, "results": results}))


if __name__ == "__main__":
    main()
