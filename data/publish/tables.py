"""Tables in an immutable folder as `datasets` reads them: a config's Parquet file with the HF features metadata,
and CSV files whose cells no spreadsheet runs as formulas."""

from __future__ import annotations

import io
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from data.publish.folder import ImmutableFolder
from data.text_safety import csv_bytes


def hf_schema(schema: pa.Schema) -> pa.Schema:
    """The schema with the `huggingface` features metadata `datasets` reads back."""
    from datasets import Features  # heavy import, only when writing a table

    return Features.from_arrow_schema(schema).arrow_schema


def write_table(folder: ImmutableFolder, config_name: str, table: pa.Table, split: str = "train") -> str:
    """A small table in one file, `<config>/<split>-00000-of-00001.parquet`; returns its path in the folder."""
    rel = f"{config_name}/{split}-00000-of-00001.parquet"
    buffer = io.BytesIO()
    pq.write_table(table.cast(hf_schema(table.schema)), buffer, compression="zstd")
    folder.write_bytes(rel, buffer.getvalue())
    return rel


def table_csv_bytes(table: pa.Table, columns: Iterable[str]) -> bytes:
    """The table's `columns` as CSV, no cell of which a spreadsheet runs as a formula."""
    names = list(columns)
    rows = table.select(names).to_pylist()
    return csv_bytes(names, ([row[c] for c in names] for row in rows))


def write_csv(folder: ImmutableFolder, rel: str, table: pa.Table, columns: Iterable[str]) -> None:
    folder.write_bytes(rel, table_csv_bytes(table, columns))
