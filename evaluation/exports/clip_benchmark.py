"""`culturebench export RELEASE --harness clip-benchmark`: 3XCM's query images as clip_benchmark 1.6.2 `wds`
datasets, one retrieval and one zero-shot classification dataset per query language.

For query language L, the images are the RQ2 query images whose query is in L; each image's caption (`.txt`) is its
query text (the concept in L), and its class (`.cls`) is its concept, named (`classnames.txt`) by that concept's
query text in L, with the plain template `{c}`. This measures concept recognition in L among the images of L's
countries: not the paper's M_cr / M_lb / SP, since clip_benchmark has no per-query candidate sets (the triplets
cannot be expressed in its format). Tars are written with fixed mtime, owner and order: the same release gives the
same bytes.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections import defaultdict
from typing import Any

from PIL import Image

from data.concept_names import invalid_name
from data.publish.folder import ImmutableFolder
from data.publish.reader import Release
from evaluation.exports.common import (
    README,
    Allowed,
    check_values,
    image_format,
    plain_text,
    refuse,
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


def languages(release: Release) -> dict[str, list[dict[str, Any]]]:
    """Query language -> its RQ2 queries' images, each once (first row wins), in release order; each row with its
    `row` in the benchmark table (for messages)."""
    require_columns(release, "benchmark", _QUERY_COLUMNS)
    table = release.table("benchmark", _QUERY_COLUMNS)
    check_values(release, "benchmark", table, _query_rules())
    by_language: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row, record in enumerate(table.to_pylist()):
        by_language[record["query_language"]].setdefault(record["query_image_id"], {**record, "row": row})
    return {lang: list(rows.values()) for lang, rows in sorted(by_language.items())}


def _images(release: Release) -> dict[str, tuple[int, Any]]:
    """image_id -> (its row in image_metadata, its released bytes or None)."""
    require_columns(release, "image_metadata", ["image_id", "image"])
    table = release.table("image_metadata", ["image_id", "image"])
    return {
        row["image_id"]: (at, row["image"].get("bytes") if isinstance(row["image"], dict) else row["image"])
        for at, row in enumerate(table.to_pylist())
    }


def export(release: Release, folder: ImmutableFolder) -> str:
    release.verify(["image_metadata", "benchmark"])
    data = _images(release)
    summary: list[str] = []
    for lang, rows in languages(release).items():
        concepts = sorted({row["query_concept"] for row in rows})
        names: dict[str, str] = {}
        for row in rows:
            names.setdefault(row["query_concept"], row["query_text"])
        retrieval, classification = [], []
        for position, row in enumerate(rows):
            key = f"{position:06d}"
            image_id = row["query_image_id"]
            if image_id not in data:
                raise refuse(release, "benchmark", row["row"], "query_image_id", image_id, "an image of image_metadata")
            at, raw = data[image_id]
            ext, image = _image(raw, image_format(raw, release, "image_metadata", at, image_id))
            meta = json.dumps({"image_id": image_id, "concept": row["query_concept"]}, ensure_ascii=False).encode()
            retrieval.append({f"{key}.{ext}": image, f"{key}.txt": row["query_text"].encode(), f"{key}.json": meta})
            cls = str(concepts.index(row["query_concept"])).encode()
            classification.append({f"{key}.{ext}": image, f"{key}.cls": cls, f"{key}.json": meta})
        for kind, samples in (("retrieval", retrieval), ("classification", classification)):
            root = f"3xcm_{kind}_{lang}"
            folder.write_bytes(f"{root}/dataset_type.txt", f"{kind}\n".encode())
            folder.write_bytes(f"{root}/test/nshards.txt", b"1\n")
            folder.write_bytes(f"{root}/test/0.tar", _tar(samples))
            if kind == "classification":
                folder.write_bytes(f"{root}/classnames.txt", "".join(f"{names[c]}\n" for c in concepts).encode())
                folder.write_bytes(f"{root}/zeroshot_classification_templates.txt", b"{c}\n")
        summary.append(f"| {lang} | {len(rows)} | {len(concepts)} |")
    command = (
        "clip_benchmark eval --task zeroshot_retrieval --dataset wds/3xcm_retrieval_<L> "
        "--dataset_root '<this folder>/{dataset}' --model MODEL --pretrained WEIGHTS --output retrieval_<L>.json && "
        "clip_benchmark eval --task zeroshot_classification --dataset wds/3xcm_classification_<L> "
        "--dataset_root '<this folder>/{dataset}' --model MODEL --pretrained WEIGHTS --output classification_<L>.json"
    )
    folder.write_bytes(README, _readme(release, summary, command).encode())
    return command


def _readme(release: Release, summary: list[str], command: str) -> str:
    rows = "\n".join(summary)
    return f"""# {release.name} {release.version} for clip_benchmark 1.6.2 (`wds` datasets)

Per query language L, two datasets (`--dataset wds/<folder>`):

- `3xcm_retrieval_<L>`: image-text retrieval; each image's caption (`.txt`) is its 3XCM query text in L.
- `3xcm_classification_<L>`: zero-shot classification; the class (`.cls`) is the image's concept, named in
  `classnames.txt` by its query text in L, template `{{c}}`.

The images are the RQ2 query images whose query is in L (the released bytes; `.json` names each image_id).

| L | images | concepts |
|---|---|---|
{rows}

## Run

```bash
{command}
```

(`--task` must be given: clip_benchmark's default task for a `wds/` name is classification.
`--dataset_root` is a plain folder path with `{{dataset}}` in it; a non-registered open_clip architecture needs
`open_clip.add_model_config` first.)

## What it measures, and what not

Concept recognition in L among the images of L's countries (recall@k, zero-shot accuracy). **This is not the
paper's metric**: clip_benchmark has no per-query candidate sets, so 3XCM's triplets and sextets (correct vs
language-biased vs irrelevant image) cannot be expressed in its format, and M_cr, M_lb, M_ti and SP are not
measured. For those, use `culturebench evaluate 3xcm` (or `--harness mteb`, whose accuracy is M_cr).

Release manifest sha256: `{release.manifest_sha256}`.
"""
