"""The harness of perf/dedup_vs_imagededup: corpus truth, pairwise metrics and orchestration.

imagededup itself is never installed here (that downloads torch): its side runs against a stand-in package.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import types
from itertools import combinations, pairwise
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image, ImageFilter

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # perf/ is not an installed package

from perf.dedup_vs_imagededup import corpus as corpus_mod  # noqa: E402
from perf.dedup_vs_imagededup import run as run_mod  # noqa: E402
from perf.dedup_vs_imagededup.corpus import (  # noqa: E402
    COPY_KINDS,
    CorpusTruth,
    FileTruth,
    generate_corpus,
    save_montage,
)
from perf.dedup_vs_imagededup.metrics import (  # noqa: E402
    cluster_pairs,
    connected_clusters,
    evaluate,
    pair,
    recall_by_kind,
    recall_vs_source_by_kind,
    score_pairs,
    sibling_false_positives,
)

BASES = 8


def _seed_with_every_kind(bases: int) -> int:
    """The first seed whose small plan holds every copy kind, siblings, and both kinds of lossless JPEG copy."""
    for seed in range(200):
        items = [i for family in corpus_mod._plan(seed, bases) for i in family]
        kinds = {i.kind for i in items}
        lossless_fmts = {i.fmt for i in items if i.kind == "lossless"}
        if set(COPY_KINDS) <= kinds and "sibling" in kinds and {"jpeg", "png"} <= lossless_fmts:
            return seed
    raise AssertionError("no seed below 200 covers every kind")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> CorpusTruth:
    seed = _seed_with_every_kind(BASES)
    return generate_corpus(tmp_path_factory.mktemp("corpus"), seed=seed, bases=BASES, workers=2)


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"), dtype=np.int16)


def _digests(truth: CorpusTruth) -> dict[str, str]:
    return {name: hashlib.sha256((truth.image_dir / name).read_bytes()).hexdigest() for name in truth.files}


# -- corpus -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_corpus_is_deterministic_for_a_seed_whatever_the_workers(small: CorpusTruth, tmp_path: Path) -> None:
    again = generate_corpus(tmp_path / "again", seed=small.seed, bases=BASES, workers=1)
    assert again.files == small.files
    assert _digests(again) == _digests(small)
    assert sorted(p.name for p in small.image_dir.iterdir()) == sorted(small.files)

    other = generate_corpus(tmp_path / "other", seed=small.seed + 1, bases=BASES, workers=1)
    assert set(_digests(other).values()) != set(_digests(small).values())


def test_truth_json_round_trips_and_names_group_and_kind(small: CorpusTruth) -> None:
    path = small.image_dir.parent / corpus_mod.TRUTH_FILE
    assert CorpusTruth.load(path) == small
    doc = json.loads(path.read_text())
    for name, t in small.files.items():
        assert doc["files"][name]["group"] == t.group
        assert doc["files"][name]["kind"] == t.kind


def test_copies_join_their_source_group_and_siblings_are_their_own_groups(small: CorpusTruth) -> None:
    files = small.files
    assert sum(t.kind == "base" for t in files.values()) == BASES
    for name, t in files.items():
        if t.kind in COPY_KINDS:
            source = files[t.source]
            assert source.source is None and source.kind in ("base", "sibling")
            assert (t.group, t.family) == (source.group, source.family), name
        else:
            assert t.source is None
    originals_per_group: dict[int, list[str]] = {}
    for name, t in files.items():
        if t.source is None:
            originals_per_group.setdefault(t.group, []).append(name)
    assert all(len(names) == 1 for names in originals_per_group.values())
    siblings = [t for t in files.values() if t.kind == "sibling"]
    base_group = {t.family: t.group for t in files.values() if t.kind == "base"}
    assert siblings
    assert all(t.group != base_group[t.family] for t in siblings)
    assert small.sibling_groups == {t.group for t in siblings}


def test_siblings_share_the_frame_but_not_the_picture(small: CorpusTruth) -> None:
    base_of = {t.family: name for name, t in small.files.items() if t.kind == "base"}
    for name, t in small.files.items():
        if t.kind == "sibling":
            mine, base = _pixels(small.image_dir / name), _pixels(small.image_dir / base_of[t.family])
            assert mine.shape == base.shape
            assert np.mean(np.abs(mine - base).max(axis=-1) > 30) > 0.05


def test_exact_copies_are_byte_identical_and_lossless_resaves_pixel_identical(small: CorpusTruth) -> None:
    seen = set()
    for name, t in small.files.items():
        if t.kind not in ("exact", "lossless"):
            continue
        mine, source = small.image_dir / name, small.image_dir / t.source
        assert name != t.source
        if t.kind == "exact":
            assert mine.read_bytes() == source.read_bytes()
        else:
            assert mine.read_bytes() != source.read_bytes()
            assert np.array_equal(_pixels(mine), _pixels(source))
        seen.add(t.kind)
    assert seen == {"exact", "lossless"}


def _laplacian_energy(pixels: np.ndarray) -> float:
    grey = pixels.mean(axis=-1)
    lap = 4 * grey[1:-1, 1:-1] - grey[:-2, 1:-1] - grey[2:, 1:-1] - grey[1:-1, :-2] - grey[1:-1, 2:]
    return float(np.mean(lap**2))


def test_each_transform_does_what_its_kind_says(small: CorpusTruth) -> None:
    for name, t in small.files.items():
        if t.kind not in COPY_KINDS or t.kind in ("exact", "lossless"):
            continue
        mine, source = _pixels(small.image_dir / name), _pixels(small.image_dir / t.source)
        (h, w), (sh, sw) = mine.shape[:2], source.shape[:2]
        if t.kind == "resize":
            assert 0.39 <= w / sw <= 0.81 and 0.39 <= h / sh <= 0.81
        elif t.kind == "crop":
            # 2-6 % off each chosen side, so 2-12 % off a dimension with one or both sides cropped.
            assert (w, h) != (sw, sh)
            assert 0.87 <= w / sw <= 1 and 0.87 <= h / sh <= 1
        elif t.kind == "rotate":
            assert w < sw and h < sh
        elif t.kind == "jpeg":
            assert Image.open(small.image_dir / name).format == "JPEG" and (w, h) == (sw, sh)
        elif t.kind == "brightness":
            assert abs(mine.mean() / source.mean() - 1) > 0.05
        elif t.kind == "blur":
            # Less fine detail than the source, though the copy's own JPEG re-encode adds some back.
            assert _laplacian_energy(mine) < 0.9 * _laplacian_energy(source)
        elif t.kind == "watermark":
            assert (w, h) == (sw, sh)
            diff = np.abs(mine - source).max(axis=-1)
            assert diff.max() > 30
            ys, xs = np.nonzero(diff > 0.5 * diff.max())  # the mark, above any re-encoding noise
            # A small mark: within a quarter of the width and of the height, i.e. in one corner.
            assert xs.max() - xs.min() < 0.25 * w and ys.max() - ys.min() < 0.25 * h


@pytest.mark.slow
def test_generating_over_a_foreign_folder_is_refused_and_over_a_corpus_allowed(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    (foreign / corpus_mod.IMAGE_DIR).mkdir(parents=True)
    (foreign / corpus_mod.IMAGE_DIR / "holiday.jpg").write_bytes(b"mine")
    with pytest.raises(FileExistsError):
        generate_corpus(foreign, bases=1, workers=1)
    assert (foreign / corpus_mod.IMAGE_DIR / "holiday.jpg").read_bytes() == b"mine"

    first = generate_corpus(tmp_path / "c", seed=3, bases=2, workers=1)
    second = generate_corpus(tmp_path / "c", seed=4, bases=1, workers=1)
    assert sorted(p.name for p in second.image_dir.iterdir()) == sorted(second.files)
    assert first.files != second.files


def test_montage_draws_one_row_per_family(small: CorpusTruth, tmp_path: Path) -> None:
    families = sorted({t.family for t in small.files.values() if t.kind == "sibling"})[:2]
    out = save_montage(small, tmp_path / "m.png", families=families, tile=100)
    widest = max(sum(t.family == f for t in small.files.values()) for f in families)
    with Image.open(out) as img:
        assert img.width == 100 * widest
        assert img.height == len(families) * (100 + 40)


# -- metrics ----------------------------------------------------------------------------------------------------


def _hand_truth() -> CorpusTruth:
    """Family 0: base x with copies y (jpeg) and z (blur); sibling s with copy s2 (crop). Family 1: base u."""
    files = {
        "x": FileTruth(group=0, kind="base", family=0, source=None, detail=""),
        "y": FileTruth(group=0, kind="jpeg", family=0, source="x", detail=""),
        "z": FileTruth(group=0, kind="blur", family=0, source="x", detail=""),
        "s": FileTruth(group=1, kind="sibling", family=0, source=None, detail=""),
        "s2": FileTruth(group=1, kind="crop", family=0, source="s", detail=""),
        "u": FileTruth(group=2, kind="base", family=1, source=None, detail=""),
    }
    return CorpusTruth(image_dir=Path("unused"), seed=0, bases=2, files=files)


def test_true_pairs_are_every_pair_within_a_group() -> None:
    truth = _hand_truth()
    expected = {pair(a, b) for a, b in combinations(["x", "y", "z"], 2)} | {pair("s", "s2")}
    assert truth.true_pairs() == expected


def test_precision_recall_f1_follow_their_definitions() -> None:
    true = {pair("a", "b"), pair("a", "c"), pair("b", "c"), pair("d", "e")}
    predicted = {pair("b", "a"), pair("d", "e"), pair("a", "f")}
    scores = score_pairs(predicted, true)
    tp = len(predicted & true)
    precision, recall = tp / len(predicted), tp / len(true)
    assert (scores.true_positives, scores.false_positives, scores.false_negatives) == (
        tp,
        len(predicted - true),
        len(true - predicted),
    )
    assert scores.precision == pytest.approx(precision)
    assert scores.recall == pytest.approx(recall)
    assert scores.f1 == pytest.approx(2 * precision * recall / (precision + recall))


def test_empty_predictions_claim_nothing_and_miss_everything() -> None:
    true = {pair("a", "b")}
    nothing = score_pairs(set(), true)
    assert (nothing.precision, nothing.recall, nothing.f1) == (1.0, 0.0, 0.0)
    wrong = score_pairs({pair("a", "c")}, true)
    assert (wrong.precision, wrong.recall, wrong.f1) == (0.0, 0.0, 0.0)
    assert score_pairs(true, true).f1 == 1.0


def test_cluster_pairs_and_closure() -> None:
    clusters = [["c", "a", "b"], ["e", "d"], ["lonely"]]
    assert cluster_pairs(clusters) == {pair("a", "b"), pair("a", "c"), pair("b", "c"), pair("d", "e")}
    chain = [pair("a", "b"), pair("b", "c"), pair("e", "d")]
    assert connected_clusters(chain) == [["a", "b", "c"], ["d", "e"]]
    assert cluster_pairs(connected_clusters(chain)) == cluster_pairs([["a", "b", "c"], ["d", "e"]])


def test_recall_per_kind_counts_a_pair_under_each_copy_in_it() -> None:
    truth = _hand_truth()
    true = truth.true_pairs()
    predicted = {pair("x", "y"), pair("x", "s")}
    by_kind = recall_by_kind(predicted, truth)
    for kind in COPY_KINDS:
        copies = {n for n, t in truth.files.items() if t.kind == kind}
        involved = {p for p in true if set(p) & copies}
        assert (by_kind[kind].found, by_kind[kind].total) == (len(involved & predicted), len(involved))
    assert by_kind["jpeg"].recall == 1 / 2  # (x, y) found, (y, z) missed
    assert by_kind["blur"].total == 2 and by_kind["blur"].found == 0
    assert by_kind["watermark"].total == 0 and by_kind["watermark"].recall == 1.0

    vs_source = recall_vs_source_by_kind(predicted, truth)
    assert (vs_source["jpeg"].found, vs_source["jpeg"].total) == (1, 1)
    assert (vs_source["crop"].found, vs_source["crop"].total) == (0, 1)


def test_false_positives_with_siblings_and_review_band() -> None:
    truth = _hand_truth()
    predicted = {pair("x", "y"), pair("x", "s"), pair("y", "u"), pair("s2", "u")}
    false = predicted - truth.true_pairs()
    siblings = truth.sibling_groups
    counts = sibling_false_positives(predicted, truth)
    assert counts["fp_involving_siblings"] == sum(
        truth.files[a].group in siblings or truth.files[b].group in siblings for a, b in false
    )
    assert counts["fp_same_family"] == sum(truth.files[a].family == truth.files[b].family for a, b in false)
    assert counts == {"fp_involving_siblings": 2, "fp_same_family": 1}

    review = {pair("y", "z"), pair("s", "u")}
    figures = evaluate(predicted, truth, review=review)
    assert figures["review_pairs"] == 2
    assert figures["review_pairs_true"] == 1
    assert figures["review_pairs_missed_by_clusters"] == 1
    with pytest.raises(ValueError, match="outside the corpus"):
        evaluate({pair("x", "nobody")}, truth)


# -- orchestration ----------------------------------------------------------------------------------------------


def _chain(members: list[str]) -> list[tuple[str, str]]:
    """Each member linked to the next: what a detector that skips pairs already joined declares for a cluster."""
    return list(pairwise(members))


def _fake_file_dedup(merge_siblings: bool) -> types.ModuleType:
    """A stand-in for curation.file_dedup that answers from the corpus truth (optionally merging each family); its
    merge pairs chain each cluster's members, so raw pairs and their closure differ."""

    def dedup_files(paths: list[str], config: object = None, workers: int = 2) -> SimpleNamespace:
        truth = CorpusTruth.load(Path(paths[0]).parent.parent / corpus_mod.TRUTH_FILE)
        by_key: dict[int, list[str]] = {}
        for path in paths:
            t = truth.files[Path(path).name]
            by_key.setdefault(t.family if merge_siblings else t.group, []).append(path)
        clusters = [members for members in by_key.values() if len(members) > 1]
        review = [(clusters[0][0], clusters[0][1]), (clusters[0][0], clusters[1][0])]
        merge_pairs = [link for members in clusters for link in _chain(members)]
        return SimpleNamespace(clusters=clusters, review_pairs=review, merge_pairs=merge_pairs)

    module = types.ModuleType("curation.file_dedup")
    module.dedup_files = dedup_files  # type: ignore[attr-defined]
    return module


