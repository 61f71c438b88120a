"""The least-used eligible image of a slot's pool, found through an index instead of a mask over the catalog.

Every image has a key, usage * (n + 1) + its seeded priority: the smallest key of a pool is its least-used member,
ties broken by the seed. Images are grouped into cells, one per (concept, country); each cell keeps its members'
keys sorted, and each of the three ways a slot can draw (all images, one concept, one country) keeps its cells
sorted by their smallest key: a `sortedcontainers.SortedList` for all cells (100,000 at a million images), plain
sorted lists for a concept's or a country's (hundreds to a few thousand, where bisect and a short memmove beat a
tree). A query walks the cells of its pool from the smallest
head, skips the cells its rule leaves out whole (a language group, the query concept's own cell), tests the few
images its rule leaves out one by one (tags and copies of the query concept), and stops as soon as no later cell
can hold a smaller key. Using an image moves its key in its cell and, when the cell's head changes, that cell in
three sorted lists: O(log n) per choice, where a mask would cost O(n) per query.

A language group can hold most cells (a scale test's synthetic English-speaking countries: 59 of 87 countries in
one group), and a query of that group would then walk past every one of its cells, each time (at a million images,
assembly and validation ran 10x slower). So the all-images and per-concept lists are also kept per language group,
and a walk that has skipped SKIP_LIMIT cells of a left-out group starts over on the lists of the groups it may draw
from. Both walks answer the smallest eligible key, so the answer is the same.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from sortedcontainers import SortedList

from curation.rules import Catalog, Slot

NO_IMAGE = -1
#: Cells of left-out groups a walk of the combined list may skip before it switches to the per-group lists.
SKIP_LIMIT = 32


class PoolIndex:
    def __init__(self, catalog: Catalog, priority: npt.NDArray[np.integer]) -> None:
        n = len(catalog)
        self.catalog = catalog
        self.stride = n + 1  # keys of one usage level never reach the next
        # Python lists, not arrays: the per-choice work is scalar, and list indexing is several times faster.
        self.key: list[int] = priority.astype(np.int64).tolist()
        image_of_priority = np.empty(n, dtype=np.int64)
        image_of_priority[priority] = np.arange(n)
        self.image_of_priority: list[int] = image_of_priority.tolist()
        countries = max(1, len(catalog.country_names))
        # int64 throughout, also for an empty catalog (every image taken down): no cells, and every query of an
        # empty pool answers NO_IMAGE.
        cell_keys = np.asarray(catalog.concept, dtype=np.int64) * countries + np.asarray(catalog.country, np.int64)
        cells, self.cell_of = np.unique(cell_keys, return_inverse=True)
        self.cells = len(cells)
        self.cell_concept = cells // countries
        self.cell_country = cells % countries
        self.cell_group: list[int] = np.asarray(catalog.country_group, np.int64)[self.cell_country].tolist()
        self.cell_concept_of: list[int] = self.cell_concept.tolist()
        self.cell_index = {int(c): i for i, c in enumerate(cells)}
        self.country_group: list[int] = catalog.country_group.tolist()
        self._left_out_cache: dict[tuple[tuple[str, ...], int, int], set[int]] = {}
        self.cell_of_image: list[int] = self.cell_of.tolist()
        order = np.argsort(priority, kind="stable")
        members: list[list[int]] = [[] for _ in range(self.cells)]
        for image in order.tolist():  # ascending keys: each cell's list comes out sorted
            members[self.cell_of_image[image]].append(self.key[image])
        self.members = members
        self.by_concept: dict[int, list[int]] = {}
        self.by_country: dict[int, list[int]] = {}
        self.by_concept_group: dict[tuple[int, int], list[int]] = {}
        by_group: dict[int, list[int]] = {}
        entries = sorted(self._entry(cell) for cell in range(self.cells))
        self.everything = SortedList(entries)
        for entry in entries:  # ascending: each list comes out sorted
            cell = entry % self.cells
            concept, group = int(self.cell_concept[cell]), self.cell_group[cell]
            self.by_concept.setdefault(concept, []).append(entry)
            self.by_country.setdefault(int(self.cell_country[cell]), []).append(entry)
            self.by_concept_group.setdefault((concept, group), []).append(entry)
            by_group.setdefault(group, []).append(entry)
        self.by_group = {group: SortedList(cells) for group, cells in by_group.items()}
        self.concept_groups: dict[int, list[int]] = {}
        for concept, group in self.by_concept_group:
            self.concept_groups.setdefault(concept, []).append(group)

    def _entry(self, cell: int) -> int:
        return self.members[cell][0] * self.cells + cell

    def image(self, key: int) -> int:
        return self.image_of_priority[key % self.stride]

    def usage(self, image: int) -> int:
        return self.key[image] // self.stride

    def usages(self) -> npt.NDArray[np.int64]:
        return np.array(self.key, dtype=np.int64) // self.stride

    def use(self, image: int) -> None:
        """Count one more use of `image`: its key moves up one usage level."""
        cell = self.cell_of_image[image]
        old = self.key[image]
        keys = self.members[cell]
        head_before = keys[0]
        del keys[bisect.bisect_left(keys, old)]
        bisect.insort(keys, old + self.stride)
        self.key[image] = old + self.stride
        if keys[0] != head_before:
            before, after = head_before * self.cells + cell, keys[0] * self.cells + cell
            concept, group = self.cell_concept_of[cell], self.cell_group[cell]
            for tree in (self.everything, self.by_group[group]):
                tree.remove(before)
                tree.add(after)
            for cells in (
                self.by_concept[concept],
                self.by_country[int(self.cell_country[cell])],
                self.by_concept_group[(concept, group)],
            ):
                del cells[bisect.bisect_left(cells, before)]
                bisect.insort(cells, after)

    def least_used(self, slot: Slot, concept: int, x: int, y: int = -1, x_group: int | None = None) -> int:
        """The slot's least-used eligible image for a query of `concept` from country `x` in the language of group
        `x_group` (default: x's one; and descriptor country `y`), or NO_IMAGE when its pool is empty."""
        countries = len(self.catalog.country_names)
        if slot.partition in ("cell_x", "cell_y"):
            cell = self.cell_index.get(concept * countries + (x if slot.partition == "cell_x" else y))
            return NO_IMAGE if cell is None else self.image(self.members[cell][0])
        if slot.partition == "all":
            sorted_cells = self.everything
        elif slot.partition == "concept":
            sorted_cells = self.by_concept.get(concept)
        else:
            sorted_cells = self.by_country.get(x if slot.partition == "country_x" else y)
        if not sorted_cells:
            return NO_IMAGE
        left_out = self._left_out(slot, x, y, x_group)
        skip_cell = self._cell_filter(slot, concept, left_out)
        shows = self.catalog.extra
        fits: Callable[[int], bool] | None = (
            (lambda image: concept not in shows.get(image, ())) if slot.not_showing else None
        )
        cell_group = self.cell_group
        by_group = slot.partition in ("all", "concept") and bool(left_out)  # the partitions kept per group
        in_left_out = (lambda cell: cell_group[cell] in left_out) if by_group else None
        best, finished = self._walk(sorted_cells, skip_cell, fits, None, in_left_out)
        if not finished:  # most cells are left out: walk the lists of the groups it may draw from instead
            if slot.partition == "all":
                lists: list[SortedList | list[int]] = [cells for g, cells in self.by_group.items() if g not in left_out]
            else:
                lists = [self.by_concept_group[(concept, g)] for g in self.concept_groups[concept] if g not in left_out]
            for cells in lists:
                best, _ = self._walk(cells, skip_cell, fits, best)
        return NO_IMAGE if best is None else self.image(best)

    def _left_out(self, slot: Slot, x: int, y: int, x_group: int | None) -> set[int]:
        """The signatures (`Catalog.group`) whose cells the slot leaves out whole: those holding the query's
        language group ("x"), those sharing a group with the descriptor country ("y")."""
        if not slot.excluded_groups:
            return set()
        gx = self.catalog.country_queries[x][0][1] if x_group is None else x_group
        key = (slot.excluded_groups, gx, y if "y" in slot.excluded_groups else -1)
        found = self._left_out_cache.get(key)
        if found is None:
            mask = np.zeros(len(self.catalog.group_names), dtype=bool)
            for which in slot.excluded_groups:
                mask |= self.catalog.left_out(which, gx, y)
            found = self._left_out_cache[key] = set(np.flatnonzero(mask).tolist())
        return found

    def _walk(
        self,
        sorted_cells: SortedList | list[int],
        skip_cell: Callable[[int], bool],
        fits: Callable[[int], bool] | None,
        best: int | None,
        left_out: Callable[[int], bool] | None = None,
    ) -> tuple[int | None, bool]:
        """(the smallest first-fitting key of the cells, if below `best`; whether the walk finished): it stops
        early, unfinished, once it has skipped SKIP_LIMIT cells that `left_out` names."""
        skipped = 0
        for entry in sorted_cells:
            head, cell = divmod(entry, self.cells)
            if best is not None and head >= best:
                break
            if skip_cell(cell):
                if left_out is not None and left_out(cell):
                    skipped += 1
                    if skipped > SKIP_LIMIT:
                        return best, False
                continue
            key = self._first_fitting(cell, fits)
            if key is not None and (best is None or key < best):
                best = key
        return best, True

    def _cell_filter(self, slot: Slot, concept: int, left_out: set[int]) -> Callable[[int], bool]:
        """Cells the rule leaves out whole: those of a left-out language group, and, when candidates must not show
        the query concept, the query concept's own cells."""
        cell_group, cell_concept = self.cell_group, self.cell_concept_of
        if slot.not_showing and left_out:
            return lambda cell: cell_group[cell] in left_out or cell_concept[cell] == concept
        if slot.not_showing:
            return lambda cell: cell_concept[cell] == concept
        if left_out:
            return lambda cell: cell_group[cell] in left_out
        return lambda cell: False

    def _first_fitting(self, cell: int, fits: Callable[[int], bool] | None) -> int | None:
        keys = self.members[cell]
        if fits is None:
            return keys[0]
        return next((key for key in keys if fits(self.image(key))), None)
