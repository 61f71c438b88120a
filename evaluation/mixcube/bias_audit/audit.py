"""The Multilingual CLIP bias audit's counterfactual audit of a text-image encoder, on a MixCuBe release (`--task
audit`): the five groups of a quintet (the original and its four ethnicity swaps, MixCuBe §2) take the place of the
paper's protected groups, its App. B's prompt sets are asked in each of our query languages, and its MaxSkew (§3.6)
and harm rates (§3.6, App. A) are computed per prompt set and language, with §3.5's criminal-versus-animal contrast
and our paired reading of each swap against its own original. The arithmetic is `audit_metrics`'s, which reading of
the paper each key follows is `audit_readings`'s; this module gathers vectors, tables, the card and the figure.

The numbers are only as good as the syntheses: on placeholder swaps (the demo's) they mean nothing, and the card
says so first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import matplotlib.pyplot as plt  # data.figures, imported below too, makes it draw with Agg
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from data.bias_audit_prompt_sets import ENGLISH, ENGLISH_FALLBACK, PROMPT_SETS, AuditPrompts
from data.figures import figure_png
from data.publish.card import markdown_table
from data.publish.reader import Release
from data.reference import MixCubeReference
from evaluation.intervals import group_rng as _group_rng
from evaluation.mixcube.bias_audit import metrics as am
from evaluation.mixcube.bias_audit import readings as ar
from evaluation.mixcube.bias_audit.readings import CONFIDENCE, fmt, interval, number
from evaluation.mixcube.bias_audit.records import (
    AuditImage,
    AuditMetrics,
    AuditTies,
    BySet,
    HarmMoveRow,
    HarmRateRow,
    Interval,
    IntervalsBySet,
    MoveDirection,
    PairedShift,
    PairedShiftRow,
    PromptEntry,
    SkewReading,
    SkewRow,
    reductions,
)
from evaluation.models.embed import Progress, image_vectors
from evaluation.models.encoders import TextImageEncoder
from evaluation.models.vectors import TIE_TOLERANCE, refuse_degenerate, tied_winners
from evaluation.results.parts import Headline, ResultPart

STAGE = "MixCuBe audit"
#: The headline's language: English is the seed's own text for all three sets (no drafts), and its Table 1's.
HEADLINE_LANGUAGE = ENGLISH
_Column = Literal["sample_id", "original_id", "country", "category", "ethnicity", "placeholder"]
_COLUMNS: tuple[_Column, ...] = ("sample_id", "original_id", "country", "category", "ethnicity", "placeholder")
#: The reductions the headline gives per prompt set, in the registry's audit headline order.
_HEADLINE_SKEWS: tuple[SkewReading, ...] = ("max_skew", "max_skew_max_pair")


def _rows(release: Release) -> list[AuditImage]:
    columns = release.columns("default")
    missing = [c for c in _COLUMNS[:5] if c not in columns]
    if missing:
        raise ValueError(f"{STAGE}: the release's default table lacks {missing}")
    table = release.table("default", [c for c in _COLUMNS if c in columns])
    rows: list[AuditImage] = table.to_pylist()
    if not rows:
        raise ValueError(f"{STAGE}: the release's default table has no rows")
    for row in rows:
        row["placeholder"] = bool(row.get("placeholder") or False)
    return rows


def _groups(rows: Sequence[AuditImage], mix: MixCubeReference) -> list[str]:
    """The original first, then the swaps in the pack's order, then any other ethnicity seen."""
    seen = list(dict.fromkeys(str(r["ethnicity"]) for r in rows))
    preferred = [mix.original_label, *(e.label for e in mix.ethnicities)]
    return [g for g in preferred if g in seen] + [g for g in seen if g not in preferred]


def _image_vectors(
    release: Release, ids: Sequence[str], encoder: TextImageEncoder, progress: Progress | None
) -> npt.NDArray[np.float64]:
    """The encoder's vectors of the release's images, rows in `ids` order; bytes read only if the encoder asks
    (evaluation/xcm/task.py's reader, on the `default` table by `sample_id`)."""
    vectors = image_vectors(release, ids, encoder, progress, config="default", id_column="sample_id")
    return vectors.take(ids, "image")


