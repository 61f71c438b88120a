"""The whole 3XCM build at scale: a synthetic, web-like local corpus at the paper's size, 100k or 1M images.

    .venv/bin/python perf/build_scale.py --images paper            # 139 concepts x 16 countries, 3 per query
    .venv/bin/python perf/build_scale.py --images 100k
    .venv/bin/python perf/build_scale.py --images 1m --stages corpus,floor,search,images,image_dedup
    .venv/bin/python perf/build_scale.py --images 20000 --one-size  # every image one size: the copy search's worst case

The corpus is laid out for the local-folder searcher (`<country>/<concept>/<eng|nav>/<NN>_<name>.<ext>`). Up to
44k images it is the paper's catalog (139 shipped concepts x 16 countries, 1 to 10 images per query). Past that the
searcher's top-10 cap needs more cells: synthetic English-speaking countries (eng queries only) are added, and past
200k synthetic concepts too (about 1,000 images per concept, as at the paper's scale). They enter the build as a
reference pack of their own (`write_pack`: the default pack with the synthetic countries and concepts added), passed
as the build config's `reference`, as `culturebench build 3xcm --reference DIR` passes one: nothing of the package is
patched.

Images are cheap and web-like: a seeded colour grid of 6 x 8 cells blown up to the image size and saved as JPEG
(about 4 KB), so every pHash is distinct. Sizes come from a crawl-like distribution, most images in a few common
sizes (1024x768, 800x600, 1200x800, ...) and a long tail, at a quarter of the linear size to keep files and decodes
cheap (`--size-scale`). Near-duplicates are planted at the demo corpus's rate (5 per 87 images of a concept: byte
copies, PNG re-saves, re-encodes, resizes, brightness shifts), copies of another concept's picture (bytes or pixels)
at 0.5%, and bad files (HTML saved as .jpg, truncated JPEGs) at 0.05%. The corpus is generated once per shape, in
`--workers` processes, each drawing a slice of the images from its recipe (bounded memory), and reused.

The build runs with `--engine local` semantics and the embedded defaults (perceptual dedup tier and the copy search,
auto-accepted review, own-concept tags, assembly, validation, release), each stage in a fresh process so that its
wall time, CPU seconds (self and children) and peak RSS are its own; a process that only imports the build is timed
too, as the floor every stage's RSS includes. After the build a pass over every stage again times the marker skips.
In the same run, the decode floor: reading and decoding every stored image once, as the image pass does
(`decode_reduced`), in `--workers` threads; and the whole-build floor (issue 60): listing the corpus once, reading
and decoding each of its files once (the same decode, `--workers` threads), and writing each released byte once.
Prints a table, both ratios (the build against the decode floor and against the whole-build floor), and ends with
one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository's packages
    sys.path.insert(0, str(ROOT))

from data.reference import ENGLISH, ReferencePack, default_pack, load_pack  # noqa: E402
from data.reference_files import CONCEPTS_FILE, COUNTRIES_FILE, PackFiles, write_pack_files  # noqa: E402
from data.text_safety import csv_bytes  # noqa: E402

# Web image sizes and their shares in a crawl (a few dominant sizes, then a long tail), as full-size pixels.
WEB_SIZES: tuple[tuple[int, int, float], ...] = (
    (1024, 768, 0.22),
    (800, 600, 0.14),
    (1200, 800, 0.10),
    (1280, 720, 0.08),
    (1920, 1080, 0.07),
    (640, 480, 0.06),
    (1600, 1200, 0.04),
    (1000, 667, 0.04),
    (1280, 960, 0.03),
    (600, 400, 0.02),
)
TAIL_SHARE = 1.0 - sum(s for *_, s in WEB_SIZES)  # any size between 300 and 2000 px a side
NEAR_DUP_SHARE = 5 / 87  # the demo plants 5 near-duplicates per concept of ~87 images at paper scale
CROSS_SHARE = 0.005
BAD_SHARE = 0.0005
PAPER_IMAGES = 12_093  # 139 concepts x (3 English + 13 x 2 languages) queries x 3 images
SYNTHETIC_CONCEPT_BASE = 5000
KINDS = ("orig", "bytes", "pixels", "reencode", "resize", "bright", "xbytes", "xpixels", "bad")
ORIG, BYTES, PIXELS, REENCODE, RESIZE, BRIGHT, XBYTES, XPIXELS, BAD = range(len(KINDS))
STAGE_ORDER = (
    "demo_corpus",
    "concepts",
    "concept_dedup",
    "translations",
    "search",
    "images",
    "image_embeddings",
    "image_dedup",
    "review",
    "tags",
    "image_metadata",
    "assembly",
    "validation",
)


# -- the catalog: which countries and concepts, and the reference data that names them ----------------------------


@dataclass(frozen=True)
class Shape:
    concepts: int  # shipped ones first, then synthetic
    synthetic_countries: int
    real_countries: tuple[str, ...]
    per_query: int
    one_size: bool = False
    size_scale: float = 0.25
    seed: int = 0
    # Each synthetic country its own language group, as most of the paper's are; False puts them all in English's
    # group (with USA, UK, Australia): the RQ2 pools then scan that one large group (see the report of issue 31).
    own_groups: bool = True

    @property
    def key(self) -> str:
        real = (
            "all"
            if len(self.real_countries) == 16
            else "-".join(c.lower().replace(" ", "") for c in self.real_countries)
        )
        size = "one" if self.one_size else f"web{self.size_scale:g}"
        return f"c{self.concepts}-s{self.synthetic_countries}-{real}-k{self.per_query}-{size}-seed{self.seed}"


def shape_for(images: int, one_size: bool = False, size_scale: float = 0.25) -> Shape:
    """The paper's catalog while top-10 per query reaches `images`; then synthetic countries, then concepts."""
    real = tuple(c.name for c in default_pack().countries)
    columns = sum(1 if c.language_code == ENGLISH else 2 for c in default_pack().countries)  # 29
    shipped = len(default_pack().concepts)
    if images <= shipped * columns * 10:
        k = max(1, min(10, round(images / (shipped * columns))))
        return Shape(shipped, 0, real, k, one_size, size_scale)
    concepts = shipped if images <= 200_000 else max(shipped, round(images / 1000))
    synthetic = max(0, math.ceil(images / (10 * concepts)) - columns)
    return Shape(concepts, synthetic, real, 10, one_size, size_scale)


