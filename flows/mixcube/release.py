"""The MixCuBe release: `releases/mixcube/<version>/` with the public dataset's columns and row order.

- `default/`: Parquet image shards (HF `Image` feature, 100 rows per row group) with `country, category,
  ethnicity, image` first, each original followed by its 4 swaps, then our columns (ids, mask, prompt, seed,
  model, scores, review decision, placeholder flag);
- WebDataset tars of the same samples, `food_label.csv` (`image_file,label`), the masks as PNG files;
- a card with a before/after grid, and the manifest (config, code version, seeds, sha256 of every file).
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Any

import pyarrow as pa
from PIL import Image, ImageDraw

from data.progress import StepProgress
from data.publish import croissant
from data.publish.card import (
    CardConfig,
    auto_accept_notice,
    card_configs,
    demo_notice,
    deviations_section,
    front_matter,
    hub_metadata,
    markdown_table,
    reference_section,
    url_only_notice,
    webdataset_loading,
)
from data.publish.datasheet import datasheet_section
from data.publish.folder import ReleaseResult
from data.publish.format import ImageConfig
from data.publish.image_tables import BlobSource, ImageRow, TableImageRows, to_release_jpeg
from data.publish.manifest import Provenance, validated
from data.publish.release import ReleaseConfig, ReleaseWriter
from data.publish.sources import DOMAINS_FIGURE, domains_png, sources_section
from data.reference import ReferencePack
from data.schemas import MIXCUBE_ROWS
from data.text_safety import markdown_text
from flows.mixcube.release_facts import mixcube_facts

NAME = "mixcube"
#: Where a MixCuBe release keeps its images (`Benchmark.image_config`).
IMAGES = ImageConfig("default", "sample_id")
GRID = "figures/before_after.png"
GRID_ORIGINALS = 6
THUMB = 160


def _blob_jpeg(blobs: BlobSource, sha256: str) -> bytes:
    return _jpeg(blobs.get(sha256))


def _jpeg(data: bytes) -> bytes:
    return to_release_jpeg(data, "JPEG" if data[:3] == b"\xff\xd8\xff" else "PNG")


def before_after_grid(rows: pa.Table, load: Any, group: int, originals: int = GRID_ORIGINALS) -> bytes:
    """One line per original: the original, then its swaps (`group` images in all), captioned with the ethnicity."""
    lines = [rows.slice(group * k, group).to_pylist() for k in range(min(originals, rows.num_rows // group))]
    line_height = THUMB * 3 // 4 + 14  # 4:3 thumbnails and a caption
    grid = Image.new("RGB", (group * THUMB, max(1, len(lines)) * line_height), (255, 255, 255))
    draw = ImageDraw.Draw(grid)
    for y, line in enumerate(lines):
        for x, row in enumerate(line):
            with Image.open(io.BytesIO(load(row["sha256"]))) as image:
                thumb = image.convert("RGB")
                thumb.thumbnail((THUMB, THUMB))
            grid.paste(thumb, (x * THUMB, y * line_height))
            caption = row["ethnicity"] + (" (placeholder)" if row["placeholder"] else "")
            draw.text((x * THUMB + 2, y * line_height + min(thumb.height, line_height - 14)), caption, fill=(0, 0, 0))
    buffer = io.BytesIO()
    grid.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def write_mixcube_release(
    config: ReleaseConfig,
    blobs: BlobSource,
    rows: pa.Table,
    provenance: dict[str, Any],
    pack: ReferencePack,
    *,
    changelog: str = "",
    progress: StepProgress | None = None,
    workers: int = 1,
) -> ReleaseResult:
    """`pack`: the reference pack the release was built from, carried in `reference/`. `changelog` ends the card
    of a patch release (`flows/mixcube/takedown.py`). The image shards are written in up to `workers` processes.

    A URL-only release (`config.mode` `urls`) keeps the bytes of the swaps (we made them; they have no URL) and
    publishes each original by its `url`, `sha256` and `phash` (a column `rows` must have), with a null `image`;
    it has no WebDataset tars and no before/after grid (the grid shows the originals)."""
    # The manifest names the pack that `reference/` carries, whoever built the provenance (release_pack checks it).
    provenance = {**provenance, "reference": pack.record()}
    stated = validated(Provenance, provenance)  # the card and facts read it typed; the manifest writes `provenance`
    writer = ReleaseWriter(config, NAME)
    urls = config.mode == "urls"
    if urls and "phash" not in rows.column_names:
        raise ValueError("a URL-only MixCuBe release needs the images' `phash` (16 hex digits)")
    schema = pa.schema([*MIXCUBE_ROWS, pa.field("phash", pa.string())]) if urls else MIXCUBE_ROWS
    try:
        rows = rows.select(schema.names).cast(schema)
        images = TableImageRows(
            rows,
            lambda meta: ImageRow(
                key=meta["sample_id"],
                metadata=meta,
                load=partial(_blob_jpeg, blobs, meta["sha256"]),
                embed=bool(meta["synthesized"]) or not urls,
            ),
        )
        shards = writer.write_images("default", images, schema, tars=not urls, progress=progress, workers=workers)
        food = rows.filter(pa.compute.equal(rows["category"], "Food"))
        labels = pa.table(
            {
                "image_file": [f"{s}.jpg" for s in food["sample_id"].to_pylist()],
                "label": food["food_label"],
            }
        )
        writer.write_csv("food_label.csv", labels, ["image_file", "label"])
        for sha in sorted({m for m in rows["mask_sha256"].to_pylist() if m}):
            writer.write_bytes(f"masks/{sha}.png", blobs.get(sha))
        writer.write_reference(pack)
        mix = pack.mixcube()
        if not urls:
            writer.write_bytes(GRID, before_after_grid(rows, blobs.get, 1 + len(mix.ethnicities)))
        writer.write_bytes(DOMAINS_FIGURE, domains_png(_originals(rows)["url"].to_pylist(), "originals"))
        # After the data files (their hashes go into it), before the card (its datasheet states the same facts).
        facts = mixcube_facts(config.version, rows, stated, mode=config.mode)
        held = {c.iso2 for c in mix.cultures if c.adjective in set(rows["country"].to_pylist())}
        facts = croissant.with_pack(facts, pack, {c.name for c in pack.countries if c.iso2 in held})
        jsonld = croissant.croissant_jsonld(facts, writer.files, writer.sizes)
        writer.write_bytes(croissant.FILE, croissant.to_bytes(jsonld))
        card = render_card(rows, shards, stated, facts.languages, config.version, pack, config.mode)
        writer.write_bytes("README.md", (card + datasheet_section(facts) + changelog).encode())
        return writer.commit({"name": NAME, "version": config.version, **provenance, "mode": config.mode})
    except BaseException:
        writer.abort()
        raise


def render_card(
    rows: pa.Table,
    shards: dict[str, list[str]],
    provenance: Provenance,
    languages: Sequence[str],
    version: str,
    pack: ReferencePack,
    mode: str = "images",
) -> str:
    configs = (CardConfig("default", rows.num_rows, default=True, path="default/train-*"),)
    mix = pack.mixcube()
    swaps = len(mix.ethnicities)
    # The default pack's four ethnicities make the paper's quintets; another pack's make groups of 1 + its number.
    groups = "quintets" if swaps == 4 else f"groups of {swaps + 1}"
    names = ", ".join(markdown_text(e.prompt_name) for e in mix.ethnicities)
    food_line = "`food_label.csv` lists the food images with\ntheir native and English names."
    lead = (
        f"Each original photo of food, a festival or clothing is followed by {_count_words(swaps)} copies in which "
        f"the people were inpainted\ninto another ethnicity ({names}), following *When Tom Eats Kimchi* (MixCuBe)."
    )
    head = front_matter(
        card_configs(configs),
        pretty_name="MixCuBe (culturebench build)",
        tags=["cultural-bias", "inpainting"],
        # MixCuBe §3: a VLM is asked about each image (visual question answering), and its answer is scored as the
        # image's country, category or cultural marker (image classification). Names from the Hub's task list.
        extra=hub_metadata(languages, rows.num_rows, ["visual-question-answering", "image-classification"]),
    )
    placeholders = sum(rows["placeholder"].to_pylist())
    demo = provenance.demo
    warnings = []
    if demo:
        warnings.append(demo_notice("the originals are composed from a stock portrait, not collected photos."))
    if placeholders:
        warnings.append(
            f"**{placeholders} images are placeholders, not syntheses** (`placeholder=true`): the offline stand-in "
            "for SDXL inpainting painted their masks."
        )
    reviewers = Counter(r for r in rows["reviewer"].to_pylist() if r)
    notice = auto_accept_notice("synthesized images") if reviewers.get("auto_accept") else ""
    cells = Counter(zip(rows["country"].to_pylist(), rows["category"].to_pylist(), strict=True))
    cell_rows = [{"country": c, "category": k, "images": n} for (c, k), n in sorted(cells.items())]
    incomplete = provenance.incomplete
    body = f"""
