"""MixCuBe for lmms-eval (`culturebench export RELEASE --harness lmms-eval`): a task folder that
`python -m lmms_eval --include_path FOLDER --tasks culturebench_mixcube` runs offline.

The export writes

- `culturebench_mixcube/culturebench_mixcube.yaml`: the task. Its `dataset_path` is the release folder itself
  (absolute, read-only: lmms-eval's `datasets.load_dataset` reads the card's `default` config, split `train`); no
  image is copied. `generate_until`, greedy, 120 new tokens at most (App. C.2's cap, as `culturebench evaluate`),
  no stop string (`until: []`: lmms-eval's default, a blank line, would have some models cut the answer there).
  Its `dataset_kwargs` key the datasets cache by the release's manifest (`cache_key`).
- `culturebench_mixcube/utils.py`: `evaluation/harnesses/exports/lmms_eval_task.py` with its data block filled in: the
  App. B.2 prompts (the release pack's `evaluation_prompts`), the ground-truth terms of every culture by the paper's
  rule and our aliases apart (`evaluation.mixcube.task.ground_truth_terms`), the lookup from a culture's spellings to
  them, and every country's names (`evaluation.mixcube.task.country_names`, written as data: the task needs no Babel),
  so that the task imports neither culturebench nor anything but the standard library. Its `verdict` is our
  scorer's, copied (`evaluation/mixcube/answer_match.py`).
- `README.md`: a smoke test first (`smoke_command`: the command with lmms-eval's `--limit` on the first
  `smoke_images` images, and its check), the command, run as written once its variables are set (`run_command`),
  how to tell that it failed (lmms-eval 0.7.3 exits 0 all the same: `check_command`), and what it measures.

Only the Country Identification task is exported: Cultural Marker Identification needs a judge model (App. B.3),
which an lmms-eval task cannot call offline; `culturebench evaluate mixcube` scores it.

The same release gives the same bytes (the release's absolute path is part of the YAML)."""

from __future__ import annotations

import json
import shlex
import textwrap
from collections import Counter
from pathlib import Path

from data.publish.folder import ImmutableFolder
from data.publish.reader import Release
from data.reference import MixCubeReference
from data.text_safety import code_span, markdown_text
from evaluation.harnesses.exports.common import README, check_values, mixcube_rules, released_images, require_columns
from evaluation.mixcube import answer_match
from evaluation.mixcube import task as mx

BENCHMARKS: tuple[str, ...] = ("mixcube",)
TASK = "culturebench_mixcube"
TASK_YAML = f"{TASK}/{TASK}.yaml"
TASK_UTILS = f"{TASK}/utils.py"
TEMPLATE = Path(__file__).with_name("lmms_eval_task.py")
MAX_NEW_TOKENS = 120
#: (metric, aggregation function in utils.py, higher is better)
METRICS: tuple[tuple[str, str, bool], ...] = (
    ("mixcube_accuracy", "accuracy", True),
    ("mixcube_accuracy_with_our_aliases", "accuracy_with_our_aliases", True),
    ("mixcube_negated_answers", "negated_answers", False),
    ("mixcube_accuracy_by_ethnicity", "accuracy_by_ethnicity", True),
    ("mixcube_accuracy_by_country", "accuracy_by_country", True),
    ("mixcube_accuracy_with_our_aliases_by_country", "accuracy_with_our_aliases_by_country", True),
    ("mixcube_accuracy_by_category", "accuracy_by_category", True),
    ("mixcube_drop_by_ethnicity", "drop_by_ethnicity", False),
    ("mixcube_swap_drops", "swap_drops", False),
)
_DATA_START = "# -- data (written at export time)"
_DATA_END = "# -- end of data"
_ANSWER_MATCH_IMPORT = (
    "# The export inlines evaluation/mixcube/answer_match.py's code here: the task imports no culturebench.\n"
    "from evaluation.mixcube.answer_match import CORRECT, NEGATED, answer_verdict  # culturebench: inline\n"
)
_ANSWER_MATCH_START = "# -- copied into exported tasks from here"
_READ = ["sample_id", "country", "category", "ethnicity"]