def _letters(index: int) -> str:
    """Three letters for `index` (aaa, aab, ...): a country's name and slug hold letters only."""
    out = ""
    for _ in range(3):
        index, digit = divmod(index, 26)
        out = chr(ord("a") + digit) + out
    return out


def write_pack(shape: Shape, folder: Path) -> Path:
    """The default reference pack with the shape's synthetic concepts and English-speaking countries added, as a pack
    folder of its own (checked by the same loader as any pack)."""
    groups = "own" if shape.own_groups else "en"
    target = folder / f"pack-v4-c{shape.concepts}-s{shape.synthetic_countries}-{groups}"
    if target.is_dir():
        return target
    base = default_pack()
    shipped = len(base.concepts)
    synthetic = [(SYNTHETIC_CONCEPT_BASE + i, f"synthetic concept {i:05d}") for i in range(shape.concepts - shipped)]
    used = {c.iso2 for c in base.countries}
    codes = [a + b for a in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if a + b not in used]
    if shape.synthetic_countries > len(codes):
        raise ValueError(f"at most {len(codes)} synthetic countries (two-letter codes)")
    countries = list(zip(synthetic_countries(shape), codes, strict=False))
    files = dict(base.files.files)

    def add(name: str, rows: list[list[Any]]) -> None:
        text = files[name].decode("utf-8")
        files[name] = (text + csv_bytes([], rows).decode("utf-8").lstrip("\r\n")).encode("utf-8")

    add(CONCEPTS_FILE, [[cid, name, "", ""] for cid, name in synthetic])
    # Each synthetic country speaks English; with `own_groups`, each in a language group of its own (`en-<code>`).
    add(
        COUNTRIES_FILE,
        [
            [name, iso2, name.lower(), "en", "English", f"en-{iso2.lower()}" if shape.own_groups else "en",
             f"{iso2.lower()}-en", "Synthetic"]
            for name, iso2 in countries
        ],
    )  # fmt: skip
    for code in sorted(base.languages):
        # The pack's translator reads every concept from the language packs: each names the synthetic ones too.
        if code != ENGLISH:
            add(
                f"i18n/{code}/{CONCEPTS_FILE}",
                [[cid, n, f"{n} ({code})", "", "awaiting_native_review"] for cid, n in synthetic],
            )
        # Every language names every country: RQ3's descriptors put a country's name into another's language.
        add(f"i18n/{code}/{COUNTRIES_FILE}", [[iso2, name, name, name] for name, iso2 in countries])
    staging = folder / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    write_pack_files(PackFiles(str(staging), files), target)
    load_pack(target)  # checked as any pack is
    return target