@pytest.mark.slow
@pytest.mark.parametrize("merge_siblings", [False, True])
def test_main_scores_our_side_and_ends_with_one_json_line(
    merge_siblings: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "curation.file_dedup", _fake_file_dedup(merge_siblings))
    seed = _seed_with_every_kind(4)
    argv = ["--seed", str(seed), "--bases", "4", "--repeats", "2", "--workers", "1", "--skip-imagededup"]
    figures = run_mod.main([*argv, "--mix", "tuned", "--skip-cold-start", "--workdir", str(tmp_path / "work")])

    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == json.loads(json.dumps(figures))
    truth = CorpusTruth.load(tmp_path / "work" / "tuned" / "corpus" / corpus_mod.TRUTH_FILE)
    mix = figures["mixes"]["tuned"]
    ours = mix["ours"]
    closure, raw = ours["closure"], ours["raw_pairs"]
    assert mix["imagededup"] is None and mix["wall_ratio"] is None
    assert len(ours["seconds_runs"]) == 2 and ours["consistent_across_repeats"]
    # The decode floor is timed once per repeat, and the ratio is ours over its median.
    assert len(mix["floor_seconds_runs"]) == 2 and all(f > 0 for f in mix["floor_seconds_runs"])
    assert mix["floor_ratio"] == pytest.approx(ours["seconds_median"] / mix["floor_seconds_median"])
    assert mix["files"] == len(truth.files) and mix["tuned_on"] is (seed == 0)
    true = truth.true_pairs()
    key = (lambda t: t.family) if merge_siblings else (lambda t: t.group)
    clustered = [
        sorted(n for n, t in truth.files.items() if key(t) == k) for k in {key(t) for t in truth.files.values()}
    ]
    chained = {pair(a, b) for members in clustered for a, b in _chain(members)}
    # Raw basis: only the chain links were declared.
    assert raw["predicted_pairs"] == len(chained)
    assert raw["precision"] == pytest.approx(len(chained & true) / len(chained))
    assert raw["recall"] == pytest.approx(len(chained & true) / len(true)) and raw["recall"] < 1
    if not merge_siblings:
        assert (closure["precision"], closure["recall"], closure["f1"]) == (1.0, 1.0, 1.0)
        assert (figures["met"]["f1"], figures["met"]["precision"], figures["met"]["wall_ratio"]) == (True, True, None)
        assert figures["met"]["help_seconds"] is None and figures["met"]["first_call_overhead"] is None
    else:
        family_pairs = cluster_pairs(clustered)
        wrong = family_pairs - true
        assert wrong and closure["false_positives"] == len(wrong) == closure["fp_same_family"]
        assert closure["precision"] == pytest.approx(len(family_pairs & true) / len(family_pairs))
        assert closure["recall"] == 1.0 and figures["met"]["precision"] is False
    clusters = json.loads((tmp_path / "work" / "tuned" / "ours_clusters.json").read_text())
    assert closure["predicted_pairs"] == len(cluster_pairs(clusters)) and ours["clusters"] == len(clusters)
    assert json.loads((tmp_path / "work" / "results.json").read_text()) == json.loads(last)


