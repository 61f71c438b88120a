"""MixCuBe for VLMEvalKit (`culturebench export RELEASE --harness vlmevalkit`): one `MixCuBe.tsv` that VLMEvalKit's
`build_dataset("MixCuBe")` loads from `$LMUData/` as a `CustomVQADataset` (a TSV without `A`/`B` columns).

Columns (`TSV_COLUMNS`), one row per row of the release's `default` table, in its order:

- `index`: the row's position in that table (0, 1, ...): how a prediction file names the row
  (`evaluation.predictions.vlmevalkit` maps it back to `sample_id`);
- `image`: the released image bytes, base64 (standard alphabet, no line breaks); empty for a row without bytes,
  which VLMEvalKit skips (and no prediction is expected for it);
- `question`: the App. B.2 prompt of the row's category, exactly the release pack's `evaluation_prompts`;
- `answer`: the culture (the release's `country`); our scorer applies MixCuBe's answer rule (its country name and
  App. A.5's aliases, `accuracy`; with our aliases too, `accuracy_with_our_aliases`);
- `category`: the ethnicity (original or a swap), `l2-category`: the culture, `split`: the image category
  (Food, Clothes, Festival): what VLMEvalKit groups by;
- `sample_id`: the release's id of the row (VLMEvalKit keeps extra columns in its prediction file).

VLMEvalKit cannot score a custom VQA TSV the paper's way (`CustomVQADataset.evaluate` is not implemented), so the
README sends its prediction file back: `culturebench evaluate mixcube RELEASE --predictions FILE`."""

from __future__ import annotations

import base64

from data.publish.folder import ImmutableFolder
from data.publish.reader import Release
from data.text_safety import csv_bytes
from evaluation import mixcube as mx
from evaluation.exports.common import README, ExportError, check_values, image_format, mixcube_rules, require_columns

BENCHMARKS: tuple[str, ...] = ("mixcube",)
DATASET = "MixCuBe"
TSV = f"{DATASET}.tsv"
TSV_COLUMNS: tuple[str, ...] = (
    "index",
    "image",
    "question",
    "answer",
    "category",
    "l2-category",
    "split",
    "sample_id",
)
_READ = ["sample_id", "country", "category", "ethnicity", "image"]


def tsv_bytes(release: Release) -> bytes:
    """The release's `default` rows as VLMEvalKit's TSV (deterministic: the same release gives the same bytes).
    VLMEvalKit copies the text columns into its xlsx, so each is checked against its reference first
    (`common.mixcube_rules`), and every cell goes through the CSV neutraliser (`data.text_safety.csv_bytes`)."""
    release.verify(("default",))
    require_columns(release, "default", _READ)
    rows = release.table("default", columns=_READ)
    check_values(release, "default", rows, mixcube_rules(release))
    try:
        images = mx._image_bytes(rows)
    except ValueError as exc:
        raise ExportError(f"{release.path / 'default'}: {exc}") from None
    columns = {name: rows.column(name).to_pylist() for name in ("sample_id", "country", "category", "ethnicity")}
    prompts = release.pack().mixcube().evaluation_prompts  # App. B.2, as the release's reference pack holds it

    def line(index: int) -> tuple[object, ...]:
        image = images[index].as_py()
        if image is not None:  # VLMEvalKit decodes it with PIL: bytes that are no image are refused here, by row
            image_format(image, release, "default", index, columns["sample_id"][index])
        category = columns["category"][index]
        return (
            index,
            base64.b64encode(image).decode("ascii") if image is not None else "",
            prompts[category],
            columns["country"][index],
            columns["ethnicity"][index],
            columns["country"][index],
            category,
            columns["sample_id"][index],
        )

    return csv_bytes(TSV_COLUMNS, (line(index) for index in range(rows.num_rows)), delimiter="\t")


def command(model: str = "<model>") -> str:
    return f"LMUData=/path/to/lmudata python -m vlmeval.run --data {DATASET} --model {model} --mode infer"


def readme(release: Release) -> str:
    return f"""# MixCuBe {release.version} for VLMEvalKit

Exported by `culturebench export <release> --harness vlmevalkit` from {release.name} {release.version}, the release
whose `manifest.json` has sha256 `{release.manifest_sha256}`.

## Run

Copy `{TSV}` into VLMEvalKit's data folder (`$LMUData`, by default `~/LMUData`) and ask a model:

```bash
cp {TSV} /path/to/lmudata/
{command()}
```

(`python run.py --data {DATASET} --model <model> --mode infer` from a VLMEvalKit checkout does the same.)
VLMEvalKit loads the file as a custom VQA dataset (`CustomVQADataset`: no `A`/`B` columns) and writes its answers
to `<work-dir>/<model>/<model>_{DATASET}.xlsx` (`.tsv` with `PRED_FORMAT=tsv`).

## What it measures

MixCuBe's Country Identification (paper §3): every image (original and each ethnicity swap) is asked the App. B.2
question of its category (`question`); `answer` is the culture. Columns: `index` (row position in the release's
`default` table), `image` (the released bytes, base64), `question`, `answer`, `category` (the ethnicity),
`l2-category` (the culture), `split` (the image category), `sample_id` (the release's id).

## Score it with the paper's rule

VLMEvalKit's own scoring of a custom VQA TSV is not the paper's (it has none for this dataset type), so bring the
prediction file back and score it with culturebench: the same per-image table, accuracies per ethnicity, culture
and category, drop from original to swap, figures and card as a model run:

```bash
culturebench evaluate mixcube <release> --predictions <work-dir>/<model>/<model>_{DATASET}.xlsx --out <folder>
```
"""


def export(release: Release, folder: ImmutableFolder) -> str:
    folder.write_bytes(TSV, tsv_bytes(release))
    folder.write_bytes(README, readme(release).encode("utf-8"))
    return command()