def concept_names(shape: Shape) -> list[str] | None:
    every = default_pack().concepts
    return None if shape.concepts >= len(every) else [c.concept for c in every[: shape.concepts]]


def synthetic_countries(shape: Shape) -> list[str]:
    return [f"Synthland {_letters(i)}" for i in range(shape.synthetic_countries)]


# -- the corpus plan: every file's kind, source and size, decided before a picture is drawn -----------------------


@dataclass
class Plan:
    rel: list[str]  # path under the corpus root
    kind: np.ndarray  # KINDS index
    source: np.ndarray  # the original whose picture it shows (itself for an original)
    size: np.ndarray  # (n, 2) width, height of the original's picture
    concept: np.ndarray


def plan_corpus(shape: Shape, pack: ReferencePack) -> Plan:
    countries = [pack.resolve_country(c) for c in shape.real_countries]
    countries += [pack.country_by_name()[c] for c in synthetic_countries(shape)]
    concepts = list(pack.concepts)[: shape.concepts]
    rel: list[str] = []
    concept_of: list[int] = []
    for country in countries:
        langs = ("eng",) if country.language_code == ENGLISH else ("eng", "nav")
        folder_country = country.slug.replace(" ", "_")
        for ci, entry in enumerate(concepts):
            name = entry.concept.replace(" ", "_")
            for lang in langs:
                folder = f"{folder_country}/{name}/{lang}"
                for rank in range(shape.per_query):
                    rel.append(f"{folder}/{rank:02d}")
                    concept_of.append(ci)
    n = len(rel)
    rng = np.random.default_rng([shape.seed, 31])
    concept = np.asarray(concept_of, np.int32)
    u = rng.random(n)
    kind = np.full(n, ORIG, np.int8)
    near = u < NEAR_DUP_SHARE
    kind[near] = rng.integers(BYTES, BRIGHT + 1, int(near.sum()))
    cross = (u >= NEAR_DUP_SHARE) & (u < NEAR_DUP_SHARE + CROSS_SHARE)
    kind[cross] = rng.choice([XBYTES, XPIXELS], int(cross.sum()))
    kind[(u >= NEAR_DUP_SHARE + CROSS_SHARE) & (u < NEAR_DUP_SHARE + CROSS_SHARE + BAD_SHARE)] = BAD
    source = np.arange(n, dtype=np.int64)
    originals = np.flatnonzero(kind == ORIG)
    # Near-duplicates show an original of their concept; copies, one of another concept.
    order = np.argsort(concept[originals], kind="stable")
    by_concept = np.split(originals[order], np.searchsorted(concept[originals][order], np.arange(1, shape.concepts)))
    for i in np.flatnonzero((kind >= BYTES) & (kind <= BRIGHT)):
        pool = by_concept[concept[i]]
        source[i] = pool[rng.integers(len(pool))] if len(pool) else i
    for i in np.flatnonzero((kind == XBYTES) | (kind == XPIXELS)):
        other = (concept[i] + 1 + rng.integers(max(1, shape.concepts - 1))) % shape.concepts
        pool = by_concept[other]
        source[i] = pool[rng.integers(len(pool))] if len(pool) else i
    size = _sizes(n, shape, rng)
    ext = {PIXELS: "png", XPIXELS: "png"}
    rel = [f"{r}_{KINDS[k]}.{ext.get(int(k), 'jpg')}" for r, k in zip(rel, kind.tolist(), strict=True)]
    return Plan(rel, kind, source, size, concept)


def _sizes(n: int, shape: Shape, rng: np.random.Generator) -> np.ndarray:
    if shape.one_size:
        full = np.tile(np.array([[1024, 768]]), (n, 1))
    else:
        table = np.array([(w, h) for w, h, _ in WEB_SIZES] + [(0, 0)])
        shares = np.array([s for *_, s in WEB_SIZES] + [TAIL_SHARE])
        full = table[rng.choice(len(table), n, p=shares / shares.sum())]
        tail = full[:, 0] == 0
        full[tail] = rng.integers(300, 2001, (int(tail.sum()), 2))
    return np.maximum(64, np.round(full * shape.size_scale)).astype(np.int32)


# -- drawing ----------------------------------------------------------------------------------------------------


def _picture(seed: int, index: int, width: int, height: int) -> Image.Image:
    grid = np.random.default_rng([seed, int(index)]).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    return Image.fromarray(grid).resize((int(width), int(height)), Image.Resampling.BILINEAR)


