"""A reassembled 3XCM benchmark as a release-shaped immutable folder: the authors' CSV, the Parquet triplets and
sextets, a card that says what was repaired and why, and a manifest naming the input file's sha256."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from data.publish.card import CardConfig, card_configs, empty_configs_note, front_matter, markdown_table
from data.publish.folder import ImmutableFolder, ReleaseResult
from data.publish.manifest import ReassembledManifest
from data.publish.tables import write_csv, write_table
from data.schemas import XCM_BENCH_CSV, XCM_BENCH_CSV_COLUMNS

NAME = "3xcm-reassembled"
#: How messages and the result name the folder's version (its manifest states none: the input's sha256 names it).
VERSION = "0.1.0"


def write_reassembled(
    out: str, benchmark: pa.Table, benchmark_cd: pa.Table, unassembled: pa.Table, manifest: dict[str, Any]
) -> ReleaseResult:
    """Write `out` (immutable like a release: an identical rerun is `unchanged`, a different one is refused).
    `manifest` is `curation.reassemble.Reassembly.manifest()`: everything the card states comes from it."""
    folder = ImmutableFolder.at(out, NAME, VERSION, ReassembledManifest)
    folder.refusal = (  # the folder has no version to change: another --out is the way out
        "--out {where} already exists and is not this reassembled benchmark ({count} files differ, e.g. {examples}); a "
        "reassembled benchmark is never written over: choose a new --out, or remove that folder"
    )
    try:
        write_csv(folder, XCM_BENCH_CSV, benchmark, XCM_BENCH_CSV_COLUMNS)
        write_table(folder, "benchmark", benchmark)
        write_table(folder, "benchmark_cd", benchmark_cd)
        write_table(folder, "unassembled", unassembled)
        configs = (
            CardConfig("benchmark", benchmark.num_rows, default=True, path="benchmark/*.parquet"),
            CardConfig("benchmark_cd", benchmark_cd.num_rows, path="benchmark_cd/*.parquet"),
            CardConfig("unassembled", unassembled.num_rows, path="unassembled/*.parquet"),
        )
        folder.write_bytes("README.md", render_card(manifest, configs).encode())
        return folder.commit({"name": NAME, **manifest})
    except BaseException:
        folder.abort()
        raise


def render_card(manifest: dict[str, Any], configs: Sequence[CardConfig]) -> str:
    head = front_matter(card_configs(configs), pretty_name="3XCM, reassembled (culturebench)", tags=["cultural-bias"])
    before, after = manifest["audit_before"], manifest["audit_after"]
    rules = [
        {"rule": rule, "in the input": before.get(rule, 0), "reassembled": after.get(rule, 0)}
        for rule in before
        if before.get(rule, 0) or after.get(rule, 0)
    ]
    replaced = [{"why": why, "rows": n} for why, n in manifest["replaced"].items()]
    labels_only = (
        ""
        if manifest["pool"]["tags"] == "image_metadata"
        else "\n**Without tags, the assembler could only use concept labels.** The input names each image's concept "
        "but not what else it shows, so a distractor is kept out of the query concept by its label only; an image "
        "of another concept that also shows the query concept can still be a distractor.\n"
    )
    return (
        head
        + f"""
# 3XCM, reassembled over the images of `{manifest["input"]["file"]}`

A new RQ2 benchmark (and RQ3 sextets) over exactly the images of the input (sha256
`{manifest["input"]["sha256"]}`), with their image ids and `*_index` values kept, so it runs unchanged against the
authors' published `image_metadata` and their evaluator (`benchmarks/xcm-bench.csv` has their columns). No image of
ours is involved.

{empty_configs_note(configs)}The queries are the input's {manifest["rows"]}. **{manifest["kept"]} rows were kept as they
were**; the others were given new candidates by culturebench's balanced assembler (each the least-used eligible
image, seed {manifest["seed"]}), which counted the kept rows' candidates as used:

{markdown_table(replaced)}
`rq2.correct` / `rq2.irrelevant`: the candidate came from the query's language group (the stricter rule this
project keeps); `max_reuse`: keeping the row would have used a candidate more than {manifest["max_reuse"]} times.
{labels_only}
The validator's verdict on the result (reuse balance is not replayed, since the kept rows were not chosen by the
assembler; RQ2 reuse is capped at {manifest["max_reuse"]}): **{manifest["validation"]["summary"]}**.

What `culturebench audit` finds, before and after (maximum candidate reuse {manifest["reuse_before"]} before,
{manifest["reuse_after"]} after):

{markdown_table(rules)}
`image_id_country_alias` counts the input's own `america-` image ids (for USA), which are kept as published.

Licence: CC BY-NC-SA 4.0, as the authors' release. Provenance (input sha256, code version, seed) is in
`manifest.json`.
"""
    )
