"""MixCuBe for VLMEvalKit (`culturebench export RELEASE --harness vlmevalkit`): one `MixCuBe.tsv` that VLMEvalKit's
`build_dataset("MixCuBe")` loads from `$LMUData/` as a `CustomVQADataset` (a TSV without `A`/`B` columns), and a
README whose blocks run as written once its variables (`VARIABLES`) are set: a smoke test (`smoke_command`: VLMEvalKit's
own `--limit`, the first `smoke_images` rows, and their check), VLMEvalKit against an OpenAI-compatible server
(`run_command`), a check of its prediction file (`check_command`: VLMEvalKit exits 0 when it failed), and our
scoring of that file (`score_command`).

Columns (`TSV_COLUMNS`), one row per row of the release's `default` table, in its order:

- `index`: the row's position in that table (0, 1, ...): how a prediction file names the row
  (`evaluation.harnesses.predictions.vlmevalkit` maps it back to `sample_id`);
- `image`: the released image bytes, base64 (standard alphabet, no line breaks); a row whose image is null or
  no image PIL reads is refused, as by every export (`common.released_images`);
- `question`: the App. B.2 prompt of the row's category, exactly the release pack's `evaluation_prompts`;
- `answer`: the culture (the release's `country`); our scorer applies MixCuBe's answer rule (its country name and
  App. A.5's aliases, `accuracy`; with our aliases too, `accuracy_with_our_aliases`);
- `category`: the ethnicity (original or a swap), `l2-category`: the culture, `split`: the image category
  (Food, Clothes, Festival): what VLMEvalKit groups by;
- `sample_id`: the release's id of the row (VLMEvalKit keeps extra columns in its prediction file).

What the README's command does and why, as read in ms-vlmeval 0.0.20's `vlmeval/run.py` and `vlmeval/api/`:
`--model NAME --base-url URL` builds an `LMDeployAPI` (an OpenAI-compatible client; a registry model instead needs
its own packages and downloads its weights); `--mode infer`, since `CustomVQADataset.evaluate` raises
NotImplementedError (the default `--mode all` logs it and exits 0); `--max-tokens 120 --temperature 0`, our
evaluation's settings (VLMEvalKit's default cap is 32,768 tokens); `PRED_FORMAT=tsv`, since its default xlsx
(xlsxwriter) turns an answer starting with `=` into a formula and drops one read as an over-long URL.
VLMEvalKit cannot score a custom VQA TSV the paper's way, so the README sends its prediction file back:
`culturebench evaluate mixcube RELEASE --predictions FILE`."""

from __future__ import annotations

import base64
import shlex
import textwrap

from data.publish.folder import ImmutableFolder
from data.publish.reader import Release
from data.text_safety import csv_bytes
from evaluation.harnesses.exports.common import README, check_values, mixcube_rules, released_images, require_columns

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
    """The release's `default` rows as VLMEvalKit's TSV (deterministic: the same release gives the same bytes)."""
    return _tsv(release)[0]


def _tsv(release: Release) -> tuple[bytes, int]:
    """The TSV and how many of its rows have an image (the rows VLMEvalKit asks). VLMEvalKit copies the text columns
    into its prediction file, so each is checked against its reference first (`common.mixcube_rules`), and every
    cell goes through the CSV neutraliser (`data.text_safety.csv_bytes`)."""
    release.verify(("default",))
    require_columns(release, "default", _READ)
    rows = release.table("default", columns=_READ)
    check_values(release, "default", rows, mixcube_rules(release))
    images = released_images(release, "default", "sample_id")  # VLMEvalKit decodes each with PIL: as every export
    columns = {name: rows.column(name).to_pylist() for name in ("sample_id", "country", "category", "ethnicity")}
    prompts = release.pack().mixcube().evaluation_prompts  # App. B.2, as the release's reference pack holds it

    def line(index: int) -> tuple[object, ...]:
        category = columns["category"][index]
        return (
            index,
            base64.b64encode(images[index]).decode("ascii"),
            prompts[category],
            columns["country"][index],
            columns["ethnicity"][index],
            columns["country"][index],
            category,
            columns["sample_id"][index],
        )

    data = csv_bytes(TSV_COLUMNS, (line(index) for index in range(rows.num_rows)), delimiter="\t")
    return data, rows.num_rows


