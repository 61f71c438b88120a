"""The typed rows of `data.schemas` (and the stages' own) name their table's columns, in the schema's order."""

from __future__ import annotations

import typing

import pyarrow as pa
import pytest

from collectors.release_images import FETCH_REPORT, FetchVerdict
from curation.tagging import TagsRow
from data import schemas
from data.clients.gemini import failures_table
from synthesis.attempts import AttemptOutcome

ROWS: list[tuple[type, pa.Schema]] = [
    (schemas.ImagesRow, schemas.IMAGES),
    (schemas.LlmFailureRow, schemas.LLM_FAILURES),
    (schemas.TranslationRow, schemas.TRANSLATIONS),
    (schemas.TranslationConflictRow, schemas.TRANSLATION_CONFLICTS),
    (schemas.FilterScoresRow, schemas.SYNTHESIS_FILTER_SCORES),
    (schemas.MixcubeFiltersRow, schemas.MIXCUBE_FILTERS),
    (schemas.SynthesisAttemptRow, schemas.SYNTHESIS_ATTEMPTS),
    (TagsRow, schemas.TAGS),
    (FetchVerdict, FETCH_REPORT),
]


@pytest.mark.parametrize(("row", "schema"), ROWS, ids=[row.__name__ for row, _ in ROWS])
def test_a_typed_row_has_its_schemas_columns(row: type, schema: pa.Schema) -> None:
    assert set(typing.get_type_hints(row)) == set(schema.names)


def test_a_fetched_url_is_an_images_row_without_its_id_in_the_schemas_order() -> None:
    fetched = schemas.fetched_url("https://example.org/a.jpg", schemas.STATUS_OK, attempts=1)
    assert list(fetched) == [n for n in schemas.IMAGES.names if n != "image_id"]
    row = schemas.images_row("img-1", fetched)
    assert list(row) == schemas.IMAGES.names
    assert row == schemas.blank_row(
        schemas.IMAGES, image_id="img-1", url="https://example.org/a.jpg", status=schemas.STATUS_OK, attempts=1
    )
    assert schemas.from_rows([row], schemas.IMAGES).num_rows == 1


def test_the_outcome_of_an_attempt_is_the_attempt_columns_its_plan_leaves_open() -> None:
    planned = {"attempt_id", "original_id", "ethnicity", "attempt", "prompt", "seed", "mask_sha256"}
    planned |= {"retry_kind", "retry_of"}
    assert set(typing.get_type_hints(AttemptOutcome)) == set(schemas.SYNTHESIS_ATTEMPTS.names) - planned


def test_a_string_cell_is_read_as_it_is_and_anything_else_refused() -> None:
    assert schemas.str_cell({"url": "a"}, "url") == "a"
    with pytest.raises(TypeError, match="url must be a string, not None"):
        schemas.str_cell({"url": None}, "url")
    assert failures_table([]).schema == schemas.LLM_FAILURES
