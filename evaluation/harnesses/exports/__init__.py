"""Releases exported for the evaluation harnesses researchers already use: one module per harness, each
with `BENCHMARKS` (the release names it accepts) and `export(release, folder) -> str` (verifies the tables it reads
against the manifest, writes its files into the `ImmutableFolder`, returns the harness command the README states).
`common.run_export` does the rest: it opens the release, refuses a URL-only one, keeps the output out of any
release, and publishes the folder atomically with a manifest (the same release gives the same bytes)."""

from __future__ import annotations

#: `--harness` names -> the module that exports for it.
HARNESSES: dict[str, str] = {
    "lmms-eval": "evaluation.harnesses.exports.lmms_eval",
    "vlmevalkit": "evaluation.harnesses.exports.vlmevalkit",
    "mteb": "evaluation.harnesses.exports.mteb",
    "clip-benchmark": "evaluation.harnesses.exports.clip_benchmark",
}