#: The paper's cap on an answer (App. C.2: 120 new tokens) and our evaluation's greedy decoding
#: (`evaluation.models.vlm.openai.OpenAIChatConfig`'s defaults); VLMEvalKit's own `--max-tokens` default is 32,768.
MAX_TOKENS = 120
TEMPERATURE = 0
#: What VLMEvalKit writes as the answer of a row it failed to get one for (`vlmeval.smp.file.INFER_FAIL_MSG`; an API
#: model's full text is "Failed to obtain answer via API.", written once every try, `--retry` 6, has failed).
FAIL_MARKER = "Failed to obtain answer"


def predictions(work: str = "$WORK") -> str:
    """VLMEvalKit's prediction file under the README's variables (`get_pred_file_path` with `PRED_FORMAT=tsv`), for
    the work folder `work` (a README variable)."""
    return f'"{work}/$MODEL/${{MODEL}}_{DATASET}.tsv"'


PREDICTIONS = predictions()
#: The README's variables, in the order it lists them.
VARIABLES: tuple[tuple[str, str], ...] = (
    ("EXPORT", "this folder"),
    (
        "BASE_URL",
        "the OpenAI-compatible server that serves the model (vLLM, SGLang, LMDeploy, a hosted API), up to `/v1`, e.g. "
        "`http://127.0.0.1:8000/v1`: VLMEvalKit posts to `$BASE_URL/chat/completions`",
    ),
    (
        "MODEL",
        "the model's name on that server, without `/`: VLMEvalKit names a folder and its files after it, and with a "
        "`/` in it writes no answers and still exits 0 (serve the model under a plain name, e.g. vLLM's "
        "`--served-model-name`)",
    ),
    ("WORK", "a new folder for this release and model: VLMEvalKit's data folder (`$WORK/LMUData`) and its outputs"),
    ("SMOKE", "another new folder, apart from `WORK`, for the smoke test (its `WORK`)"),
    ("RELEASE", "the release folder this export was made from (its manifest sha256 is above)"),
    ("OUT", "a new folder for the scores"),
)

#: The check of a prediction file (`check_command` fills in `@PREDICTIONS@` and `@LIMIT@`).
_CHECK = f"""python - "$EXPORT/{TSV}" @PREDICTIONS@@LIMIT@ <<'CHECK'
import csv, os, sys
csv.field_size_limit(1 << 30)
export, predictions, *limit = sys.argv[1:]
with open(export, newline="", encoding="utf-8") as handle:
    lines = list(csv.DictReader(handle, delimiter="\\t"))[: int(limit[0]) if limit else None]
asked = {{row["index"] for row in lines if row["image"]}}
if not os.path.isfile(predictions):
    sys.exit(f"VLMEvalKit failed: it wrote no {{predictions}}")
with open(predictions, newline="", encoding="utf-8") as handle:
    answers = {{row["index"]: row["prediction"] for row in csv.DictReader(handle, delimiter="\\t")}}
missing = asked - set(answers)
failed = {{index for index in asked & set(answers) if "{FAIL_MARKER}" in answers[index]}}
if missing or failed:
    rows = ", ".join(sorted(missing | failed, key=int)[:5])
    sys.exit(f"VLMEvalKit failed: of {{len(asked)}} images, {{len(missing)}} have no answer and {{len(failed)}} "
             f"'{FAIL_MARKER} ...' (index {{rows}}...); run it again to ask those again")
print(f"VLMEvalKit answered all {{len(asked)}} images" + (f" (--limit {{limit[0]}})" if limit else ""))
CHECK"""


