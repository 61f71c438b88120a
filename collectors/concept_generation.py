"""Concept generation with Gemini (3XCM paper §3.2.1 and App. H), and the operator review that gates it.

Generated concepts never flow straight into a build. `generate_concept_candidates` returns a CONCEPT_CANDIDATES
table; `write_review_file` merges it into a CSV an operator edits; `accept_candidates` marks rows accepted (each
gets a new, stable concept id from 1000 up) or rejected. Only accepted rows reach a build, through the "reviewed"
backend of `collectors/concepts.py`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal, NoReturn

import fsspec
import pyarrow as pa
from pydantic import BaseModel, Field, model_validator

from data.clients.gemini import GeminiSettings, failure_row, failures_table
from data.clients.openai_compatible import LanguageModelSettings, OpenAICompatibleSettings, structured_client
from data.concept_names import invalid_name, normalize
from data.reference import ReferencePack, pack_or_default
from data.schemas import CONCEPT_CANDIDATES, empty, from_rows
from data.stage import BackendConfig
from data.text_safety import csv_bytes

STAGE = "concept_generation"
REVIEW_PENDING, REVIEW_ACCEPTED, REVIEW_REJECTED = "pending", "accepted", "rejected"
REVIEW_STATUSES = (REVIEW_PENDING, REVIEW_ACCEPTED, REVIEW_REJECTED)
#: Shipped concept ids are the authors' 0..138 (data/authors/xcm-bench.csv); accepted candidates are numbered
#: from here, leaving room.
FIRST_NEW_CONCEPT_ID = 1000
REVIEW_COLUMNS = (
    "candidate_id",
    "concept",
    "rationale",
    "near_shipped",
    "review_status",
    "concept_id",
    "model",
    "prompt_sha256",
)
REQUIRED_REVIEW_COLUMNS = ("candidate_id", "concept", "review_status", "concept_id")

# 3XCM paper App. H, Figure 11, verbatim (its grammar included); only the count and the country list are filled in.
# The paper asked for 100 concepts over 10 countries.
APP_H_PROMPT = (
    "list {count} concepts that unique and vary in these country\n"
    "including {countries}\n"
    "\n"
    "like this\n"
    "\n"
    '{{"food":{{"China":"Mala Xiang Guo", ..., "Thailand":\n'
    '"Padthai", "USA":"hamburger"}}, "costume":{{"China":\n'
    '"Hanfu", ..., "Thailand":"Sabai", "USA":"cowboy"}}}}'
)
# Ours: maps the paper's free-form example onto the structured output schema.
OUTPUT_NOTE = (
    "\n\nAnswer in the JSON response schema: one entry per concept, exactly {count} entries, all different. "
    '`name` is the concept itself, a short English noun phrase like the keys "food" and "costume" of the example. '
    "`rationale` says how the concept varies across these countries, e.g. one instance per country as in the example."
)


class ConceptCandidate(BaseModel):
    name: str = Field(description="The concept: a short English noun phrase, e.g. 'food' or 'costume'.")
    rationale: str | None = Field(
        default=None, description="How the concept varies across the countries, e.g. one instance per country."
    )


class ConceptCandidates(BaseModel):
    concepts: list[ConceptCandidate]


class GeminiConceptGenerationConfig(BackendConfig[NoReturn]):  # read by generate_concept_candidates
    backend: Literal["gemini", "openai"] = "gemini"
    gemini: GeminiSettings = Field(default_factory=GeminiSettings)
    openai: OpenAICompatibleSettings | None = Field(
        default=None, description="backend openai: the OpenAI-compatible endpoint (base_url, model) that drafts."
    )
    count: int = Field(default=100, ge=1, le=1000, description="Concepts to ask for (App. H asked for 100).")
    countries: list[str] = Field(
        default_factory=list,
        description="Countries named in the prompt (names, slugs or ISO codes of the reference pack); every "
        "country of the pack when empty (the default pack's 16).",
    )
    reference: str | None = Field(
        default=None, description="The reference pack (folder or fsspec URL); None for the shipped default pack."
    )

    def pack(self) -> ReferencePack:
        return pack_or_default(self.reference)

    @property
    def llm(self) -> LanguageModelSettings:
        return self.openai if self.backend == "openai" and self.openai is not None else self.gemini

    @model_validator(mode="after")
    def _canonical(self) -> GeminiConceptGenerationConfig:
        if self.backend == "openai" and self.openai is None:
            raise ValueError("backend openai needs an openai section: {base_url: ..., model: ...}")
        pack = self.pack()
        names = pack.country_names(self.countries) if self.countries else [c.name for c in pack.countries]
        self.countries = list(dict.fromkeys(names))
        return self


def concept_prompt(count: int, countries: list[str]) -> str:
    return APP_H_PROMPT.format(count=count, countries=", ".join(countries)) + OUTPUT_NOTE.format(count=count)


def candidate_id(name: str) -> str:
    """Stable across runs and models: the same normalised name always gets the same id."""
    return hashlib.sha256(normalize(name).encode()).hexdigest()[:16]


def _validator(count: int) -> Callable[[ConceptCandidates], None]:
    def validate(answer: ConceptCandidates) -> None:
        names = [c.name.strip() for c in answer.concepts]
        if any(not n for n in names):
            raise ValueError("a concept has an empty name")
        seen: dict[str, str] = {}
        for name in names:
            why = invalid_name(" ".join(name.split()))  # a name is written to the review CSV and into builds
            if why is not None:
                raise ValueError(f"concept {name!r}: {why}")
            key = normalize(name)
            if key in seen:
                raise ValueError(f"concepts repeat: {seen[key]!r} and {name!r}")
            seen[key] = name
        if len(names) < count:
            raise ValueError(f"asked for {count} concepts, got {len(names)}")

    return validate


def generate_concept_candidates(
    config: GeminiConceptGenerationConfig, cache_dir: str | None = None
) -> tuple[pa.Table, pa.Table]:
    """(CONCEPT_CANDIDATES, LLM_FAILURES). Every candidate is "pending" until an operator accepts it."""
    client = structured_client(config.llm, cache_dir)
    request_key = f"concepts:{config.count}"
    answer = client.generate_structured(
        [concept_prompt(config.count, config.countries)], ConceptCandidates, _validator(config.count), request_key
    )
    if not answer.ok:
        return empty(CONCEPT_CANDIDATES), failures_table([failure_row(STAGE, request_key, config.llm.model, answer)])
    assert answer.value is not None  # an ok structured answer holds its validated value
    shipped = {normalize(c.concept): c.concept for c in config.pack().concepts}
    rows = []
    for item in answer.value.concepts[: config.count]:  # more than asked: keep the first ones, in answer order
        name = " ".join(item.name.split())
        rows.append(
            {
                "candidate_id": candidate_id(name),
                "concept": name,
                "rationale": (item.rationale or "").strip() or None,
                "near_shipped": shipped.get(normalize(name)),
                "model": config.llm.model,
                "prompt_sha256": answer.prompt_sha256,
                "review_status": REVIEW_PENDING,
            }
        )
    return from_rows(rows, CONCEPT_CANDIDATES), failures_table([])


# -- the operator's review file ----------------------------------------------------------------------------------
class ReviewFileError(ValueError):
    """A review file that cannot be trusted; the message names the file and the line."""


@dataclass
class ReviewRow:
    line: int  # in the CSV file, header = line 1
    candidate_id: str
    concept: str
    review_status: str
    concept_id: int | None
    rationale: str = ""
    near_shipped: str = ""
    model: str = ""
    prompt_sha256: str = ""
    extra: dict[str, str] = field(default_factory=dict)  # columns an operator added (notes ...) survive rewrites

    def as_csv(self) -> dict[str, str]:
        return {
            "candidate_id": self.candidate_id,
            "concept": self.concept,
            "rationale": self.rationale,
            "near_shipped": self.near_shipped,
            "review_status": self.review_status,
            "concept_id": "" if self.concept_id is None else str(self.concept_id),
            "model": self.model,
            "prompt_sha256": self.prompt_sha256,
            **self.extra,
        }


def read_review_file(path: str, pack: ReferencePack) -> list[ReviewRow]:
    """Parse and check a review file; any problem raises ReviewFileError naming the line."""
    fs, fs_path = fsspec.core.url_to_fs(path)
    if not fs.exists(fs_path):
        raise FileNotFoundError(f"review file {path} does not exist; create it with `culturebench concepts generate`")
    with fs.open(fs_path, "rb") as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8-sig")  # spreadsheet programs add a BOM
    except UnicodeDecodeError as exc:
        raise ReviewFileError(
            f"review file {path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); save it as UTF-8"
        ) from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED_REVIEW_COLUMNS if c not in header]
    if missing:
        raise ReviewFileError(f"review file {path}, line 1: missing column(s) {missing}; header is {header}")
    shipped_ids = {c.concept_id for c in pack.concepts}
    rows: list[ReviewRow] = []
    seen_candidates: dict[str, int] = {}
    seen_ids: dict[int, int] = {}
    for record in reader:
        line = reader.line_num

        def fail(message: str, line: int = line) -> ReviewFileError:
            return ReviewFileError(f"review file {path}, line {line}: {message}")

        if None in record or any(v is None for v in record.values()):
            raise fail(f"expected {len(header)} fields as in the header")
        values = {k: v.strip() for k, v in record.items()}
        cid = values["candidate_id"]
        if not cid:
            raise fail("empty candidate_id")
        if cid in seen_candidates:
            raise fail(f"candidate_id {cid} repeats line {seen_candidates[cid]}")
        seen_candidates[cid] = line
        status = values["review_status"].lower()
        if status not in REVIEW_STATUSES:
            raise fail(f"review_status {values['review_status']!r} is not one of {list(REVIEW_STATUSES)}")
        concept = " ".join(values["concept"].split())
        if not concept:
            raise fail("empty concept")
        why = invalid_name(concept)  # no formula, markup or control character reaches a build or the file again
        if why is not None:
            raise fail(f"concept {concept!r}: {why}")
        concept_id: int | None = None
        if values["concept_id"]:
            try:
                concept_id = int(values["concept_id"])
            except ValueError:
                raise fail(f"concept_id {values['concept_id']!r} is not an integer") from None
            if concept_id < 0 or concept_id in shipped_ids:
                raise fail(f"concept_id {concept_id} is negative or a concept id of the reference pack")
            if concept_id in seen_ids:
                raise fail(f"concept_id {concept_id} repeats line {seen_ids[concept_id]}")
            seen_ids[concept_id] = line
        if status == REVIEW_ACCEPTED and concept_id is None:
            raise fail(
                f"{concept!r} is accepted but has no concept_id: accept it with accept_candidates(), "
                f"or fill in an unused id >= {FIRST_NEW_CONCEPT_ID}"
            )
        known = set(REVIEW_COLUMNS)
        rows.append(
            ReviewRow(
                line=line,
                candidate_id=cid,
                concept=concept,
                review_status=status,
                concept_id=concept_id,
                rationale=values.get("rationale", ""),
                near_shipped=values.get("near_shipped", ""),
                model=values.get("model", ""),
                prompt_sha256=values.get("prompt_sha256", ""),
                extra={k: v for k, v in values.items() if k not in known},
            )
        )
    return rows


def _write_review_rows(path: str, rows: list[ReviewRow]) -> None:
    extra_columns = list(dict.fromkeys(k for r in rows for k in r.extra))
    header = [*REVIEW_COLUMNS, *extra_columns]
    # every cell through the CSV neutraliser: a rationale or an operator's note may start like a formula
    data = csv_bytes(header, ([row.as_csv().get(name, "") for name in header] for row in rows))
    fs, fs_path = fsspec.core.url_to_fs(path)
    parent = fs_path.rsplit("/", 1)[0] if "/" in fs_path else "."
    fs.makedirs(parent, exist_ok=True)
    tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{fs_path.rsplit('/', 1)[-1]}"
    try:  # atomic: an operator's file is never left half written
        with fs.open(tmp, "wb") as handle:
            handle.write(data)
        fs.mv(tmp, fs_path)
    except BaseException:
        if fs.exists(tmp):
            fs.rm(tmp)
        raise


def write_review_file(candidates: pa.Table, path: str, pack: ReferencePack) -> int:
    """Merge candidates into the review file (created if absent); returns how many new rows were added.

    Rows already in the file are kept exactly as the operator left them (status, assigned id, edited name);
    only candidates whose candidate_id is new are appended, as pending.
    """
    fs, fs_path = fsspec.core.url_to_fs(path)
    rows = read_review_file(path, pack) if fs.exists(fs_path) else []
    known = {r.candidate_id for r in rows}
    added = 0
    for record in candidates.to_pylist():
        if record["candidate_id"] in known:
            continue
        known.add(record["candidate_id"])
        rows.append(
            ReviewRow(
                line=0,
                candidate_id=record["candidate_id"],
                concept=record["concept"],
                review_status=REVIEW_PENDING,
                concept_id=None,
                rationale=record.get("rationale") or "",
                near_shipped=record.get("near_shipped") or "",
                model=record.get("model") or "",
                prompt_sha256=record.get("prompt_sha256") or "",
            )
        )
        added += 1
    _write_review_rows(path, rows)
    return added


def accept_candidates(
    path: str, pack: ReferencePack, candidate_ids: list[str] | None = None, reject: bool = False
) -> list[ReviewRow]:
    """Accept (or reject) candidates in the review file; None means every pending row. Returns the changed rows.

    A newly accepted row gets concept_id = max(ids in the file and the pack, 999) + 1, so ids are stable, never reused
    and never a concept of the pack (`pack`: the reference pack the review file extends). A row
    that already has an id keeps it, also when it is rejected (so the id is not handed out again).
    """
    rows = read_review_file(path, pack)
    if candidate_ids is None:
        targets = {r.candidate_id for r in rows if r.review_status == REVIEW_PENDING}
    else:
        targets = set(candidate_ids)
        unknown = sorted(targets - {r.candidate_id for r in rows})
        if unknown:
            raise KeyError(f"candidate ids not in review file {path}: {unknown}")
    taken = [*(r.concept_id for r in rows if r.concept_id is not None), *(c.concept_id for c in pack.concepts)]
    next_id = max([FIRST_NEW_CONCEPT_ID - 1, *taken]) + 1
    status = REVIEW_REJECTED if reject else REVIEW_ACCEPTED
    changed: list[ReviewRow] = []
    for index, row in enumerate(rows):
        if row.candidate_id not in targets:
            continue
        concept_id = row.concept_id
        if not reject and concept_id is None:
            concept_id = next_id
            next_id += 1
        if status != row.review_status or concept_id != row.concept_id:
            rows[index] = replace(row, review_status=status, concept_id=concept_id)
            changed.append(rows[index])
    _write_review_rows(path, rows)
    return changed


def review_file_sha256(path: str) -> str:
    """Content hash of a review file, for stage fingerprints (the path alone does not change when it is edited)."""
    fs, fs_path = fsspec.core.url_to_fs(path)
    with fs.open(fs_path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()