def _hand_run(raw: set[tuple[str, str]], clusters: list[list[str]] | None = None) -> run_mod.SideRun:
    return run_mod.SideRun(
        seconds=[2.0, 1.0, 3.0],
        pairs=raw,
        clusters=connected_clusters(raw) if clusters is None else clusters,
    )


def test_both_bases_are_scored_for_either_tool_on_a_hand_made_example() -> None:
    truth = _hand_truth()  # true pairs: x-y, x-z, y-z, s-s2
    # Declared: a chain through x's group, the sibling's true pair, and one false link s2-u.
    raw = {pair("x", "y"), pair("y", "z"), pair("s", "s2"), pair("s2", "u")}
    figures = run_mod.side_figures(_hand_run(raw), truth)

    # Raw pairs: 3 of 4 declared are true, 3 of 4 true pairs declared.
    assert figures["raw_pairs"]["predicted_pairs"] == 4 and figures["raw_pairs"]["true_positives"] == 3
    assert (figures["raw_pairs"]["precision"], figures["raw_pairs"]["recall"]) == (0.75, 0.75)
    # Closure: {x, y, z} and {s, s2, u}: 6 pairs, x-z joins the true ones, s-u and s2-u are false.
    closure = figures["closure"]
    assert (closure["predicted_pairs"], closure["true_positives"], closure["false_positives"]) == (6, 4, 2)
    assert closure["precision"] == pytest.approx(4 / 6) and closure["recall"] == 1.0
    assert closure["fp_involving_siblings"] == 2 and closure["fp_same_family"] == 0
    assert figures["clusters"] == 2 and figures["largest_cluster"] == 3 and figures["seconds_median"] == 2.0

    # A clustering tool (ours) is scored the same way from its own clusters and the merge pairs behind them.
    ours = run_mod.side_figures(_hand_run(raw, clusters=[["x", "y", "z"], ["s", "s2", "u"]]), truth)
    assert ours["raw_pairs"] == figures["raw_pairs"] and ours["closure"] == closure
    # Its clusters are what is scored on closure, even where they are not the closure of its pairs.
    split = run_mod.side_figures(_hand_run(raw, clusters=[["x", "y", "z"], ["s", "s2"]]), truth)
    assert split["closure"]["precision"] == 1.0 and split["closure"]["recall"] == 1.0