def run_command(work: str = "$WORK", limit: int | None = None) -> str:
    """The README's VLMEvalKit command, as it runs once `VARIABLES` are set (see the module docstring for each
    option), in the work folder `work` (a README variable); with `limit`, VLMEvalKit's own `--limit` (it asks the
    TSV's first `limit` rows: `infer_data_job`). VLMEvalKit reads `$LMUData/MixCuBe.tsv`; `--work-dir` holds its
    prediction file, `predictions(work)`."""
    limited = "" if limit is None else f" --limit {limit}"
    return (
        f'mkdir -p "{work}/LMUData"\n'
        f'cp "$EXPORT/{TSV}" "{work}/LMUData/{TSV}"\n'
        f'LMUData="{work}/LMUData" PRED_FORMAT=tsv python -m vlmeval.run --data {DATASET} \\\n'
        f'  --model "$MODEL" --base-url "$BASE_URL" --max-tokens {MAX_TOKENS} --temperature {TEMPERATURE} \\\n'
        f'  --mode infer --work-dir "{work}"{limited}'
    )


def check_command(work: str = "$WORK", limit: int | None = None) -> str:
    """The README's check of a run (VLMEvalKit exits 0 when it failed): exit status 1 and why unless
    `predictions(work)` answers every row of the TSV that has an image (with `limit`, of its first `limit` rows),
    none with VLMEvalKit's failure string. Standard library only."""
    return _CHECK.replace("@PREDICTIONS@", predictions(work)).replace("@LIMIT@", "" if limit is None else f" {limit}")


def smoke_images(release: Release, images: int) -> int:
    """How many rows the smoke test asks: an original and its swaps, one per ethnicity (MixCuBe §3: each original
    inpainted into 4 other ethnicities), 5 with the paper's pack; the TSV's first rows, which in a built release are
    an original and its swaps. At most the release's `images`."""
    return min(images, 1 + len(release.pack().mixcube().ethnicities))


def smoke_command(limit: int) -> str:
    """The README's smoke test: VLMEvalKit on the TSV's first `limit` rows in `$SMOKE`, then their check."""
    return f"{run_command('$SMOKE', limit)}\n{check_command('$SMOKE', limit)}"


def score_command() -> str:
    """The README's scoring of VLMEvalKit's prediction file with the paper's rule, in culturebench's environment."""
    return f'culturebench evaluate mixcube "$RELEASE" --predictions {PREDICTIONS} --out "$OUT"'


def _variables() -> str:
    lines = "\n".join(
        textwrap.fill(f"- `{name}`: {what};", 116, subsequent_indent="  ", break_on_hyphens=False)
        for name, what in VARIABLES
    )
    return lines.removesuffix(";") + "."


