"""`culturebench export RELEASE --harness clip-benchmark`: 3XCM's query images as clip_benchmark 1.6.2 `wds`
zero-shot classification datasets, one per query language.

For query language L, the images are the RQ2 query images whose query is in L; each image's class (`.cls`) is its
concept, named (`classnames.txt`) by that concept's query text in L, with the plain template `{c}`. This measures
concept recognition in L among the images of L's countries: not the paper's M_cr / M_lb / SP, since clip_benchmark
has no per-query candidate sets (the triplets cannot be expressed in its format).

No retrieval datasets: many images share one caption (their concept's name), and clip_benchmark's retrieval counts
only an image's own caption as its positive, so a perfect concept recogniser would score R@1 of about 1 / (images
per concept), 0.08 to 0.17 on the demo. Classification has the concept as its label, and a perfect recogniser scores
1.0 (tests/evaluation/harnesses/exports/test_clip_benchmark.py). Tars are written with fixed mtime, owner and order:
the same release gives the same bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from collections import defaultdict
from typing import TypedDict

from PIL import Image

from data.concept_names import invalid_name
from data.publish.folder import ImmutableFolder
from data.publish.reader import Release
from data.text_safety import markdown_text
from evaluation.harnesses.exports.common import (
    README,
    Allowed,
    check_values,
    image_format,
    plain_text,
    refuse,
    released_images,
    require_columns,
)

BENCHMARKS = ("3xcm",)
EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp"}
LANGUAGE = re.compile(r"[A-Za-z0-9_-]{1,35}")


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def _image(data: bytes, fmt: str) -> tuple[str, bytes]:
    """(extension, bytes): the released bytes when clip_benchmark decodes their format (`fmt`, as PIL read it), else
    a lossless PNG."""
    if fmt in EXTENSIONS:
        return EXTENSIONS[fmt], data
    with Image.open(io.BytesIO(data)) as image:
        out = io.BytesIO()
        image.convert("RGB").save(out, format="PNG")
        return "png", out.getvalue()


def _tar(samples: list[dict[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for sample in samples:
            for name, data in sample.items():
                _member(tar, name, data)
    return out.getvalue()


#: The benchmark columns the export reads, and what each must hold: the concept names a class (one per line of
#: `classnames.txt`, by its query text), the language a folder.
_QUERY_COLUMNS = ["query_image_id", "query_concept", "query_language", "query_text"]


class _QueryColumns(TypedDict):
    """A benchmark row's `_QUERY_COLUMNS`."""

    query_image_id: str
    query_concept: str
    query_language: str
    query_text: str


class QueryImage(_QueryColumns):
    """An RQ2 query image: its first benchmark row's query columns, and that row's position (for messages)."""

    row: int


def _query_rules() -> dict[str, Allowed]:
    concept = Allowed(lambda value: invalid_name(value) is None, "a concept name (data/concept_names.py)")
    language = Allowed(
        lambda value: isinstance(value, str) and LANGUAGE.fullmatch(value) is not None,
        "a language code that can name a dataset folder (letters, digits, '-', '_')",
    )
    return {
        "query_concept": concept,
        "query_language": language,
        "query_text": plain_text("a query text on one line, without control or format characters"),
        "query_image_id": plain_text("an image id on one line, without control or format characters"),
    }


def languages(release: Release) -> dict[str, list[QueryImage]]:
    """Query language -> its RQ2 queries' images, each once (first row wins), in release order; each row with its
    `row` in the benchmark table (for messages)."""
    require_columns(release, "benchmark", _QUERY_COLUMNS)
    table = release.table("benchmark", _QUERY_COLUMNS)
    check_values(release, "benchmark", table, _query_rules())
    by_language: dict[str, dict[str, QueryImage]] = defaultdict(dict)
    records: list[_QueryColumns] = table.to_pylist()
    for row, record in enumerate(records):
        by_language[record["query_language"]].setdefault(record["query_image_id"], {**record, "row": row})
    return {lang: list(rows.values()) for lang, rows in sorted(by_language.items())}


def _images(release: Release) -> dict[str, tuple[int, bytes]]:
    """image_id -> (its row in image_metadata, its released bytes or None)."""
    images = released_images(release, "image_metadata", "image_id")  # as every export asks
    ids = release.table("image_metadata", ["image_id"])["image_id"].to_pylist()
    return {image_id: (at, data) for at, (image_id, data) in enumerate(zip(ids, images, strict=True))}