@pytest.mark.slow
def test_the_report_and_the_json_line_carry_both_tools_on_both_bases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "curation.file_dedup", _fake_file_dedup(False))

    def fake_imagededup(python: Path, image_dir: Path, repeats: int, log: Path) -> run_mod.SideRun:
        # Links each file to the one after it in its family: right within a group, wrong across a sibling.
        truth = CorpusTruth.load(image_dir.parent / corpus_mod.TRUTH_FILE)
        families: dict[int, list[str]] = {}
        for name, t in sorted(truth.files.items()):
            families.setdefault(t.family, []).append(name)
        pairs = {pair(a, b) for members in families.values() for a, b in _chain(members)}
        return run_mod.SideRun(seconds=[4.0] * repeats, pairs=pairs, clusters=connected_clusters(pairs))

    monkeypatch.setattr(run_mod, "ensure_imagededup_venv", lambda: Path(sys.executable))
    monkeypatch.setattr(run_mod, "run_imagededup", fake_imagededup)
    seed = _seed_with_every_kind(4)
    argv = ["--seed", str(seed), "--bases", "4", "--repeats", "1", "--workers", "1", "--skip-cold-start"]
    figures = run_mod.main([*argv, "--mix", "web", "--mix", "png-small", "--workdir", str(tmp_path / "work")])

    out = capsys.readouterr().out
    assert json.loads(out.strip().splitlines()[-1]) == json.loads(json.dumps(figures))
    assert list(figures["mixes"]) == ["web", "png-small"]
    for mix in ("web", "png-small"):
        for label in ("ours, raw pairs", "ours, closure", "imagededup, raw pairs", "imagededup, closure"):
            assert label in out
        assert f"{mix}: pairwise duplicates" in out
        truth = CorpusTruth.load(tmp_path / "work" / mix / "corpus" / corpus_mod.TRUTH_FILE)
        assert truth.mix.name == mix
        found = figures["mixes"][mix]
        theirs = found["imagededup"]
        declared = {pair(a, b) for a, b in json.loads((tmp_path / "work" / mix / "imagededup_pairs.json").read_text())}
        assert theirs["raw_pairs"] == evaluate(declared, truth)
        assert theirs["closure"] == evaluate(cluster_pairs(connected_clusters(declared)), truth)
        assert theirs["closure"]["recall"] == 1.0 > theirs["raw_pairs"]["recall"]
        assert set(found["ours"]) >= {"raw_pairs", "closure"}
        assert found["wall_ratio"] == pytest.approx(found["ours"]["seconds_median"] / 4.0)
        # The web-like mix is held to half of imagededup's time, every other mix to all of it.
        limit = 0.5 if mix == "web" else 1.0
        assert found["met"]["wall_ratio"] is (found["wall_ratio"] <= limit)
    assert figures["met"]["web_wall_ratio"] is figures["mixes"]["web"]["met"]["wall_ratio"]
    assert figures["targets_basis"] == "closure"
    assert "Dedup across corpus mixes" in out