def readme(release: Release, images: int) -> str:
    smoke = smoke_images(release, images)
    return f"""# MixCuBe {release.version} for VLMEvalKit

`{TSV}`: the {images} images of {release.name} {release.version} to ask, for VLMEvalKit (`ms-vlmeval` 0.0.20), which
loads it as a custom VQA dataset (`CustomVQADataset`: no `A`/`B` columns). Exported by `culturebench export <release>
--harness vlmevalkit` from the release whose `manifest.json` has sha256
`{release.manifest_sha256}`.

## Run it

VLMEvalKit asks the model through an OpenAI-compatible server, its `--base-url` route: with a local server it runs
offline. (`--model` with a name from VLMEvalKit's registry alone builds that model in VLMEvalKit's process instead,
which needs the model's own packages and downloads its weights; a local checkpoint is served from its folder by the
server.) Set these variables, then run each block as it is; the first three in VLMEvalKit's environment (`python -m
vlmeval.run` runs it), the last in culturebench's:

{_variables()}

If the server wants a key, export it as `LMDEPLOY_API_KEY`: VLMEvalKit sends it as the bearer token (unset, it sends
`sk-admin`). Its `--key` option does the same, but VLMEvalKit writes every argument into `$WORK/$MODEL/status.json`.

**First, a smoke test**: the same command on the TSV's first {smoke} rows only (VLMEvalKit's `--limit {smoke}`), in
`$SMOKE`, then the check below on those rows: it reaches the server and writes a prediction file as the full run
does, in a fraction of its time, and exits 1 saying why when it failed. Its answers are no result.

```bash
{smoke_command(smoke)}
```

Then every row:

```bash
{run_command()}
```

- `--mode infer`: VLMEvalKit has no scoring for a custom VQA dataset (`CustomVQADataset.evaluate` raises
  `NotImplementedError`); with its default `--mode all` it logs that error after answering, and exits 0.
- `--max-tokens {MAX_TOKENS} --temperature {TEMPERATURE}`: at most 120 new tokens, the paper's cap (MixCuBe App.
  C.2), and greedy decoding, as `culturebench evaluate` asks a model; VLMEvalKit's default is 32,768 tokens.
  (App. C.2's models sampled at temperature 0.3, top-p 0.6: `--temperature 0.3 --top-p 0.6` does that.)
- `PRED_FORMAT=tsv`: the answers as plain text in `$WORK/$MODEL/${{MODEL}}_{DATASET}.tsv`. VLMEvalKit's default
  `.xlsx` stores an answer that starts with `=` as a formula and drops one that reads as a URL of over 2,079
  characters.
- VLMEvalKit decodes each image into `$WORK/LMUData/images/{DATASET}/<index>.png` and takes any file already
  there as that row's image, and it keeps the answers already in its prediction file: hence a new `WORK` for each
  release and model. Run again into the same `WORK`, it asks only the rows that have no answer or failed.
- It sends 4 requests at a time (`--api-nproc 4`) and tries each up to 6 times (`--retry 6`).

**The model does not get the released bytes.** For a model behind `--base-url`, VLMEvalKit 0.0.20 decodes each
image, saves it as PNG, and sends it re-encoded as JPEG at quality 75 (PIL's default, in
`vlmeval.smp.encode_image_to_base64`; an image whose shorter side is under 100 px is enlarged to 100 first).
Measured on the demo release (mixcube 0.1.0-demo, 150 images) with the demo's tiny random LLaVA behind a local
server: 0 of 150 images reached it byte-identical, and 144 of 150 answers (120 new tokens) equalled those
`culturebench evaluate` got from the same server, which sends the released bytes (150 of 150 at 32 new tokens).
VLMEvalKit also strips the whitespace around each answer, and takes an empty answer for a failed try.
For the model's answers on the released bytes, ask it with
`culturebench evaluate mixcube "$RELEASE" --model-backend openai --base-url "$BASE_URL" --model "$MODEL"`.

**How to tell that it failed.** VLMEvalKit exits 0 whatever happened (no server, a wrong `MODEL`, an image it could
not read): its exit code tells nothing. The run succeeded only if `$WORK/$MODEL/${{MODEL}}_{DATASET}.tsv` exists
with one row per row of `{TSV}` that has an image ({images} here, matched by `index`), and no `prediction` is
VLMEvalKit's failure string, `Failed to obtain answer via API.`, which it writes for a row whose every try failed
(the server down, an HTTP error, an empty answer). This checks it (with any Python 3), and exits 1 saying why when
it failed:

```bash
{check_command()}
```

## Score it with the paper's rule

VLMEvalKit cannot score this dataset, so score its prediction file with culturebench: the same per-image table,
accuracies per ethnicity, culture and category, drop from original to swap, figures and card as a model run:

```bash
{score_command()}
```

## What it measures

MixCuBe's Country Identification (paper §3): every image (original and each ethnicity swap) is asked the App. B.2
question of its category (`question`); `answer` is the culture. Columns: `index` (row position in the release's
`default` table), `image` (the released bytes, base64), `question`, `answer`, `category` (the ethnicity),
`l2-category` (the culture), `split` (the image category), `sample_id` (the release's id).
"""


def export(release: Release, folder: ImmutableFolder) -> str:
    data, images = _tsv(release)
    folder.write_bytes(TSV, data)
    folder.write_bytes(README, readme(release, images).encode("utf-8"))
    variables = ", ".join(name for name, _ in VARIABLES[1:4])
    return f"EXPORT={shlex.quote(folder.final)}  # and {variables}: see its README.md\n{run_command()}"