def export(release: Release, folder: ImmutableFolder) -> str:
    release.verify(["image_metadata", "benchmark"])
    data = _images(release)
    summary: list[str] = []
    by_language = languages(release)
    for lang, all_rows in by_language.items():
        pixels = {row["query_image_id"]: _pixels(release, data, row) for row in all_rows}
        rows = unambiguous(all_rows, pixels)
        concepts = sorted({row["query_concept"] for row in rows})
        names: dict[str, str] = {}
        for row in rows:
            names.setdefault(row["query_concept"], row["query_text"])
        classification = []
        for position, row in enumerate(rows):
            key = f"{position:06d}"
            image_id = row["query_image_id"]
            ext, image = _image(data[image_id][1], pixels[image_id][0])
            meta = json.dumps({"image_id": image_id, "concept": row["query_concept"]}, ensure_ascii=False).encode()
            cls = str(concepts.index(row["query_concept"])).encode()
            classification.append({f"{key}.{ext}": image, f"{key}.cls": cls, f"{key}.json": meta})
        root = f"3xcm_classification_{lang}"
        folder.write_bytes(f"{root}/dataset_type.txt", b"classification\n")
        folder.write_bytes(f"{root}/test/nshards.txt", b"1\n")
        folder.write_bytes(f"{root}/test/0.tar", _tar(classification))
        folder.write_bytes(f"{root}/classnames.txt", "".join(f"{names[c]}\n" for c in concepts).encode())
        folder.write_bytes(f"{root}/zeroshot_classification_templates.txt", b"{c}\n")
        summary.append(f"| {markdown_text(lang)} | {len(rows)} | {len(concepts)} | {len(all_rows) - len(rows)} |")
    command = run_command(sorted(by_language))
    folder.write_bytes(README, _readme(release, summary, command).encode())
    return command


def _pixels(release: Release, data: dict[str, tuple[int, bytes]], row: QueryImage) -> tuple[str, str]:
    """(PIL's format name, sha256 of the decoded RGB pixels) of a query image; ExportError when it has none."""
    image_id = row["query_image_id"]
    if image_id not in data:
        raise refuse(release, "benchmark", row["row"], "query_image_id", image_id, "an image of image_metadata")
    at, raw = data[image_id]
    fmt = image_format(raw, release, "image_metadata", at, image_id)
    with Image.open(io.BytesIO(raw)) as image:
        return fmt, hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()


def unambiguous(rows: list[QueryImage], pixels: dict[str, tuple[str, str]]) -> list[QueryImage]:
    """The rows whose picture no row of another concept shows too: one label per picture. The same picture filed
    under two concepts (a copy across concepts; the validator lets it be a query of each) has no single right class,
    and would cap a perfect recogniser below 1.0."""
    concepts_of: defaultdict[str, set[str]] = defaultdict(set)
    for row in rows:
        concepts_of[pixels[row["query_image_id"]][1]].add(row["query_concept"])
    return [row for row in rows if len(concepts_of[pixels[row["query_image_id"]][1]]) == 1]


def run_command(langs: list[str]) -> str:
    """The README's command: every language's dataset, from the variables the README sets out. One shard per
    dataset, so `--num_workers 0`: with its default of 4 workers, clip_benchmark's WebDataset loader finds no
    samples (it splits the shards between the workers)."""
    return (
        f"for L in {' '.join(langs)}; do\n"
        '  clip_benchmark eval --task zeroshot_classification --dataset "wds/3xcm_classification_$L" \\\n'
        '    --dataset_root "$EXPORT/{dataset}" --model "$MODEL" --pretrained "$PRETRAINED" \\\n'
        '    --num_workers 0 --output "$OUT/classification_$L.json"\n'
        "done"
    )


def _readme(release: Release, summary: list[str], command: str) -> str:
    rows = "\n".join(summary)
    return f"""# {release.name} {release.version} for clip_benchmark 1.6.2 (`wds` datasets)

Per query language L, one zero-shot classification dataset, `wds/3xcm_classification_<L>`: the images are the RQ2
query images whose query is in L (the released bytes; `.json` names each image_id), the class (`.cls`) is the
image's concept, named in `classnames.txt` by its query text in L, template `{{c}}`. A picture that is the query
image of two concepts (the same decoded pixels) has no single right class, and is left out.

| L | images | concepts | left out: one picture under two concepts |
|---|---|---|---|
{rows}

## Run

Set four variables, then run the loop as it is:

- `EXPORT`: this folder;
- `MODEL` and `PRETRAINED`: an open_clip model, e.g. `ViT-B-32` and `laion2b_s34b_b79k`. A local checkpoint: a
  folder with `open_clip_config.json` and `open_clip_pytorch_model.bin` (open_clip's own layout), as
  `MODEL=local-dir:/path/to/folder` (open_clip then ignores `PRETRAINED`; set it to `none`);
- `OUT`: an existing folder for the results, outside this one.

```bash
{command}
```

`--num_workers 0` matters: each dataset is one shard, and with clip_benchmark's default of 4 workers its WebDataset
loader finds no samples.

**How to tell that it failed.** Each language must leave `$OUT/classification_<L>.json` with `metrics.acc1`; a
missing file means that language failed, whatever the exit code said.

## What it measures, and what not

Concept recognition in L among the images of L's countries (zero-shot top-1 and top-5 accuracy). **This is not the
paper's metric**: clip_benchmark has no per-query candidate sets, so 3XCM's triplets and sextets (correct vs
language-biased vs irrelevant image) cannot be expressed in its format, and M_cr, M_lb, M_ti and SP are not
measured. For those, use `culturebench evaluate 3xcm` (or `--harness mteb`, whose accuracy is M_cr).

There are no retrieval datasets: many images share one caption (their concept's name), and clip_benchmark's
retrieval counts only an image's own caption as its positive, so even a perfect concept recogniser would score a
recall@1 of about one over the images per concept.

Release manifest sha256: `{release.manifest_sha256}`.
"""
