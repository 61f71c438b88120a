"""Every long stage of a build reports its progress, as `(stage, done, total)` calls that end at total: the local
engine draws them as bars and a Prefect run as progress artifacts (flows/engine/runner.py `ProgressArtifact`, the
same callback). Also the pieces: `data.progress` and the release's tar placement at many shards."""

from __future__ import annotations

import contextlib
import io
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from data.progress import REPORTS, Steps, ticking
from tests.conftest import SMALL_CONCEPTS, SMALL_COUNTRIES

LONG_STAGES = ("demo_corpus", "images", "image_dedup", "review", "assembly", "validation", "release")


@pytest.mark.slow
@pytest.mark.parametrize("benchmark", ["3xcm", "mixcube"])
def test_a_build_reports_every_long_stage_to_the_end(tmp_path: Path, benchmark: str) -> None:
    calls: dict[str, list[tuple[int, int]]] = defaultdict(list)

    def progress(stage: str, done: int, total: int) -> None:
        calls[stage].append((done, total))

    if benchmark == "3xcm":
        from flows.xcm.build import build_locally
        from flows.xcm.config import Build3XCMConfig

        config = Build3XCMConfig.demo(
            workspace_root=str(tmp_path / "ws"),
            countries=SMALL_COUNTRIES[:3],
            concepts={"include": SMALL_CONCEPTS[:2]},
            demo_corpus={"countries": SMALL_COUNTRIES[:3], "concepts": SMALL_CONCEPTS[:2], "images_per_query": 2},
            release={"root": str(tmp_path / "rel"), "version": "0.0.1"},
        )
        build_locally(config, progress)
        expected = LONG_STAGES
    else:
        from flows.mixcube.build import build_locally as build_mixcube
        from flows.mixcube.config import BuildMixCubeConfig

        mix = BuildMixCubeConfig.demo(
            workspace_root=str(tmp_path / "wsm"),
            originals={"per_cell": 1, "cultures": ["UK"], "categories": ["Food"]},
            release={"root": str(tmp_path / "rel"), "version": "0.0.1"},
            shard_size=4,
        )
        build_mixcube(mix, progress)
        expected = ("release",)
    for stage in expected:
        assert calls[stage], f"{stage} reported nothing; reported: {sorted(calls)}"
        done, total = calls[stage][-1]
        assert done == total > 0, (stage, calls[stage][-3:])
        assert all(d <= t for d, t in calls[stage]) and [d for d, _ in calls[stage]] == sorted(
            d for d, _ in calls[stage]
        ), (stage, calls[stage])


def test_ticking_reports_a_bounded_number_of_times_and_always_the_end() -> None:
    seen: list[tuple[int, int]] = []
    n = REPORTS * 7 + 3
    assert list(ticking(range(n), lambda d, t: seen.append((d, t)), n)) == list(range(n))
    assert seen[-1] == (n, n) and len(seen) <= REPORTS + 2
    shared: list[tuple[int, int]] = []
    list(ticking(range(10), lambda d, t: shared.append((d, t)), 10, start=10, of=20))
    assert shared[-1] == (20, 20) and shared[0][0] > 10
    steps: list[tuple[int, int]] = []
    counter = Steps(lambda d, t: steps.append((d, t)), 3)
    counter.step("a")
    counter.finish()
    assert steps == [(1, 3), (3, 3)]


def test_tars_are_placed_by_bisection_across_many_shards(tmp_path: Path) -> None:
    """The tar of each image, over a plan of many shards, is the one whose range holds it (was a scan per image)."""
    from data.publish.image_tables import _TarShards

    class Folder:
        def __init__(self) -> None:
            self.files: dict[str, bytes] = {}

        @contextlib.contextmanager
        def open_write(self, rel: str) -> Iterator[io.BytesIO]:
            stream = io.BytesIO()
            yield stream
            self.files[rel] = stream.getvalue()

    plan = [(number, start, start + 3) for number, start in enumerate(range(0, 30, 3))]
    folder = Folder()
    tars = _TarShards(folder, plan, ["i"])  # type: ignore[arg-type]  # a stand-in with the one method the tars call
    with tars:
        for position in range(30):
            tars.add(position, f"k{position}", b"\xff\xd8jpeg", {"i": position})
    assert tars.written == [f"images/{k:05d}.tar" for k in range(10)]
    with pytest.raises(ValueError, match="in no tar"):
        _TarShards(folder, plan, ["i"]).add(30, "late", b"", {})  # type: ignore[arg-type]
    # A worker's share of the plan (`_Segment.tars`): its tars keep their numbers, and positions outside are not its.
    share = _TarShards(folder, plan[4:7], ["i"])  # type: ignore[arg-type]
    assert [share.owns(p) for p in (11, 12, 20, 21)] == [False, True, True, False]
    with share:
        for position in range(12, 21):
            share.add(position, f"k{position}", b"\xff\xd8jpeg", {"i": position})
    assert share.written == [f"images/{k:05d}.tar" for k in (4, 5, 6)]
    with pytest.raises(ValueError, match="in no tar"):
        _TarShards(folder, plan[4:7], ["i"]).add(11, "before", b"", {})  # type: ignore[arg-type]
