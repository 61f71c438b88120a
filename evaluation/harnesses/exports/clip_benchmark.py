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

Each dataset also has a split `smoke` (`--split smoke`, clip_benchmark's own option: it reads `<root>/<split>/`):
its first `SMOKE_IMAGES` images, which the README's smoke test runs before the full loop. clip_benchmark has no
option that limits the images of a split.

clip_benchmark 1.6.2 computes top-5 accuracy only for a dataset of at least 5 classes (`acc5` is NaN below;
`clip_benchmark.metrics.zeroshot_classification.evaluate`), and with exactly 5 every image's class is in its top 5
(`acc5` = 1). A language of `TOP5` classes or fewer is warned of, once, at export time and in the README, and the
README's check (`check_command`) leaves its `acc5` out.
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
    spread,
    warning_line,
)

BENCHMARKS = ("3xcm",)
EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp"}
LANGUAGE = re.compile(r"[A-Za-z0-9_-]{1,35}")
#: The split a smoke test reads, and how many images it holds: a handful, ours (no paper sets it).
SMOKE_SPLIT = "smoke"
SMOKE_IMAGES = 5
#: clip_benchmark's top-k: `acc5` needs more classes than this to measure anything (NaN under 5, 1.0 at 5).
TOP5 = 5


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
    classes: dict[str, int] = {}
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
        root = dataset(lang)
        folder.write_bytes(f"{root}/dataset_type.txt", b"classification\n")
        # a smoke test's images, a concept at a time: the first images of a dataset are often all one concept's
        smoke = [classification[at] for at in spread([row["query_concept"] for row in rows], SMOKE_IMAGES)]
        for split, samples in (("test", classification), (SMOKE_SPLIT, smoke)):
            folder.write_bytes(f"{root}/{split}/nshards.txt", b"1\n")
            folder.write_bytes(f"{root}/{split}/0.tar", _tar(samples))
        folder.write_bytes(f"{root}/classnames.txt", "".join(f"{names[c]}\n" for c in concepts).encode())
        folder.write_bytes(f"{root}/zeroshot_classification_templates.txt", b"{c}\n")
        summary.append(f"| {markdown_text(lang)} | {len(rows)} | {len(concepts)} | {len(all_rows) - len(rows)} |")
        classes[lang] = len(concepts)
    langs = sorted(by_language)
    warning = few_classes_warning(classes)
    folder.write_bytes(README, _readme(release, summary, langs, warning).encode())
    return (warning_line(warning) if warning else "") + run_command(langs)


def dataset(lang: str) -> str:
    """The dataset of query language `lang`: its folder in the export, `wds/<it>` to clip_benchmark."""
    return f"3xcm_classification_{lang}"


def few_classes_warning(classes: dict[str, int]) -> str | None:
    """One line naming the languages whose dataset has `TOP5` classes or fewer (their `acc5` means nothing), or
    None."""
    few = {lang: n for lang, n in classes.items() if n <= TOP5}
    if not few:
        return None
    named = ", ".join(f"{dataset(lang)} ({n})" for lang, n in few.items())
    return (
        f"clip_benchmark: {len(few)} of {len(classes)} languages have {TOP5} classes or fewer, {named}: their acc5 is "
        f"not measured (clip_benchmark writes NaN under {TOP5} classes, and 1.0 at {TOP5}) and the README's check "
        "leaves it out; read acc1 and mean_per_class_recall"
    )


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


def _eval(split: str, out: str, indent: str) -> str:
    """One `clip_benchmark eval` of `wds/3xcm_classification_$L`'s `split`, its metrics to `out`/classification_$L.json.
    One shard per dataset, so `--num_workers 0`: with its default of 4 workers, clip_benchmark's WebDataset loader
    finds no samples (it splits the shards between the workers)."""
    return (
        f'{indent}clip_benchmark eval --task zeroshot_classification --dataset "wds/3xcm_classification_$L" \\\n'
        f'{indent}  --dataset_root "$EXPORT/{{dataset}}" --model "$MODEL" --pretrained "$PRETRAINED" \\\n'
        f"{indent}  {f'--split {split} ' if split != 'test' else ''}--num_workers 0 "
        f'--output "{out}/classification_$L.json"'
    )


def run_command(langs: list[str]) -> str:
    """The README's command: every language's dataset, from the variables the README sets out."""
    return f"for L in {' '.join(langs)}; do\n{_eval('test', '$OUT', '  ')}\ndone"