def _escaped(json_text: str) -> str:
    """JSON text with every unprintable character its strings hold raw (DEL, C1 controls such as NEL, the line and
    paragraph separators, bidi and other format characters) written as a `\\u`/`\\U` escape, which Python and
    YAML both read back as that character: JSON leaves them raw, and YAML would take NEL or U+2028 for a line break.
    (A newline outside the strings is JSON's indentation; inside them JSON has escaped it already.)"""
    return "".join(
        c if c.isprintable() or c == "\n" else (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
        for c in json_text
    )


def _literal(value: object) -> str:
    """A Python literal of strings, lists and dicts (JSON's syntax for them is Python's)."""
    return _escaped(json.dumps(value, ensure_ascii=False, indent=4))


def release_path(release: Release) -> str:
    """The release's absolute path as the task's files name it (`run_export` has refused one that is not UTF-8)."""
    return str(release.path.resolve())


def utils_source(release: Release) -> str:
    """The task's utils.py: the template with the release's and the scorer's data written into its data block."""
    ref = release.pack().mixcube()  # the release's own cultures, prompts and aliases
    keys: dict[str, str] = {}
    for culture in ref.cultures:  # the first culture a spelling names wins, as evaluation.mixcube.task._culture
        for key in (culture.adjective, culture.name, culture.iso2):
            keys.setdefault(key.lower(), culture.adjective)
    data = {
        "RELEASE: dict[str, str]": {
            "name": release.name,
            "version": release.version,
            "path": release_path(release),
            "manifest_sha256": release.manifest_sha256,
        },
        "ORIGINAL": ref.original_label,
        "COUNTRY_PROMPTS: dict[str, str]": dict(ref.evaluation_prompts),
        "GROUND_TRUTH_TERMS: dict[str, list[str]]": {
            c.adjective: list(mx.ground_truth_terms(c.adjective, ref)) for c in ref.cultures
        },
        "OUR_ALIASES: dict[str, list[str]]": {c.adjective: _our_aliases(c.adjective, ref) for c in ref.cultures},
        "CULTURE_KEYS: dict[str, str]": keys,
        "CULTURE_CODES: dict[str, str]": {c.adjective: c.iso2.upper() for c in ref.cultures},
        "COUNTRY_NAMES: dict[str, list[str]]": mx.country_names(ref),
        "ORDER: dict[str, list[str]]": {
            "country": [c.adjective for c in ref.cultures],
            "category": list(ref.categories),
            "ethnicity": [ref.original_label, *(e.label for e in ref.ethnicities)],
        },
    }
    template = TEMPLATE.read_text(encoding="utf-8")
    start = template.index(_DATA_START)
    block_start = template.index("\n", start) + 1
    block_end = template.index(_DATA_END)
    block = "".join(f"{name} = {_literal(value)}\n" for name, value in data.items())
    return _inline_answer_match(template[:block_start] + block + template[block_end:])


def _our_aliases(adjective: str, ref: MixCubeReference) -> list[str]:
    """The terms our aliases add to the paper's for a culture (ours, not the paper's)."""
    paper = mx.ground_truth_terms(adjective, ref)
    return [t for t in mx.ground_truth_terms(adjective, ref, ours=True) if t not in paper]


def _inline_answer_match(text: str) -> str:
    """The template's import of `evaluation.mixcube.answer_match` replaced by that module's imports and code: the
    scoring rule has one home, and the exported task still imports no culturebench."""
    source = Path(answer_match.__file__).read_text(encoding="utf-8")
    future = "from __future__ import annotations\n"  # the template has its own; the imports follow it
    imports = source[source.index(future) + len(future) : source.index(_ANSWER_MATCH_START)]
    code = source[source.index("\n", source.index(_ANSWER_MATCH_START)) + 1 :]
    if _ANSWER_MATCH_IMPORT not in text:
        raise ValueError(f"{TEMPLATE}: no `{_ANSWER_MATCH_IMPORT.strip()}` line to replace")
    return text.replace(_ANSWER_MATCH_IMPORT, (imports + code).strip() + "\n")


def _yaml_string(text: str) -> str:
    return _escaped(json.dumps(text, ensure_ascii=False))  # a JSON string is a YAML double-quoted scalar


def cache_key(release: Release) -> str:
    """What the YAML's `dataset_kwargs` give `datasets.load_dataset` as the config's `description` (lmms-eval 0.7.3
    passes them on, `ConfigurableTask.download`): a config kwarg, which datasets 5.2 hashes into the cache folder's
    config id (`BuilderConfig.create_config_id`). Without one, a local folder's cache is
    `<datasets cache>/<folder name>/default/0.0.0/<hash of the card's YAML>`: nothing of its parent path or its
    files, so two releases in folders of one name (two `0.1.0-demo`) share it, and the second loads the first's
    rows. The manifest's sha256 keys each release apart; the same release anywhere reuses its cache."""
    return f"culturebench {release.name} {release.version}, manifest sha256 {release.manifest_sha256}"


def task_yaml(release: Release) -> str:
    metrics = "".join(
        f"  - metric: {metric}\n    aggregation: !function utils.{function}\n"
        f"    higher_is_better: {'true' if higher else 'false'}\n"
        for metric, function, higher in METRICS
    )
    return (
        f"# MixCuBe {release.version}, Country Identification (App. B.2 prompts, §3 scoring): a culturebench export.\n"
        "# dataset_path is the release folder itself, read-only: nothing is copied.\n"
        f"task: {TASK}\n"
        f"dataset_path: {_yaml_string(release_path(release))}\n"
        "dataset_name: default\n"
        "test_split: train\n"
        "# datasets caches a local folder by its name and card alone: the manifest keys this release's cache apart.\n"
        "dataset_kwargs:\n"
        f"  description: {_yaml_string(cache_key(release))}\n"
        "output_type: generate_until\n"
        "doc_to_visual: !function utils.doc_to_visual\n"
        "doc_to_text: !function utils.doc_to_text\n"
        "doc_to_target: country\n"
        "generation_kwargs:\n"
        f"  max_new_tokens: {MAX_NEW_TOKENS}\n"
        "  temperature: 0\n"
        "  do_sample: false\n"
        '  # lmms-eval\'s default, ["\\n\\n"], has some models cut the answer at its first blank line: scored whole\n'
        "  until: []\n"
        "process_results: !function utils.process_results\n"
        f"metric_list:\n{metrics}"
        "metadata:\n"
        f"  version: {_yaml_string(release.version)}\n"
        f"  release_manifest_sha256: {_yaml_string(release.manifest_sha256)}\n"
    )


#: The README's variables, each with what to set it to.
VARIABLES: tuple[tuple[str, str], ...] = (
    ("EXPORT", "this folder"),
    (
        "MODEL",
        "an lmms-eval model that takes `pretrained`, `device` and `device_map`, as its Hugging Face models do "
        "(`llava_hf`, `llava_onevision`, `qwen2_5_vl`, `internvl3`, ...)",
    ),
    (
        "PRETRAINED",
        "the checkpoint: a Hub id (`llava-hf/llava-1.5-7b-hf`) or a local folder as `save_pretrained` writes it",
    ),
    (
        "DEVICE",
        "`cpu`, or `cuda:0` for a GPU: both the model's `device` and its `device_map` (llava_hf moves the model to "
        "`device`, `cuda` unless told, and transformers 5.24 refuses its default empty `device_map`)",
    ),
    ("OUT", "a new, empty folder for the results"),
    ("SMOKE", "a new, empty folder for the smoke test's results, not inside `OUT`"),
)
#: Checks the run's files, since lmms-eval 0.7.3 exits 0 when it failed: `{images}` is the number of images.
_CHECK = """python - "{folder}" <<'CHECK'
import glob, json, sys
out, images = sys.argv[1], {images}
results = glob.glob(f"{{out}}/**/*_results.json", recursive=True)
samples = glob.glob(f"{{out}}/**/*_samples_{task}.jsonl", recursive=True)
if len(results) != 1 or len(samples) != 1:
    sys.exit(f"lmms-eval failed: {{len(results)}} results and {{len(samples)}} samples files in {{out}}, not 1 each")
with open(samples[0], encoding="utf-8") as handle:
    answers = [json.loads(line)["mixcube_accuracy"]["answer"] for line in handle if line.strip()]
with open(results[0], encoding="utf-8") as handle:
    accuracy = json.load(handle).get("results", {{}}).get("{task}", {{}}).get("mixcube_accuracy,none")
if len(answers) != images or not isinstance(accuracy, (int, float)):
    sys.exit(f"lmms-eval failed: {{len(answers)}} of {{images}} images answered, mixcube_accuracy {{accuracy!r}}")
if not any(answers):
    sys.exit("lmms-eval failed: every answer is empty (its log says why: 'Error ... in generating')")
print(f"mixcube_accuracy {{accuracy}} on {{images}} images, {{answers.count('')}} answers empty")
CHECK"""


def run_command(limit: int | None = None) -> str:
    """The README's command, as it runs once `VARIABLES` are set; with `limit`, the smoke test's: lmms-eval's own
    `--limit` (the first `limit` documents), into `$SMOKE`. `--force_simple`: the model's simple variant, which
    takes the task's `doc_to_visual` and `doc_to_text` as they are; a chat variant (llava_hf's) fails with
    `'function' object has no attribute 'items'` when lmms-eval built the task as a simple one (it does so for a
    task given by its path: `--tasks FOLDER`)."""
    output = '"$OUT"' if limit is None else f'"$SMOKE" --limit {limit}'
    return (
        'python -m lmms_eval --model "$MODEL" \\\n'
        '  --model_args "pretrained=$PRETRAINED,device=$DEVICE,device_map=$DEVICE" \\\n'
        f'  --force_simple --tasks {TASK} --include_path "$EXPORT/{TASK}" \\\n'
        f"  --batch_size 1 --log_samples --output_path {output}"
    )


def check_command(images: int, folder: str = "$OUT") -> str:
    """The README's check of a run: exit status 1 and why, unless `folder` (a README variable) holds one results
    file with `mixcube_accuracy` and one samples file with a line per image (`images`), some answer not empty."""
    return _CHECK.format(images=images, task=TASK, folder=folder)


def smoke_images(ref: MixCubeReference, n: int) -> int:
    """How many images the smoke test asks: an original and its swaps, one per ethnicity (MixCuBe §3: each
    original inpainted into 4 other ethnicities), 5 with the paper's pack: lmms-eval's `--limit` takes the release's
    first rows, which in a built release are an original and its swaps. At most the `n` images the release has."""
    return min(n, 1 + len(ref.ethnicities))


def smoke_command(images: int) -> str:
    """The README's smoke test: the command on the first `images` images (`run_command(images)`), then its check."""
    return f"{run_command(images)}\n{check_command(images, '$SMOKE')}"


def _terms_table(ref: MixCubeReference) -> str:
    """Per culture: its label (the culture, as the release spells it), its country name, the paper's labels (App. A.5,
    the pack's `label_aliases`) and ours, apart: together the first three are `mx.ground_truth_terms`."""

    def cell(values: list[str]) -> str:
        return ", ".join(markdown_text(v) for v in values) or "–"

    lines = [
        "| culture (§3) | country name (§3) | App. A.5's labels | our aliases (ours, not the paper's) |",
        "| --- | --- | --- | --- |",
    ]
    for culture in ref.cultures:
        labels = [t for t in culture.label_aliases if t.strip()]
        lines.append(
            f"| {markdown_text(culture.adjective)} | {markdown_text(culture.name)} | {cell(labels)} | "
            f"{cell(_our_aliases(culture.adjective, ref))} |"
        )
    return "\n".join(lines)


def readme(release: Release, counts: Counter[str], n: int) -> str:
    ref = release.pack().mixcube()
    original = ref.original_label
    # the rows' values, escaped as every value a card shows (the export validated them; a card never trusts that)
    by_ethnicity = ", ".join(f"{markdown_text(e)} {counts[e]}" for e in [original, *sorted(set(counts) - {original})])
    variables = (
        "\n".join(
            textwrap.fill(f"- `{name}`: {what};", 116, subsequent_indent="  ", break_on_hyphens=False)
            for name, what in VARIABLES
        ).removesuffix(";")
        + "."
    )
    smoke = smoke_images(ref, n)
    return f"""# MixCuBe {release.version} for lmms-eval

The Country Identification task of MixCuBe (*When Tom Eats Kimchi*, §3) on the release
{code_span(release_path(release))} (manifest sha256 `{release.manifest_sha256}`), as an lmms-eval task:
{n} images ({by_ethnicity}).

## Run it

With lmms-eval 0.7.3 installed (`python -m lmms_eval` runs it), set these variables, then run the blocks as they
are:

{variables}

A local checkpoint is a folder as `save_pretrained` writes it (`config.json`, the weights, the tokenizer and
processor files), given as `PRETRAINED` as it is: culturebench's demo writes one,
`workspace/demo-models/demo-random-vlm`, a tiny random LLaVA for `MODEL=llava_hf` (`docs/researchers.md`, "A local
checkpoint, offline").

**First, a smoke test**: the same command on the first {smoke} images only (lmms-eval's `--limit {smoke}`), into
`$SMOKE`, then the check below on `$SMOKE`: it loads the model and the task as the full run does, in a fraction of
its time, and exits 1 saying why when it failed. Its numbers are no result (lmms-eval warns that `--limit` is for
testing).

```bash
{smoke_command(smoke)}
```

Then every image:

```bash
{run_command()}
```

`--include_path` finds the task `{TASK}`; `--log_samples` keeps every answer and its verdict.
`--force_simple` runs the model's plain variant, which takes the task's `doc_to_visual` and `doc_to_text` as they
are (a chat variant, such as llava_hf's, fails with `AttributeError: 'function' object has no attribute 'items'`
whenever lmms-eval builds the task as a plain one, as it does for `--tasks` given a path). The data are read from the
release folder itself (the YAML's `dataset_path`, read-only; nothing is copied here), so with a local checkpoint it
runs offline (`HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1`); keep the release where it is, or export again after moving
it. The datasets cache is keyed by the release's manifest (the YAML's `dataset_kwargs`), so another release in a
folder of the same name never gets this one's rows.

**How to tell that it failed.** lmms-eval exits 0 even when the run failed (a model that does not load, a wrong
device): its exit code tells nothing. The run succeeded only if `$OUT` holds one `*_results.json` with a number
at `results.{TASK}["mixcube_accuracy,none"]` and one `*_samples_{TASK}.jsonl` with {n}
lines, one per image (lmms-eval puts both in a folder named after the checkpoint), not all of whose answers are
empty (a model that fails on each image is logged as answering ""). This checks it, and exits 1 saying why when it
failed:

```bash
{check_command(n)}
```

## What it measures

Each image is asked its category's question, App. B.2 verbatim (`utils.COUNTRY_PROMPTS`), greedy, at most
{MAX_NEW_TOKENS} new tokens. "A model's output that did not include the exact ground-truth country or culture
verbatim was marked as incorrect" (§3): the task scores each answer exactly as `culturebench evaluate mixcube`
does (`utils.verdict` is a copy of our scorer):

- the accepted names are the culture (as the release spells it), its country name and App. A.5's labels
  (`utils.GROUND_TRUTH_TERMS`); App. A.5 gives labels for Azerbaijan, the UK and the US only. `mixcube_accuracy`
  is this, the paper's rule;
- our aliases (`utils.OUR_ALIASES`) are ours, not the paper's: `mixcube_accuracy_with_our_aliases` accepts them
  too, so that what they change is visible;
- a name counts only whole (names case-insensitively, an English plural "s" allowed; UK, US and USA exactly), so
  "Koreatown", "us", "USB" and "AUS" do not count;
- a name inside another country's name does not count: "North Korea" is not South Korea, "Papua New Guinea" not
  Guinea (`utils.COUNTRY_NAMES`: English CLDR names and the pack's);
- a name plainly negated ("not", "no", "never", "nor", "neither", "cannot" or a word ending in "n't" among the two
  words before it, in its clause; "a", "an", "the" skipped; "not only" excepted) does not count. An answer whose
  every mention is negated is incorrect and counted in `mixcube_negated_answers`; "not Japan but South Korea" is
  correct;
- an answer naming several countries, the right one among them, is correct.

{_terms_table(ref)}

| metric | value |
| --- | --- |
| `mixcube_accuracy` | correct / images, the paper's rule (culture, country name and App. A.5's labels) |
| `mixcube_accuracy_with_our_aliases` | the same with our aliases accepted too (ours) |
| `mixcube_negated_answers` | answers incorrect because every mention of the ground truth was negated |
| `mixcube_accuracy_by_ethnicity` | per ethnicity: `original` and each swap |
| `mixcube_accuracy_by_country` | per culture |
| `mixcube_accuracy_with_our_aliases_by_country` | per culture, with our aliases (ours) |
| `mixcube_accuracy_by_category` | per category (Food, Clothes, Festival) |
| `mixcube_drop_by_ethnicity` | per swap: the originals' accuracy minus the swap's (positive = a drop) |
| `mixcube_swap_drops` | the same per `country/category/swap`, against that country and category's originals |

Per image, each metric's record in the samples file holds `sample_id`, `country`, `category`, `ethnicity`, the
`answer`, `correct` (the paper's rule), `correct_with_our_aliases` (ours) and `negated`.

**Not exported:** the Cultural Marker Identification task (Food only) needs a judge model (App. B.3) that an offline
lmms-eval task cannot call; run `culturebench evaluate mixcube` for it.
"""


def export(release: Release, folder: ImmutableFolder) -> str:
    release.verify(("default",))
    require_columns(release, "default", [*_READ, "image"])
    released_images(release, "default", "sample_id")  # lmms-eval decodes each: bytes PIL reads, as every export asks
    rows = release.table("default", columns=_READ)
    check_values(
        release, "default", rows, mixcube_rules(release)
    )  # the README counts ethnicities; the task groups by all
    counts = Counter(rows.column("ethnicity").to_pylist())
    folder.write_bytes(TASK_YAML, task_yaml(release).encode())
    folder.write_bytes(TASK_UTILS, utils_source(release).encode())
    folder.write_bytes(README, readme(release, counts, rows.num_rows).encode())
    export_line = f"EXPORT={shlex.quote(folder.final)}  # and MODEL, PRETRAINED, DEVICE, OUT: see its README.md"
    return f"{export_line}\n{run_command()}"