class _Audit:
    """The state of one run: images in release order, their quintet and group, the prompts' vectors."""

    def __init__(
        self, rows: list[AuditImage], prompts: AuditPrompts, mix: MixCubeReference, n_resamples: int, seed: int
    ) -> None:
        self.rows, self.prompts, self.n_resamples, self.seed = rows, prompts, n_resamples, seed
        self.original = mix.original_label  # the release pack's label of an unswapped image
        self.groups = _groups(rows, mix)
        self.quintets = list(dict.fromkeys(str(r["original_id"]) for r in rows))
        q_index = {q: k for k, q in enumerate(self.quintets)}
        self.q = np.array([q_index[str(r["original_id"])] for r in rows], dtype=np.int64)
        self.g = np.array([self.groups.index(str(r["ethnicity"])) for r in rows], dtype=np.int64)
        self.present: npt.NDArray[np.bool_] = np.zeros((len(self.quintets), len(self.groups)), dtype=bool)
        for q, g, row in zip(self.q, self.g, rows, strict=True):
            if self.present[q, g]:
                raise ValueError(f"{STAGE}: quintet {row['original_id']!r} has two {row['ethnicity']!r} images")
            self.present[q, g] = True
        first: dict[str, AuditImage] = {}
        for row in rows:
            first.setdefault(str(row["original_id"]), row)
        self.quintet_meta = [first[q] for q in self.quintets]
        # One set of resamples for every figure: each interval then resamples the same quintets (they are read
        # together), and none depends on which other figures a run computes.
        rng = _group_rng(seed, "audit", "quintets", "")
        self.weights = am.quintet_weights(len(self.quintets), n_resamples, rng)
        # Degenerate vectors, gathered over every language and set (None until one is audited): each image's
        # largest gap from its own original's cosines, the largest spread of one prompt's cosines over the images,
        # and per language and set the images whose top-1 prompt tied its runner-up.
        self.original_row = self._original_rows()
        self.gap: npt.NDArray[np.float64] | None = None
        self.spread: float | None = None
        self.top1_ties: dict[str, dict[str, int]] = {}

    def _original_rows(self) -> npt.NDArray[np.int64]:
        """Per image, the row of its quintet's original; -1 for an original, or a swap whose quintet has none."""
        out = np.full(len(self.rows), -1, dtype=np.int64)
        if self.original not in self.groups:
            return out
        o = self.groups.index(self.original)
        row_of = {int(q): k for k, (q, g) in enumerate(zip(self.q, self.g, strict=True)) if g == o}
        for k, (q, g) in enumerate(zip(self.q, self.g, strict=True)):
            if g != o and int(q) in row_of:
                out[k] = row_of[int(q)]
        return out

    def note_scores(self, code: str, name: str, sims: npt.NDArray[np.float64]) -> None:
        """Gather what tells degenerate vectors from a fair model, from one language and set's cosines."""
        gap = am.original_gaps(sims, self.original_row)
        self.gap = gap if self.gap is None else np.fmax(self.gap, gap)
        spread = am.caption_spread(sims)
        self.spread = spread if self.spread is None else max(self.spread, spread)
        self.top1_ties.setdefault(code, {})[name] = int(tied_winners(sims).sum())

    def ties(self) -> AuditTies | None:
        """metrics["ties"]: the counts behind the degenerate-vector warnings; None when nothing tied."""
        if self.gap is None:
            return None
        swaps = self.gap[np.isfinite(self.gap)]
        tied_swaps = int((swaps <= TIE_TOLERANCE).sum())
        alike = bool(len(self.rows) > 1 and self.spread is not None and self.spread <= TIE_TOLERANCE)
        top1 = {c: {n: k for n, k in sets.items() if k} for c, sets in self.top1_ties.items()}
        top1 = {c: sets for c, sets in top1.items() if sets}
        if not (tied_swaps or alike or top1):
            return None
        return {
            "tolerance": TIE_TOLERANCE,
            "swaps": tied_swaps,
            "n_swaps": len(swaps),
            "all_images_alike": alike,
            "n_images": len(self.rows),
            "top1": top1,
        }

    def cube(self, values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """(Q, G, ...) from per-image values, NaN where a quintet lacks a group."""
        out = np.full((len(self.quintets), len(self.groups), *values.shape[1:]), np.nan)
        out[self.q, self.g] = values
        return out


def evaluate_audit(
    release: Release,
    encoder: TextImageEncoder,
    *,
    n_resamples: int,
    seed: int,
    progress: Progress | None = None,
    prompts: AuditPrompts | None = None,
) -> ResultPart:
    """The Multilingual CLIP bias audit (§3.5-3.6, App. A-B) of `encoder` on the release's quintets, in every
    language of `prompts` (the release's reference pack's App. B sets by default), with our paired reading; the groups
    are the pack's ethnicities.

    `headline["max_skew"]` and `headline["max_skew_max_pair"]` are, per prompt set, the English MaxSkew (§3.6's
    mean over pairs) and its largest pair (HEADLINE_LANGUAGE: the seed's own prompts for all three sets, and its
    Table 1's language; crime over its harmful captions, `audit_readings.SKEW_CAPTIONS`), as are `pct_NA` ...
    `pct_NH` (App. A's glosses, `audit_readings.APP_A_RATES`); every language's is in `metrics`, with our harm rates
    and the contrast. `per_query` has one row per image × language × prompt set (`audit_metrics.AUDIT_PER_QUERY`).
    Intervals are 95% percentile bootstraps over quintets, `n_resamples` each (0: none), seeded by `seed`."""
    pack = release.pack()
    prompts = prompts or pack.prompts()
    rows = _rows(release)
    state = _Audit(rows, prompts, pack.mixcube(), n_resamples, seed)
    images = _image_vectors(release, [str(r["sample_id"]) for r in rows], encoder, progress)
    languages = prompts.languages
    texts = list(dict.fromkeys(t for code in languages for name in PROMPT_SETS for t in prompts.texts(code, name)))
    text_matrix = _text_vectors(encoder, texts, "embed prompts", progress)
    row_of = {t: k for k, t in enumerate(texts)}

    collected = _Collected()
    for code in languages:
        for name in PROMPT_SETS:
            vectors = text_matrix[[row_of[t] for t in prompts.texts(code, name)]]
            _audit_set(state, code, name, am.cosine(images, vectors), collected)
        _rates(state, code, collected)
    return _part(state, prompts, collected, _contrast(state, images, encoder, progress))


def _text_vectors(
    encoder: TextImageEncoder, texts: list[str], stage: str, progress: Progress | None
) -> npt.NDArray[np.float64]:
    if progress is not None:
        progress(stage, 0, len(texts))
    matrix = np.asarray(encoder.text_vectors(texts), dtype=np.float64)
    refuse_degenerate(STAGE, encoder.identity.model_id, texts, matrix, "text")
    if progress is not None:
        progress(stage, len(texts), len(texts))
    return matrix


def _contrast(
    state: _Audit, images: npt.NDArray[np.float64], encoder: TextImageEncoder, progress: Progress | None
) -> ar.Contrast:
    """§3.5's contrast in English; skipped, saying so, when the encoder has no vectors for its captions (precomputed
    embeddings made for App. B's prompts only)."""
    captions = ar.contrast_captions(state.prompts)
    texts = [t for c in captions for t in (c.criminal, c.animal)]
    try:
        sims = am.cosine(images, _text_vectors(encoder, texts, "embed contrast prompts", progress))
    except KeyError:
        reason = "the encoder has no vectors for its captions (embed them to read it)"
        return ar.crime_contrast(state, captions, None, ENGLISH, reason)
    return ar.crime_contrast(state, captions, sims, ENGLISH)


class _Collected:
    def __init__(self) -> None:
        self.per_query: list[pa.Table] = []
        self.skew: list[SkewRow] = []
        self.harm: list[HarmRateRow] = []
        self.shift: list[PairedShiftRow] = []
        self.shift_quintets: list[pa.Table] = []
        self.moves: list[HarmMoveRow] = []
        # reduction (am.SKEW_READINGS) -> prompt set -> language -> value (interval); crime's over all its captions
        self.skews: dict[SkewReading, BySet] = {k: {n: {} for n in PROMPT_SETS} for k in am.SKEW_READINGS}
        self.skews_ci95: dict[SkewReading, IntervalsBySet] = {k: {n: {} for n in PROMPT_SETS} for k in am.SKEW_READINGS}
        self.crime_all: dict[SkewReading, dict[str, float | None]] = {k: {} for k in am.SKEW_READINGS}
        self.crime_all_ci95: dict[SkewReading, dict[str, Interval]] = {k: {} for k in am.SKEW_READINGS}
        self.top1: dict[str, dict[str, ar.Top1]] = {}  # language -> prompt set -> top-1 labels
        # reading -> language -> rate key -> value (interval)
        self.rates: dict[str, dict[str, dict[str, float | None]]] = {r: {} for r in ar.READINGS}
        self.rates_ci: dict[str, dict[str, dict[str, Interval]]] = {r: {} for r in ar.READINGS}


def _audit_set(state: _Audit, code: str, name: str, sims: npt.NDArray[np.float64], out: _Collected) -> None:
    prompts, groups = state.prompts, state.groups
    ids, categories = prompts.ids(name), prompts.categories(name)
    harmful = np.isin(categories, am.HARMFUL_CATEGORIES[name])
    counted = ar.skew_captions(name, categories)
    state.note_scores(code, name, sims)

    # §3.6: s_G(g, c), Skew per pair, and the set's reductions over pairs and (crime: its harmful) captions.
    scores = am.group_scores(sims, state.g, len(groups))
    skews = am.pair_skews(scores)
    for p, (i, j) in enumerate(am.group_pairs(len(groups))):
        for c, prompt_id in enumerate(ids):
            out.skew.append(
                {
                    "language": code,
                    "prompt_set": name,
                    "prompt_id": prompt_id,
                    "prompt_category": categories[c],
                    "in_set_max_skew": bool(counted[c]),
                    "group_a": groups[i],
                    "group_b": groups[j],
                    "p_a": number(scores[i, c]),
                    "p_b": number(scores[j, c]),
                    "skew": number(skews[p, c]),
                }
            )
    resampled = am.weighted_group_scores(state.cube(sims), state.present, state.weights)
    values = {k: v[name] for k, v in out.skews.items()}
    _store_skews(values, {k: v[name] for k, v in out.skews_ci95.items()}, code, scores, resampled, counted)
    if not counted.all():  # the crime set over all its captions too: the recognition the headline leaves out
        _store_skews(out.crime_all, out.crime_all_ci95, code, scores, resampled, np.ones_like(counted))

    top = am.top1(sims)
    margin = am.top1_margin(sims)
    top_ids = [ids[t] for t in top]
    out.top1.setdefault(code, {})[name] = ar.Top1(top_ids, np.asarray(categories)[top], margin)

    # Ours: the paired reading.
    lean = am.harm_lean(sims, harmful)
    harmful_mean = sims[:, harmful].mean(axis=1)
    _shifts(state, code, name, state.cube(lean), state.cube(harmful_mean), out)
    out.per_query.append(_per_query(state, code, name, sims, top_ids, categories, top, margin, lean))


def _store_skews(
    values: dict[SkewReading, dict[str, float | None]],
    ci95: dict[SkewReading, dict[str, Interval]],
    code: str,
    scores: npt.NDArray[np.float64],
    resampled: npt.NDArray[np.float64],
    captions: npt.NDArray[np.bool_],
) -> None:
    value, samples = am.set_skews(scores, captions), am.set_skews(resampled, captions)
    for key in am.SKEW_READINGS:
        values[key][code] = number(float(value[key]))
        ci95[key][code] = interval(samples[key])


def _rates(state: _Audit, code: str, out: _Collected) -> None:
    """App. A's rates by both readings (audit_readings), from one language's top-1 labels; ours also as harm moves."""
    for reading, rates in ar.READINGS.items():
        for key, rate in rates.items():
            values = ar.rate_values(rate, out.top1[code])
            rows = ar.rate_rows(state, code, reading, key, rate, values)
            out.harm += rows
            out.rates[reading].setdefault(code, {})[key] = rows[0]["pct"]
            out.rates_ci[reading].setdefault(code, {})[key] = [rows[0]["ci_low"], rows[0]["ci_high"]]
            if reading == "ours":
                (name,) = rate.sets
                _moves(state, code, key, values > 0, out.top1[code][name].ids, out)


def _moves(
    state: _Audit, code: str, harm: str, flags: npt.NDArray[np.bool_], top_ids: list[str], out: _Collected
) -> None:
    """Ours: each swap whose top-1 crosses a harm category's border relative to its own original."""
    if state.original not in state.groups:
        return
    flag, label = state.cube(flags.astype(np.float64)), np.full(state.present.shape, "", dtype=object)
    label[state.q, state.g] = top_ids
    o = state.groups.index(state.original)
    for q, meta in enumerate(state.quintet_meta):
        if not state.present[q, o]:
            continue
        for g, group in enumerate(state.groups):
            if g == o or not state.present[q, g] or flag[q, g] == flag[q, o]:
                continue
            out.moves.append(
                {
                    "original_id": state.quintets[q],
                    "country": meta["country"],
                    "category": meta["category"],
                    "ethnicity": group,
                    "language": code,
                    "harm": harm,
                    "direction": "into" if flag[q, g] else "out_of",
                    "original_top1": label[q, o],
                    "swap_top1": label[q, g],
                }
            )


def _shifts(
    state: _Audit,
    code: str,
    name: str,
    lean: npt.NDArray[np.float64],
    harmful: npt.NDArray[np.float64],
    out: _Collected,
) -> None:
    if state.original not in state.groups:
        return
    o = state.groups.index(state.original)
    for g, group in enumerate(state.groups):
        if g == o:
            continue
        lean_shift = am.paired_shifts(lean[:, o], lean[:, g])
        harmful_shift = am.paired_shifts(harmful[:, o], harmful[:, g])
        known = np.flatnonzero(np.isfinite(lean_shift))
        out.shift_quintets.append(
            pa.table(
                {
                    "original_id": [state.quintets[q] for q in known],
                    "country": [state.quintet_meta[q]["country"] for q in known],
                    "category": [state.quintet_meta[q]["category"] for q in known],
                    "ethnicity": [group] * len(known),
                    "language": [code] * len(known),
                    "prompt_set": [name] * len(known),
                    "lean_original": lean[known, o],
                    "lean_swap": lean[known, g],
                    "lean_shift": lean_shift[known],
                    "harmful_shift": harmful_shift[known],
                },
                schema=am.AUDIT_PAIRED_SHIFT_QUINTETS,
            )
        )
        weights = state.weights
        lean_ci = interval(am.weighted_mean(lean_shift, weights))
        harmful_ci = interval(am.weighted_mean(harmful_shift, weights))
        n = len(known)
        out.shift.append(
            {
                "language": code,
                "prompt_set": name,
                "ethnicity": group,
                "n_quintets": n,
                "lean_shift": float(lean_shift[known].mean()) if n else None,
                "lean_ci_low": lean_ci[0],
                "lean_ci_high": lean_ci[1],
                "harmful_shift": float(harmful_shift[known].mean()) if n else None,
                "harmful_ci_low": harmful_ci[0],
                "harmful_ci_high": harmful_ci[1],
                "share_toward_harm": float((lean_shift[known] > 0).mean()) if n else None,
            }
        )


def _per_query(
    state: _Audit,
    code: str,
    name: str,
    sims: npt.NDArray[np.float64],
    top_ids: list[str],
    categories: list[str],
    top: npt.NDArray[np.intp],
    margin: npt.NDArray[np.float64],
    lean: npt.NDArray[np.float64],
) -> pa.Table:
    n, width = sims.shape
    entry = state.prompts.entry(code, name)
    top_categories = [categories[t] for t in top]
    harmful = set(am.HARMFUL_CATEGORIES[name])
    columns: dict[str, list[str | bool]] = {key: [r[key] for r in state.rows] for key in _COLUMNS}
    cosine = pa.ListArray.from_arrays(
        pa.array(np.arange(0, (n + 1) * width, width, dtype=np.int32)), pa.array(sims.ravel())
    )
    return pa.table(
        {
            **columns,
            "language": [code] * n,
            "prompt_set": [name] * n,
            "review_status": [entry.review_status] * n,
            "cosine": cosine,
            "top1_prompt": top_ids,
            "top1_category": top_categories,
            "top1_margin": margin,
            "harmful": [c in harmful for c in top_categories],
            "harm_lean": lean,
        },
        schema=am.AUDIT_PER_QUERY,
    )


def _status(prompts: AuditPrompts) -> dict[str, dict[str, PromptEntry]]:
    return {
        code: {
            name: {"review_status": prompts.entry(code, name).review_status, "origin": prompts.entry(code, name).origin}
            for name in PROMPT_SETS
        }
        for code in prompts.languages
    }


def _warnings(state: _Audit, prompts: AuditPrompts) -> list[str]:
    warnings = []
    placeholders = sum(1 for r in state.rows if r["placeholder"])
    if placeholders:
        warnings.append(
            f"These numbers are meaningless: {placeholders} of the release's {len(state.rows)} images are "
            "placeholder syntheses (stand-ins for the ethnicity swaps, not swaps). The audit compares each "
            "original with its swaps, so every skew, harm rate and paired shift here is only as good as the "
            "syntheses, and these are none."
        )
    warnings += _tie_warnings(state)  # after the placeholders', before the drafts'
    drafts = [c for c in prompts.languages if any(prompts.entry(c, n).review_status != "source" for n in PROMPT_SETS)]
    fallback = [
        c for c in prompts.languages if any(prompts.entry(c, n).origin == ENGLISH_FALLBACK for n in PROMPT_SETS)
    ]
    if drafts:
        text = (
            f"Prompts in {', '.join(drafts)} are drafts awaiting native review (Al Sahili et al.'s App. B gives only "
            "English, "
            "and communion in es, fr, pt)"
        )
        if fallback:
            text += f"; the English text stands in for {', '.join(fallback)}"
        warnings.append(text + ".")
    return warnings


def _most(count: int, n: int) -> bool:
    """More than half, the 3XCM evaluation's threshold for ties that decide winners."""
    return count * 2 > n


def _tie_warnings(state: _Audit) -> list[str]:
    """Degenerate vectors make the audit read fair (MaxSkew 0) or certain (a harm rate of 0 or 100 %): say so,
    as the 3XCM evaluation says when ties decide its winners."""
    ties = state.ties()
    if not ties:
        return []
    out = []
    tol = f"{TIE_TOLERANCE:g}"
    if ties["all_images_alike"]:
        out.append(
            f"All {ties['n_images']} images score every prompt alike (within {tol}): the encoder gave them one "
            "vector, so the groups cannot differ (MaxSkew 0, paired shifts 0) and every harm rate is one image's "
            f"top-1 counted {ties['n_images']} times (0 or 100 %); MaxSkew, the harm rates and the paired reading "
            "are not measured. Check the vectors."
        )
    elif _most(ties["swaps"], ties["n_swaps"]):
        out.append(
            f"{ties['swaps']} of {ties['n_swaps']} swaps score every prompt within {tol} of their own original: the "
            'encoder does not tell them apart, so MaxSkew near 0 ("fairer"), the paired shifts and the harm moves '
            "come from identical scores, not from a fair model; they are not measured. Check the vectors."
        )
    n = len(state.rows)
    tied = [(c, s, k) for c, sets in ties["top1"].items() for s, k in sets.items() if _most(k, n)]
    if tied:
        sets = sorted({s for _, s, _ in tied}, key=PROMPT_SETS.index)
        rates = [r.label for r in ar.APP_A_RATES.values() if set(r.sets) & set(sets)]
        ours = [r.label for r in ar.OUR_RATES.values() if set(r.sets) & set(sets)]
        # One entry per set, its languages listed: the counts per language are in metrics["ties"]["top1"].
        where = "; ".join(f"{s} in {', '.join(c for c, t, _ in tied if t == s)}" for s in sets)
        out.append(
            f"The top-1 prompt of more than half of the {n} images tied its runner-up within {tol} for {where}: "
            f"the prompt order, not the model, chose it, so the harm rates of those sets ({', '.join(rates)}; ours: "
            f"{', '.join(ours)}) and their harm moves are not measured. Check the vectors (identical prompt vectors "
            "tie everywhere)."
        )
    return out


def _card(state: _Audit, out: _Collected, warnings: list[str], metrics: AuditMetrics) -> list[str]:
    prompts = state.prompts
    # The warnings are the part's `warnings`: the results card puts them first, before any table.
    lines = [
        "## Counterfactual bias audit (Al Sahili et al., multilingual CLIP bias audit, §3.5–3.6, App. A–B)",
        "",
        f"{metrics['n_images']} images in {metrics['n_quintets']} quintets; groups: {', '.join(state.groups)} "
        "(the original and its ethnicity swaps stand in for the seed's protected groups). MaxSkew (§3.6): Skew(A, B) "
        "averaged over the unordered group pairs, per caption, then the maximum over the set's captions; lower is "
        "fairer. Crime: over its harmful captions (crime terms, non-human labels); the last column keeps them all. "
        f"Brackets: {int(CONFIDENCE * 100)}% bootstrap intervals over quintets. `*`: prompts awaiting "
        "native review. Skew divides by the group scores, which are cosines: where they are near 0 (a model that "
        "does not read the language, or an untrained one) it is unbounded, and the maximum need not lie inside its "
        "interval. Per caption and pair: `audit/skew.parquet`.",
        "",
    ]
    table = []
    everything, all_crime = metrics["crime_all_captions"], ar.all_crime_captions(prompts)
    for code in prompts.languages:
        row: dict[str, str] = {"language": code}
        marks = {n: "" if prompts.entry(code, n).review_status == "source" else "*" for n in PROMPT_SETS}
        for name in PROMPT_SETS:
            row[name] = fmt(metrics["max_skew"][name][code], metrics["max_skew_ci95"][name][code]) + marks[name]
        row[all_crime] = fmt(everything["max_skew"][code], everything["max_skew_ci95"][code]) + marks["crime"]
        table.append(row)
    lines += [markdown_table(table), ""]
    lines += ar.skew_reductions_card(metrics, HEADLINE_LANGUAGE, prompts)
    lines += ar.contrast_card(metrics["crime_contrast"], state.groups)
    lines += ar.rates_card(metrics, prompts.languages)
    lines += [
        "## Paired reading (ours)",
        "",
        "Ours, not the seed's: each swap against its own original. Harm lean = mean cosine to the set's harmful "
        "prompts minus mean cosine to its others; the table gives the mean over quintets of lean(swap) − "
        f"lean(original) in {HEADLINE_LANGUAGE} (every language: `audit/paired_shift.parquet`), positive = toward "
        "harm, and how many swaps move an image into one of our harm rates' categories its original was not in "
        "(`harm_moves`).",
        "",
    ]
    shifts = [r for r in out.shift if r["language"] == HEADLINE_LANGUAGE]
    paired: list[dict[str, str]] = []
    for group in [g for g in state.groups if g != state.original]:
        row = {"swap": group}
        for name in PROMPT_SETS:
            found = next((r for r in shifts if r["ethnicity"] == group and r["prompt_set"] == name), None)
            row[name] = fmt(found["lean_shift"], [found["lean_ci_low"], found["lean_ci_high"]]) if found else "n/a"
        moves = metrics["harm_moves"][HEADLINE_LANGUAGE]
        row["moves into harm"] = ", ".join(f"{r.label} {moves[h][group]['into']}" for h, r in ar.OUR_RATES.items())
        paired.append(row)
    lines += [markdown_table(paired), ""]
    return lines


def skew_heatmap_png(max_skew: dict[str, dict[str, float | None]], languages: list[str]) -> bytes:
    """MaxSkew per language (rows) and prompt set (columns), the value in each cell; a missing one grey."""
    matrix = np.array([[np.nan if max_skew[n][c] is None else max_skew[n][c] for n in PROMPT_SETS] for c in languages])
    figure, axes = plt.subplots(figsize=(4.5, max(2.5, 0.32 * len(languages) + 1.2)))
    colormap = plt.get_cmap("viridis").with_extremes(bad="#d9d9d9")
    # numpy.ma's stubs leave masked_invalid unannotated, an untyped call under the strict flags.
    image = axes.imshow(np.ma.masked_invalid(matrix), cmap=colormap, aspect="auto")  # type: ignore[no-untyped-call]
    for (i, j), value in np.ndenumerate(matrix):
        axes.text(j, i, "n/a" if not np.isfinite(value) else f"{value:.2f}", ha="center", va="center", fontsize=7)
    axes.set_xticks(range(len(PROMPT_SETS)), list(PROMPT_SETS), fontsize=8)
    axes.set_yticks(range(len(languages)), languages, fontsize=8)
    figure.colorbar(image, ax=axes, fraction=0.05, label="MaxSkew")
    axes.set_title("MaxSkew over the quintet groups (Al Sahili et al. §3.6)", fontsize=10)
    return figure_png(figure)


def _moves_summary(
    moves: list[HarmMoveRow], state: _Audit
) -> dict[str, dict[str, dict[str, dict[MoveDirection, int]]]]:
    """language -> harm -> swap -> {"into": n, "out_of": n}, every swap listed (zeros included)."""
    swaps = [g for g in state.groups if g != state.original]
    summary: dict[str, dict[str, dict[str, dict[MoveDirection, int]]]] = {
        code: {h: {g: {"into": 0, "out_of": 0} for g in swaps} for h in ar.OUR_RATES}
        for code in state.prompts.languages
    }
    for m in moves:
        summary[m["language"]][m["harm"]][m["ethnicity"]][m["direction"]] += 1
    return summary


def _part(state: _Audit, prompts: AuditPrompts, out: _Collected, contrast: ar.Contrast) -> ResultPart:
    warnings = _warnings(state, prompts)
    skews = reductions(out.skews, out.skews_ci95)
    paired: dict[str, dict[str, dict[str, PairedShift]]] = {}
    for r in out.shift:
        paired.setdefault(r["language"], {}).setdefault(r["prompt_set"], {})[r["ethnicity"]] = {
            "n_quintets": r["n_quintets"],
            "lean_shift": r["lean_shift"],
            "lean_ci95": [r["lean_ci_low"], r["lean_ci_high"]],
            "harmful_shift": r["harmful_shift"],
            "harmful_ci95": [r["harmful_ci_low"], r["harmful_ci_high"]],
            "share_toward_harm": r["share_toward_harm"],
        }
    metrics: AuditMetrics = {
        "prompts": {
            "version": prompts.version_key(),
            "sets": {name: prompts.ids(name) for name in PROMPT_SETS},
            "languages": _status(prompts),
        },
        "languages": prompts.languages,
        "groups": state.groups,
        "headline_language": HEADLINE_LANGUAGE,
        "n_images": len(state.rows),
        "n_quintets": len(state.quintets),
        "complete_quintets": int(state.present.all(axis=1).sum()),
        "placeholder_images": sum(1 for r in state.rows if r["placeholder"]),
        "bootstrap": {
            "unit": "quintet",
            "n_resamples": state.n_resamples,
            "seed": state.seed,
            "confidence": CONFIDENCE,
        },
        # §3.6's MaxSkew and its other reductions (audit_readings.SKEW_DEFINITIONS): reduction -> set -> language
        "max_skew": skews["max_skew"],
        "max_skew_ci95": skews["max_skew_ci95"],
        "max_skew_max_pair": skews["max_skew_max_pair"],
        "max_skew_max_pair_ci95": skews["max_skew_max_pair_ci95"],
        "max_skew_caption_mean": skews["max_skew_caption_mean"],
        "max_skew_caption_mean_ci95": skews["max_skew_caption_mean_ci95"],
        "max_skew_captions": {
            name: [str(i) for i in np.asarray(prompts.ids(name))[ar.skew_captions(name, prompts.categories(name))]]
            for name in PROMPT_SETS
        },
        "max_skew_definition": ar.SKEW_DEFINITIONS,
        # The crime set over all 21 captions: its protected-class captions measure recognition of the swap.
        "crime_all_captions": reductions(out.crime_all, out.crime_all_ci95),
        "crime_contrast": contrast.metrics,  # §3.5's second reading, in English
        # App. A's letters by App. A's glosses (audit_readings.APP_A_RATES): language -> pct_*
        "harm_rates": out.rates["app_a"],
        "harm_rates_ci95": out.rates_ci["app_a"],
        "harm_rates_definition": {k: r.definition for k, r in ar.APP_A_RATES.items()},
        "abstain_margin": ar.ABSTAIN_MARGIN,
        # Ours: §3.6's harm categories (culturebench's pct_* until they took App. A's glosses), language ->
        # negative_agency ...
        "harm_rates_ours": out.rates["ours"],
        "harm_rates_ours_ci95": out.rates_ci["ours"],
        "harm_rates_ours_definition": {k: r.definition for k, r in ar.OUR_RATES.items()},
        "paired_shift": paired,  # ours, not the seed's
        "harm_moves": _moves_summary(out.moves, state),  # ours, not the seed's
    }
    ties = state.ties()
    if ties:  # only then: a result without ties reads exactly as before
        metrics["ties"] = ties
    headline: dict[str, Headline] = {}
    ci95: dict[str, Interval] = {}
    for key in _HEADLINE_SKEWS:
        headline[key] = {n: out.skews[key][n][HEADLINE_LANGUAGE] for n in PROMPT_SETS}
        ci95 |= {f"{key}.{n}": out.skews_ci95[key][n][HEADLINE_LANGUAGE] for n in PROMPT_SETS}
    for rate in ar.APP_A_RATES:
        headline[rate] = out.rates["app_a"][HEADLINE_LANGUAGE][rate]
        ci95[rate] = out.rates_ci["app_a"][HEADLINE_LANGUAGE][rate]
    tables = {
        "skew": pa.Table.from_pylist(out.skew + contrast.skew, schema=am.AUDIT_SKEW),
        "harm_rates": pa.Table.from_pylist(out.harm, schema=am.AUDIT_HARM_RATES),
        "paired_shift": pa.Table.from_pylist(out.shift, schema=am.AUDIT_PAIRED_SHIFT),
        "paired_shift_quintets": pa.concat_tables(out.shift_quintets)
        if out.shift_quintets
        else am.AUDIT_PAIRED_SHIFT_QUINTETS.empty_table(),
        "harm_moves": pa.Table.from_pylist(out.moves, schema=am.AUDIT_HARM_MOVES),
        "crime_contrast": contrast.table,
    }
    skipped = (
        [f"audit: the crime contrast (§3.5): {contrast.metrics['skipped']}"] if "skipped" in contrast.metrics else []
    )
    return ResultPart(
        per_query=pa.concat_tables(out.per_query),
        tables=tables,
        metrics=dict(metrics),
        headline=headline,
        ci95=ci95,
        figures={"skew_heatmap.png": skew_heatmap_png(out.skews["max_skew"], prompts.languages)},
        card=_card(state, out, warnings, metrics),
        skipped=skipped,
        warnings=warnings,
    )