def _fake_imagededup(root: Path, answer: dict[str, list[str]]) -> Path:
    """A stand-in imagededup package whose PHash answers `answer` and checks the arguments the benchmark passes."""
    methods = root / "imagededup" / "methods"
    methods.mkdir(parents=True)
    (root / "imagededup" / "__init__.py").write_text("")
    (methods / "__init__.py").write_text(
        "import json, os\n"
        "class PHash:\n"
        "    def find_duplicates(self, image_dir, max_distance_threshold, scores):\n"
        "        assert max_distance_threshold == 10 and scores is False and os.path.isdir(image_dir)\n"
        f"        return json.loads({json.dumps(json.dumps(answer))})\n"
    )
    return root


def test_imagededup_side_returns_each_pair_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answer = {"a.jpg": ["b.jpg", "c.png"], "b.jpg": ["a.jpg"], "c.png": ["a.jpg"], "d.jpg": []}
    monkeypatch.setenv("PYTHONPATH", str(_fake_imagededup(tmp_path / "pkgs", answer)))
    run = run_mod.run_imagededup(Path(sys.executable), tmp_path, repeats=2, log=tmp_path / "log")
    assert run.pairs == {pair("a.jpg", "b.jpg"), pair("a.jpg", "c.png")}
    assert run.clusters == [["a.jpg", "b.jpg", "c.png"]]
    assert len(run.seconds) == len(run.process_seconds) == 2 and run.consistent