# MixCuBe, culturebench build {version}

{url_only_notice(mode, "culturebench fetch-release")}{"".join(f"> {w}{chr(10)}{chr(10)}" for w in warnings)}{notice}
{lead}

{deviations_section(provenance.deviations)}

Columns: `country` (adjective), `category`, `ethnicity` (`original` or the swap), `image`, then `sample_id`,
`original_id`, `attempt_id`, `mask_sha256` (the mask is `masks/<sha256>.png`), `prompt`, `seed`, `model_id`,
`brisque`, `clip_similarity`, `review_decision`, `reviewer`, `placeholder`, `food_label`, `synthesized` (a swap),
then where the original came from (`engine`, `query`, `query_language`, `region`, `rank`, `source_page`, `url`,
`final_url`, `retrieved_at`, `http_status`, `content_type`, `license`, `license_filter`; a swap carries its
original's). Rows are ordered as each original followed by its {swaps} swaps. {food_line}

{rows.num_rows} images ({rows.num_rows // (swaps + 1)} {groups}) in {len(shards["parquet"])} Parquet and
{len(shards["webdataset"])} WebDataset shards. Originals left out for lack of an accepted swap: {len(incomplete)}.
{_losses(provenance)}

{_grid_or_note(mode)}
{webdataset_loading(shards["webdataset"])}
{markdown_table(cell_rows)}
{_sources(rows)}
Provenance (config, code version, seeds, per-file sha256) is in `manifest.json`.
""" + reference_section(pack, culture_rows(pack), CULTURES_NOTE)
    return head + body


CULTURES_NOTE = "Its MixCuBe cultures, with each one's region where the pack has it (-: not among its countries):"


def _count_words(n: int) -> str:
    return {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}.get(n, str(n))


def culture_rows(pack: ReferencePack) -> list[dict[str, str]]:
    """The pack's MixCuBe cultures for the card, escaped (pack text is outside input)."""
    regions = {c.iso2: c.region for c in pack.countries}
    return [
        {
            "culture": markdown_text(c.name),
            "ISO 3166": markdown_text(c.iso2),
            "country column": markdown_text(c.adjective),
            "region": markdown_text(regions[c.iso2]) if c.iso2 in regions else "-",
        }
        for c in pack.mixcube().cultures
    ]


def _grid_or_note(mode: str) -> str:
    if mode == "urls":
        return (
            "URL-only release: the swaps carry their bytes; each original has a null `image` and is named by its\n"
            "`url`, `sha256` and `phash` (`culturebench fetch-release` downloads and checks them)."
        )
    return f"![before and after]({GRID})"


def _originals(rows: pa.Table) -> pa.Table:
    """The released originals (a swap's source columns are its original's, so each original counts once)."""
    return rows.filter(pa.compute.invert(rows["synthesized"]))


def _sources(rows: pa.Table) -> str:
    originals = _originals(rows)
    note = "Counted per original: its four swaps share its source."
    return sources_section(originals["license"].to_pylist(), originals["url"].to_pylist(), "originals", note)


def _losses(provenance: Provenance) -> str:
    """Where originals and swaps were lost, by stage and reason (from the build's provenance)."""
    lines = [
        f"* dropped at `{stage}`: " + ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
        for stage, reasons in provenance.dropped_before_synthesis.items()
    ]
    left = provenance.left_over_by_outcome
    if left:
        lines.append(
            "* swaps never accepted, by their last outcome: "
            + ", ".join(f"{outcome} {n}" for outcome, n in sorted(left.items()))
        )
    short = provenance.cells_below_target
    if short:
        lines.append(
            f"* cells short of {short[0]['target']} originals: "
            + ", ".join(f"{c['country']} {c['category']} {c['originals']}" for c in short)
        )
    return ("\nLosses:\n\n" + "\n".join(lines) + "\n") if lines else ""
