"""Progress of a long loop or a stage of several steps, as `(done, total)` calls to a stage's callback
(`StageContext.on_progress`: a bar with the local engine, a Prefect progress artifact in a flow)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
#: (done, total) of one stage.
StepProgress = Callable[[int, int], None]
#: At most this many reports per loop: a report costs a bar redraw or an artifact update, not to be paid per item.
REPORTS = 200


def ticking(
    items: Iterable[T], progress: StepProgress | None, total: int, start: int = 0, of: int | None = None
) -> Iterator[T]:
    """`items` (`total` of them), reporting `start + done` out of `of` (default `total`) about REPORTS times and
    once at the end. `start` and `of` let several loops share one bar."""
    if progress is None:
        yield from items
        return
    overall = total if of is None else of
    every = max(1, total // REPORTS)
    done = 0
    for done, item in enumerate(items, 1):
        yield item
        if done % every == 0:
            progress(start + done, overall)
    if done % every:
        progress(start + done, overall)


class Steps:
    """A stage of `total` named steps that reports each one done; the name is for the reader of the code."""

    def __init__(self, progress: StepProgress | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def step(self, name: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(min(self.done, self.total), self.total)

    def finish(self) -> None:
        """All done, whichever steps did not apply."""
        self.done = self.total
        if self.progress is not None:
            self.progress(self.total, self.total)