def test_imagededup_venv_is_reused_when_it_works_and_installed_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setattr(run_mod, "ROOT", tmp_path)  # no uv there: an install attempt fails at once, offline
    monkeypatch.setenv("PYTHONPATH", str(_fake_imagededup(tmp_path / "pkgs", {})))
    assert run_mod.ensure_imagededup_venv(venv) == venv / "bin" / "python"

    monkeypatch.delenv("PYTHONPATH")
    with pytest.raises(FileNotFoundError, match="uv"):
        run_mod.ensure_imagededup_venv(venv)


def test_blur_check_would_catch_an_unblurred_copy() -> None:
    """The blur assertion above is not vacuous: a re-encode alone keeps the detail."""
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    same = np.asarray(Image.open(buf).convert("RGB"), dtype=np.int16)
    blurred = np.asarray(img.filter(ImageFilter.GaussianBlur(1.0)), dtype=np.int16)
    original = np.asarray(img, dtype=np.int16)
    assert _laplacian_energy(same) >= 0.9 * _laplacian_energy(original)
    assert _laplacian_energy(blurred) < 0.9 * _laplacian_energy(original)


# -- mixes and timing -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(corpus_mod.MIXES))
def test_each_mix_plans_and_draws_what_it_declares(name: str) -> None:
    mix = corpus_mod.MIXES[name]
    families = corpus_mod._plan(5, 300, mix)
    originals = [i for family in families for i in family if i.source is None]
    png = sum(i.fmt == "png" for i in originals) / len(originals)
    assert abs(png - mix.png_share) < 0.06  # 300 bases: well within sampling noise
    copies = [sum(1 for i in family if i.source == 0) for family in families]
    assert mix.copies[0] <= min(copies) and max(copies) <= mix.copies[1]
    for family in range(20):
        style = corpus_mod._draw_style(np.random.default_rng([5, family, 0]), mix)
        assert mix.long_side[0] <= max(style.width, style.height) <= mix.long_side[1]
        assert style.noise == mix.noise