#: The README's check of a run's files (standard library only; clip_benchmark's exit code does not tell): each
#: language's metrics, `acc5` left out where its dataset has `TOP5` classes or fewer; exit 1 naming the languages
#: that left no metrics.
_CHECK = """python - "$EXPORT" "{out}" {langs} <<'CHECK'
import json, os, sys
export, out, languages = sys.argv[1], sys.argv[2], sys.argv[3:]
failed = []
for lang in languages:
    with open(os.path.join(export, f"3xcm_classification_{{lang}}", "classnames.txt"), encoding="utf-8") as handle:
        classes = len(handle.read().splitlines())
    try:
        with open(os.path.join(out, f"classification_{{lang}}.json"), encoding="utf-8") as handle:
            metrics = json.load(handle)["metrics"]
        acc1 = float(metrics["acc1"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        failed.append(f"{{lang}} ({{type(exc).__name__}})")
        continue
    line = f"{{lang}}\\tacc1={{acc1}}\\tmean_per_class_recall={{metrics.get('mean_per_class_recall')}}"
    if classes > {top5}:
        line += f"\\tacc5={{metrics.get('acc5')}}"
    else:  # clip_benchmark's acc5 is NaN under {top5} classes, and 1.0 at {top5}: no measurement
        line += f"\\tacc5 left out ({{classes}} classes)"
    print(line)
if failed:
    sys.exit(f"clip_benchmark failed: no metrics in {{out}} for {{', '.join(failed)}}")
CHECK"""


def check_command(langs: list[str], out: str = "$OUT") -> str:
    """The README's check of the metrics under `out` (a README variable) for `langs`: exit status 1 and why when a
    language left none."""
    return _CHECK.format(out=out, langs=" ".join(langs), top5=TOP5)


def smoke_command(lang: str) -> str:
    """The README's smoke test: the `smoke` split of one language's dataset (`L`, first `lang`) into `$SMOKE`, then
    its check."""
    run = _eval(SMOKE_SPLIT, "$SMOKE", "")
    check = check_command(['"$L"'], "$SMOKE")
    return f'mkdir -p "$SMOKE"\nL={lang}\n{run}\n{check}'


def _readme(release: Release, summary: list[str], langs: list[str], warning: str | None) -> str:
    rows = "\n".join(summary)
    warned = f"\n**Warning:** {warning}.\n" if warning else ""
    return f"""# {release.name} {release.version} for clip_benchmark 1.6.2 (`wds` datasets)

Per query language L, one zero-shot classification dataset, `wds/3xcm_classification_<L>`: the images are the RQ2
query images whose query is in L (the released bytes; `.json` names each image_id), the class (`.cls`) is the
image's concept, named in `classnames.txt` by its query text in L, template `{{c}}`. A picture that is the query
image of two concepts (the same decoded pixels) has no single right class, and is left out.

| L | images | concepts | left out: one picture under two concepts |
|---|---|---|---|
{rows}
{warned}
## Run

Set five variables, then run the blocks as they are:

- `EXPORT`: this folder;
- `MODEL` and `PRETRAINED`: an open_clip model, e.g. `ViT-B-32` and `laion2b_s34b_b79k`. A local checkpoint: a
  folder with `open_clip_config.json` (`{{"model_cfg": ..., "preprocess_cfg": {{}}}}`) and the weights as
  `open_clip_pytorch_model.bin` (open_clip's own layout), as `MODEL=local-dir:/path/to/folder` (open_clip then
  ignores `PRETRAINED`; set it to `none`). open_clip reads only a `.safetensors`, `.bin` or `.pth` file there: with
  a `.pt` one it logs a warning and scores a random model. culturebench's docs (`docs/researchers.md`, "A local
  checkpoint, offline") make such a folder from its demo's model;
- `OUT`: an existing folder for the results, outside this one;
- `SMOKE`: a folder for the smoke test's results, apart from `OUT` (created).

**First, a smoke test**: {SMOKE_IMAGES} images of one language, and the check of its metrics. Each dataset has a
split `{SMOKE_SPLIT}` besides `test`: {SMOKE_IMAGES} of its images, a concept at a time (clip_benchmark reads it with
its own `--split {SMOKE_SPLIT}`; it has no option that limits a split's images). It loads the model and reads the
data as the full run does, in a fraction of its time; change `L` for another language. Its numbers are no result.

```bash
{smoke_command(langs[0])}
```

Then every language, the full split `test`:

```bash
{run_command(langs)}
```

`--num_workers 0` matters: each dataset is one shard, and with clip_benchmark's default of 4 workers its WebDataset
loader finds no samples.

**How to tell that it failed.** Each language must leave `$OUT/classification_<L>.json` with `metrics.acc1`; a
missing file means that language failed, whatever the exit code said. This checks it, prints each language's
metrics (`acc5` only where its dataset has more than {TOP5} classes: clip_benchmark writes NaN under {TOP5}, and with
{TOP5} every image's class is in its top {TOP5}), and exits 1 naming the languages that left none:

```bash
{check_command(langs)}
```

## What it measures, and what not

Concept recognition in L among the images of L's countries (zero-shot top-1 accuracy, mean per-class recall, and
top-5 accuracy where L has more than {TOP5} concepts). **This is not the paper's metric**: clip_benchmark has no
per-query candidate sets, so 3XCM's triplets and sextets (correct vs language-biased vs irrelevant image) cannot be
expressed in its format, and M_cr, M_lb, M_ti and SP are not measured. For those, use `culturebench evaluate 3xcm`
(or `--harness mteb`, whose accuracy is M_cr).

There are no retrieval datasets: many images share one caption (their concept's name), and clip_benchmark's
retrieval counts only an image's own caption as its positive, so even a perfect concept recogniser would score a
recall@1 of about one over the images per concept.

Release manifest sha256: `{release.manifest_sha256}`.
"""