def _encode(image: Image.Image, fmt: str, quality: int = 80) -> bytes:
    out = io.BytesIO()
    if fmt == "PNG":
        image.save(out, "PNG", compress_level=1)
    else:
        image.save(out, "JPEG", quality=quality)
    return out.getvalue()


def draw(plan: Plan, i: int, seed: int) -> bytes:
    kind, src = int(plan.kind[i]), int(plan.source[i])
    width, height = (int(v) for v in plan.size[src])
    if kind == BAD:
        original = _encode(_picture(seed, i, *plan.size[i]), "JPEG")
        return original[: len(original) // 2] if i % 2 else b"<!DOCTYPE html><html>403 Forbidden</html>" * 8
    picture = _picture(seed, src, width, height)
    if kind in (ORIG, BYTES, XBYTES):
        return _encode(picture, "JPEG")  # the same recipe, so the same bytes as the original's
    if kind in (PIXELS, XPIXELS):
        return _encode(Image.open(io.BytesIO(_encode(picture, "JPEG"))).convert("RGB"), "PNG")
    if kind == REENCODE:
        return _encode(picture, "JPEG", quality=60)
    if kind == RESIZE:
        return _encode(picture.resize((width * 3 // 4, height * 3 // 4), Image.Resampling.BILINEAR), "JPEG")
    return _encode(picture.point(lambda v: min(255, v + 24)), "JPEG")  # BRIGHT


_PLAN: Plan | None = None  # inherited by the forked workers


def _draw_slice(args: tuple[str, int, int, int]) -> int:
    root, seed, start, stop = args
    assert _PLAN is not None
    made: set[str] = set()
    for i in range(start, stop):
        path = f"{root}/{_PLAN.rel[i]}"
        folder = path.rsplit("/", 1)[0]
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        with open(path, "wb") as handle:
            handle.write(draw(_PLAN, i, seed))
    return stop - start


def generate_corpus(shape: Shape, folder: Path, workers: int, pack: ReferencePack) -> tuple[Path, dict[str, Any]]:
    """The corpus for `shape` (its countries and concepts named by `pack`) under `folder`, generated unless a
    finished one is there."""
    global _PLAN
    root = folder / f"corpus-{shape.key}"
    done = root / "corpus.json"
    if done.exists():
        return root, json.loads(done.read_text())
    shutil.rmtree(root, ignore_errors=True)
    start = time.perf_counter()
    _PLAN = plan = plan_corpus(shape, pack)
    n = len(plan.rel)
    slices = [(str(root), shape.seed, a, min(n, a + 2000)) for a in range(0, n, 2000)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for _ in pool.imap_unordered(_draw_slice, slices):
            pass
    _PLAN = None
    kinds = {KINDS[k]: int(v) for k, v in zip(*np.unique(plan.kind, return_counts=True), strict=True)}
    sizes = len({(int(w), int(h)) for w, h in plan.size})
    facts = {"files": n, "kinds": kinds, "distinct_sizes": sizes, "seconds": round(time.perf_counter() - start, 1)}
    facts["largest_size_group"] = int(np.unique(plan.size, axis=0, return_counts=True)[1].max())
    done.write_text(json.dumps(facts))
    return root, facts


# -- the build --------------------------------------------------------------------------------------------------


def build_config(shape: Shape, corpus: Path, work: Path, pack: str) -> Any:
    from flows.xcm.config import Build3XCMConfig

    return Build3XCMConfig.model_validate(
        {
            "reference": pack,
            "countries": list(shape.real_countries) + synthetic_countries(shape),
            # All of the (extended) reference concepts, or the shape's first ones.
            "concepts": {"backend": "shipped", "include": concept_names(shape)},
            "search": {"backend": "local", "root": str(corpus)},
            "review": {"backend": "label_studio_files", "when_unreviewed": "auto_accept"},
            "release": {"version": "0.1.0-scale", "root": str(work / "releases")},
            "workspace_root": str(work / "workspace"),
            "gpu_concurrency_limit": None,
        }
    )


@dataclass
class Measure:
    name: str
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    skipped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _rusage() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    return cpu, max(me.ru_maxrss, kids.ru_maxrss) / 1024


def run_in_process(spec: dict[str, Any], names: list[str]) -> list[Measure]:
    """`names` (stages, `release`, `import`) one after another in this process, each measured."""
    from flows.engine.runner import placement
    from flows.xcm.build import XCM
    from flows.xcm.stages import GRAPH

    shape = Shape(**{**spec["shape"], "real_countries": tuple(spec["shape"]["real_countries"])})
    build = GRAPH.build(build_config(shape, Path(spec["corpus"]), Path(spec["work"]), spec["reference"]))
    XCM.prepare_reference(build)  # the build's copy of its pack, as a build started by the CLI takes it
    out = []
    with placement(build, cluster=False) as where:  # the shards where a build run here puts them (warm workers)
        out = _measure_stages(build, names, where)
    return out


def _measure_stages(build: Any, names: list[str], where: Any) -> list[Measure]:
    out = []
    for name in names:
        cpu0, _ = _rusage()
        start = time.perf_counter()
        skipped, extra = False, dict[str, Any]()
        if name == "release":
            from flows.xcm.build import release

            result = release(build)
            extra = {"path": result.path, "status": result.status}
        elif name != "import":
            marker, skipped = build.run(name, placement=where)
            extra = {"rows": marker.rows}
        wall = time.perf_counter() - start
        cpu1, peak = _rusage()
        out.append(Measure(name, wall, cpu1 - cpu0, peak, skipped, extra))
    return out


def run_stage_process(spec_path: Path, names: list[str]) -> list[Measure]:
    """`names` in a fresh process: its peak RSS is theirs (plus the imports). A stage that starts shard workers
    (`flows/engine/placement.py`) is also measured as a tree: the peak of the summed RSS of the process and
    its descendants, sampled every 0.1 s (`tree_peak_rss_mb`)."""
    import psutil

    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(spec_path), "--names", ",".join(names)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    tree_peak = 0.0
    stop = threading.Event()

    def sample() -> None:
        nonlocal tree_peak
        root = psutil.Process(proc.pid)
        while not stop.wait(0.1):
            try:
                members = [root, *root.children(recursive=True)]
                rss = 0
                for member in members:
                    with contextlib.suppress(psutil.Error):  # a worker that just exited
                        rss += member.memory_info().rss
                tree_peak = max(tree_peak, rss / 2**20)
            except psutil.Error:
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{names} failed:\n{stderr[-4000:]}")
    last = stdout.strip().splitlines()[-1]
    measures = [Measure(**m) for m in json.loads(last)]
    if len(measures) == 1:
        measures[0].extra["tree_peak_rss_mb"] = round(max(tree_peak, measures[0].peak_rss_mb))
    return measures


def stored_paths(work: Path, spec: dict[str, Any]) -> list[str]:
    from flows.xcm.stages import GRAPH

    shape = Shape(**{**spec["shape"], "real_countries": tuple(spec["shape"]["real_countries"])})
    build = GRAPH.build(build_config(shape, Path(spec["corpus"]), work, spec["reference"]))
    images = build.ws.read_table("images").select(["sha256", "status"]).to_pylist()
    return [build.ws.blobs.path(r["sha256"]) for r in images if r["status"] == "ok"]


def copy_search_compare(work: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """The copy search's pairs on this build's stored images (their sizes and pHashes), found by comparing every two
    hashes of a size group (the search before issue 31) and by the multi-index search: the same pairs, and each
    one's time."""
    from curation.copies import hamming_pairs_indexed
    from curation.image_dedup import EXACT_PIXEL_WINDOW, hamming_pairs
    from flows.xcm.stages import GRAPH

    shape = Shape(**{**spec["shape"], "real_countries": tuple(spec["shape"]["real_countries"])})
    ws = GRAPH.build(build_config(shape, Path(spec["corpus"]), work, spec["reference"])).ws
    images = ws.read_table("images").select(["image_id", "width", "height", "status"]).to_pylist()
    size = {r["image_id"]: (r["width"] or 0, r["height"] or 0) for r in images if r["status"] == "ok"}
    hashes = [r for r in ws.read_table("images").select(["image_id", "phash"]).to_pylist() if r["phash"]]
    phash = np.array([r["phash"] for r in hashes], np.uint64)
    sizes = np.array([size[r["image_id"]][0] << 32 | size[r["image_id"]][1] for r in hashes], np.int64)
    valid = np.ones(len(hashes), bool)
    out: dict[str, Any] = {
        "images": len(hashes),
        "largest_size_group": int(np.unique(sizes, return_counts=True)[1].max()),
    }
    found = []
    for name, search in (("all_pairs", hamming_pairs), ("multi_index", hamming_pairs_indexed)):
        start = time.perf_counter()
        i, j, _ = search(phash, sizes, valid, EXACT_PIXEL_WINDOW)
        out[f"{name}_s"] = round(time.perf_counter() - start, 2)
        found.append(set(zip(i.tolist(), j.tolist(), strict=True)))
    out["pairs"], out["same_pairs"] = len(found[1]), found[0] == found[1]
    return out


def copy_search_synthetic(n: int, one_size: bool, all_pairs_limit: int) -> dict[str, Any]:
    """The copy search alone on `n` random pHashes with the corpus's sizes (no images): multi-index, and all-pairs
    where the sum of squared size groups stays under `all_pairs_limit` pairs."""
    from curation.copies import hamming_pairs_indexed
    from curation.image_dedup import EXACT_PIXEL_WINDOW, hamming_pairs

    rng = np.random.default_rng(31)
    size = _sizes(n, Shape(1, 0, (), 1, one_size), rng)
    sizes = size[:, 0].astype(np.int64) << 32 | size[:, 1]
    phash = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) ^ rng.integers(0, 2, n).astype(np.uint64) << 63
    counts = np.unique(sizes, return_counts=True)[1]
    out: dict[str, Any] = {"images": n, "one_size": one_size, "largest_size_group": int(counts.max())}
    out["all_pairs_compared"] = int((counts.astype(np.int64) ** 2 // 2).sum())
    searches = [("multi_index", hamming_pairs_indexed)]
    if out["all_pairs_compared"] <= all_pairs_limit:
        searches.append(("all_pairs", hamming_pairs))
    for name, search in searches:
        start = time.perf_counter()
        i, _, _ = search(phash, sizes, np.ones(n, bool), EXACT_PIXEL_WINDOW)
        out[f"{name}_s"], out[f"{name}_pairs"] = round(time.perf_counter() - start, 2), len(i)
    return out


def corpus_files(corpus: Path) -> Iterator[str]:
    for folder, _, files in os.walk(corpus):
        for name in files:
            if name != "corpus.json":
                yield os.path.join(folder, name)


def decode_floor(paths: list[str], workers: int) -> float:
    """Reading and decoding every file once, as the image pass does (`decode_reduced`), in `workers` threads."""
    from curation.image_thumbnails import decode_reduced

    def attempt(path: str) -> None:
        try:
            with open(path, "rb") as handle:
                decode_reduced(handle.read())
        except Exception:  # the floor times the attempt, as hashing does
            pass

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(attempt, paths))
    return time.perf_counter() - start


def list_floor(corpus: Path) -> tuple[float, int]:
    """The search's floor: listing the corpus once (seconds, files)."""
    start = time.perf_counter()
    files = sum(1 for _ in corpus_files(corpus))
    return time.perf_counter() - start, files


def copy_floor(paths: list[str], scratch: Path) -> tuple[float, int]:
    """The import's floor: reading each file once and writing it once (one flush at the end, as the import does
    per shard); (seconds, bytes)."""
    scratch.mkdir(parents=True, exist_ok=True)
    copied = 0
    start = time.perf_counter()
    for i, path in enumerate(paths):
        with open(path, "rb") as source:
            data = source.read()
        with open(scratch / str(i), "wb") as target:
            target.write(data)
        copied += len(data)
    os.sync()
    seconds = time.perf_counter() - start
    shutil.rmtree(scratch, ignore_errors=True)
    return seconds, copied


def release_floor(release: Path, scratch: Path) -> tuple[float, int]:
    """The release's floor: writing every byte it holds once (its files copied, one flush); (seconds, bytes)."""
    start = time.perf_counter()
    shutil.copytree(release, scratch)
    os.sync()
    seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file())
    shutil.rmtree(scratch, ignore_errors=True)
    return seconds, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", default="paper", help="paper, 100k, 1m or a number")
    parser.add_argument("--concepts", type=int, help="override the shape: concepts (shipped first)")
    parser.add_argument("--countries", help="override the shape: real countries, comma-separated")
    parser.add_argument("--synthetic-countries", type=int)
    parser.add_argument("--per-query", type=int)
    parser.add_argument("--one-size", action="store_true", help="every image 1024x768 (scaled): one size group")
    parser.add_argument("--size-scale", type=float, default=0.25)
    parser.add_argument(
        "--shared-language-group", action="store_true", help="synthetic countries in English's language group"
    )
    parser.add_argument("--root", default="/tmp/culturebench-build-scale", help="corpus and workspace folder")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--in-process", action="store_true", help="every stage in one process (the memory test)")
    parser.add_argument("--until", help="stop after this stage (a partial build: no skip pass, no floor)")
    parser.add_argument(
        "--compare-copy-search", action="store_true", help="time the all-pairs and the multi-index copy search"
    )
    parser.add_argument(
        "--copy-search-only", action="store_true", help="time the copy search alone on random pHashes of --images"
    )
    parser.add_argument("--all-pairs-limit", type=float, default=2e11, help="largest all-pairs search to time")
    parser.add_argument("--keep", action="store_true", help="keep the workspace (the corpus is always kept)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--names", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        done = run_in_process(json.loads(Path(args.child).read_text()), args.names.split(","))
        print(json.dumps([asdict(m) for m in done]))
        return

    wanted = {"paper": PAPER_IMAGES, "100k": 100_000, "1m": 1_000_000}.get(args.images.lower())
    if args.copy_search_only:
        result = copy_search_synthetic(wanted or int(args.images), args.one_size, int(args.all_pairs_limit))
        print(json.dumps(result))
        return
    shape = shape_for(wanted or int(args.images), args.one_size, args.size_scale)
    overrides: dict[str, Any] = {}
    if args.concepts:
        overrides["concepts"] = args.concepts
    if args.countries:
        overrides["real_countries"] = tuple(default_pack().resolve_country(c).name for c in args.countries.split(","))
    if args.synthetic_countries is not None:
        overrides["synthetic_countries"] = args.synthetic_countries
    if args.per_query:
        overrides["per_query"] = args.per_query
    overrides["own_groups"] = not args.shared_language_group
    shape = Shape(**{**asdict(shape), **overrides})
    folder = Path(args.root)
    folder.mkdir(parents=True, exist_ok=True)
    ref = write_pack(shape, folder)

    t0 = time.perf_counter()
    corpus, facts = generate_corpus(shape, folder, args.workers, load_pack(ref))
    corpus_s = time.perf_counter() - t0
    print(f"corpus {corpus}: {facts['files']:,} files, {facts['distinct_sizes']} sizes, largest size group "
          f"{facts['largest_size_group']:,}; made in {facts['seconds']} s ({corpus_s:.1f} s this run)")  # fmt: skip

    work = folder / f"work-{shape.key}"
    shutil.rmtree(work, ignore_errors=True)
    spec = {"shape": asdict(shape), "reference": str(ref), "corpus": str(corpus), "work": str(work)}
    spec_path = folder / f"spec-{shape.key}.json"
    spec_path.write_text(json.dumps(spec))

    names = [*STAGE_ORDER, "release"]
    if args.until:
        names = names[: names.index(args.until) + 1]
    measures: list[Measure] = []
    start = time.perf_counter()
    if args.in_process:
        measures = run_stage_process(spec_path, names)
    else:
        measures.append(run_stage_process(spec_path, ["import"])[0])
        for name in names:
            measures += run_stage_process(spec_path, [name])
            m = measures[-1]
            print(f"  {m.name:<16} {m.wall_s:8.1f} s wall {m.cpu_s:8.1f} s CPU {m.peak_rss_mb:7.0f} MB", flush=True)
    build_s = time.perf_counter() - start
    skips = [] if args.until else run_stage_process(spec_path, list(STAGE_ORDER))
    skip_s = sum(m.wall_s for m in skips)

    built = "images" in names  # a partial build (--until) may stop before anything is stored
    paths = stored_paths(work, spec) if built else []
    floor_s = decode_floor(paths, args.workers)
    n = len(paths)
    floors: dict[str, dict[str, float]] = {"decode": {"seconds": floor_s, "decodes": n}}
    whole_s = None
    if not args.until:
        list_s, listed = list_floor(corpus)
        floors["search"] = {"seconds": list_s, "files_listed": listed}
        sources = [str(p) for p in corpus_files(corpus)]
        copy_s, copied = copy_floor(sources, folder / "floor-copy")
        # The image pass reads, stores and decodes: its floor is the copy and the decode floor together.
        floors["images"] = {"seconds": copy_s + floor_s, "copy_s": copy_s, "decode_s": floor_s,
                            "bytes_read": copied, "bytes_written": copied}  # fmt: skip
        # The one pass over the corpus: each file read once and decoded once (the import's floor is its writes too).
        pass_s = decode_floor(sources, args.workers)
        floors["read_and_decode"] = {"seconds": pass_s, "files": len(sources)}
        release_dir = work / "releases" / "3xcm" / "0.1.0-scale"
        release_s = 0.0
        if release_dir.exists():
            release_s, written = release_floor(release_dir, folder / "floor-release")
            floors["release"] = {"seconds": release_s, "bytes_written": written}
        whole_s = list_s + pass_s + release_s
        floors["whole_build"] = {"seconds": whole_s, "list_s": list_s, "read_and_decode_s": pass_s,
                                 "release_write_s": release_s}  # fmt: skip
    released = _released_images(work)
    copy_search = copy_search_compare(work, spec) if args.compare_copy_search else None
    peak = max(m.peak_rss_mb for m in measures)
    tree_peak = max(m.extra.get("tree_peak_rss_mb", m.peak_rss_mb) for m in measures)
    stage_wall = sum(m.wall_s for m in measures if m.name != "import")

    print(f"\n3XCM build, {facts['files']:,} corpus files, {n:,} stored images, {released:,} released "
          f"({os.cpu_count()} CPUs, {'one process' if args.in_process else 'a process per stage'})")  # fmt: skip
    heads = ("wall s", "CPU s", "peak MB", "tree MB", "ms/img", "floor s", "x floor")
    print(f"{'stage':<16} " + " ".join(f"{h:>9}" if i < 2 else f"{h:>8}" for i, h in enumerate(heads)))
    for m in measures:
        tree = m.extra.get("tree_peak_rss_mb", m.peak_rss_mb)
        floor = floors.get(m.name, {}).get("seconds")
        ratio = f"{m.wall_s / floor:8.1f}" if floor else f"{'':>8}"
        floor_text = f"{floor:8.1f}" if floor else f"{'':>8}"
        print(f"{m.name:<16} {m.wall_s:9.1f} {m.cpu_s:9.1f} {m.peak_rss_mb:8.0f} {tree:8.0f} "
              f"{1000 * m.wall_s / max(n, 1):8.2f} {floor_text} {ratio}")  # fmt: skip
    print(f"{'build':<16} {stage_wall:9.1f} {sum(m.cpu_s for m in measures):9.1f} {peak:8.0f} "
          f"{1000 * stage_wall / max(n, 1):8.2f}")  # fmt: skip
    if copy_search:
        print(f"copy search: {copy_search}")
    print(f"decode floor {floor_s:.1f} s ({1000 * floor_s / max(n, 1):.2f} ms/img); skip pass {skip_s:.1f} s; "
          f"corpus {facts['seconds']} s")  # fmt: skip
    if floor_s:
        print(f"build / decode floor {stage_wall / floor_s:.2f}x")
    if whole_s:
        print(f"whole-build floor {whole_s:.1f} s (list, read and decode once, write the release once); "
              f"build / whole-build floor {stage_wall / whole_s:.2f}x")  # fmt: skip
    summary = {
        "benchmark": "build_scale",
        "shape": asdict(shape),
        "corpus": facts,
        "stored_images": n,
        "released_images": released,
        "build_wall_s": round(stage_wall, 1),
        "build_wall_with_processes_s": round(build_s, 1),
        "seconds_per_1000_images": round(1000 * stage_wall / max(n, 1), 2),
        "decode_floor_s": round(floor_s, 1),
        "decode_floor_per_1000_images_s": round(1000 * floor_s / max(n, 1), 3),
        "build_over_floor": round(stage_wall / floor_s, 2) if floor_s else None,
        "whole_build_floor_s": round(whole_s, 1) if whole_s else None,
        "build_over_whole_build_floor": round(stage_wall / whole_s, 2) if whole_s else None,
        "peak_rss_mb": round(peak),
        "tree_peak_rss_mb": round(tree_peak),
        "floors": {k: {f: round(v, 2) for f, v in floor.items()} for k, floor in floors.items()},
        "corpus_bytes": sum(os.path.getsize(p) for p in corpus_files(corpus)),
        "stages": [{**asdict(m), "wall_s": round(m.wall_s, 2), "cpu_s": round(m.cpu_s, 2)} for m in measures],
        "skip_pass": {m.name: round(m.wall_s, 3) for m in skips},
        "skip_pass_s": round(skip_s, 2),
        "copy_search": copy_search,
    }
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(summary))


def _released_images(work: Path) -> int:
    import pyarrow.parquet as pq

    folder = work / "releases" / "3xcm" / "0.1.0-scale"
    parts = sorted((folder).rglob("*.parquet")) if folder.exists() else []
    # The image config's parts only: the benchmark tables are rows of tasks, not images.
    return sum(pq.ParquetFile(p).metadata.num_rows for p in parts if "/images/" in str(p) or "image" in p.parent.name)


if __name__ == "__main__":
    main()