@pytest.mark.slow
def test_a_mix_corpus_records_its_mix_and_differs_from_another(tmp_path: Path) -> None:
    small = generate_corpus(tmp_path / "small", seed=1, bases=3, workers=1, mix="png-small")
    loaded = CorpusTruth.load(tmp_path / "small" / corpus_mod.TRUTH_FILE)
    assert loaded.mix == small.mix == corpus_mod.MIXES["png-small"]
    web = generate_corpus(tmp_path / "web", seed=1, bases=3, workers=1, mix="web")
    assert max(max(Image.open(p).size) for p in small.paths()) <= 480
    assert min(max(Image.open(p).size) for p in web.paths() if truth_kind(web, p) in ("base", "sibling")) >= 1150


def truth_kind(truth: CorpusTruth, path: str) -> str:
    return truth.files[Path(path).name].kind


@pytest.mark.slow
def test_the_floor_times_our_decode_and_the_cold_start_reads_a_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perf.dedup_vs_imagededup import timing

    truth = generate_corpus(tmp_path / "c", seed=2, bases=3, workers=1, mix="sensor")
    calls: list[str] = []
    real = timing._decode_one
    monkeypatch.setattr(timing, "_decode_one", lambda path: (calls.append(path), real(path))[1])
    assert timing.decode_floor_seconds(truth.paths(), workers=2) > 0
    assert sorted(calls) == sorted(truth.paths())
    cold = timing.first_call(truth.paths(), workers=1, processes=1)
    assert cold["process_seconds"] > cold["import_seconds"] + cold["first_call_seconds"] > 0
    assert cold["first_call_overhead_seconds"] == pytest.approx(cold["first_call_seconds"] - cold["warm_call_seconds"])
    helped = timing.help_seconds(repeats=1)
    assert helped["median_seconds"] > 0 and len(helped["runs"]) == 1


def test_the_small_crops_mix_draws_crops_and_rotations_twice_as_often(tmp_path: Path) -> None:
    mix = corpus_mod.MIXES["small-crops"]
    assert mix.png_share == 0.17 and mix.long_side[1] <= 512 and mix.copy_weights is not None
    copies = [i.kind for family in corpus_mod._plan(5, 600, mix) for i in family if i.source is not None]
    counts = {kind: copies.count(kind) for kind in corpus_mod.COPY_KINDS}
    others = [counts[k] for k in corpus_mod.COPY_KINDS if k not in ("crop", "rotate")]
    assert min(counts["crop"], counts["rotate"]) > 1.4 * max(others)
    small = generate_corpus(tmp_path / "s", seed=1, bases=3, workers=1, mix="small-crops")
    assert CorpusTruth.load(tmp_path / "s" / corpus_mod.TRUTH_FILE).mix == mix
    assert max(max(Image.open(p).size) for p in small.paths()) <= 512
