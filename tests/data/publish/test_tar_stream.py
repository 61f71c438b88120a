"""The release's tar writer against webdataset's own `TarWriter`: the same samples give the same bytes."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
import webdataset as wds

from data.publish.tar_stream import TarStream

# Names and sizes that reach each branch of the format: a plain ustar header, a name past ustar's 100 bytes (a PAX
# header before the member), non-ASCII (PAX again), an empty member, a member filling whole blocks, and sizes that
# end the archive on and off a record boundary.
SAMPLES = [
    ("plain-1-0-eng", b"\xff\xd8" + bytes(range(256)) * 3),
    ("x" * 140 + "-2-1-nav", b"j" * 512),
    ("côte d'ivoire-3-0-nav-fr", b""),
    ("saudi arabia-4-9-eng", b"z" * 10_239),
    ("k-5-1-eng", b"q" * 1),
]


def _webdataset_bytes(samples: list[tuple[str, bytes]]) -> bytes:
    sink = io.BytesIO()
    writer = wds.TarWriter(sink, mtime=0, user="culturebench", group="culturebench", encoder=False)
    for key, data in samples:
        writer.write({"__key__": key, "jpg": data, "json": json.dumps({"key": key}).encode()})
    writer.close()
    return sink.getvalue()


def _ours(samples: list[tuple[str, bytes]]) -> bytes:
    sink = io.BytesIO()
    stream = TarStream(sink, user="culturebench", group="culturebench")
    for key, data in samples:
        stream.write_sample(key, {"json": json.dumps({"key": key}).encode(), "jpg": data})
    stream.close()
    stream.close()  # a second close writes nothing more
    return sink.getvalue()


@pytest.mark.parametrize("count", [0, 1, 2, len(SAMPLES)])
def test_the_tar_is_webdatasets_byte_for_byte(count: int) -> None:
    ours = _ours(SAMPLES[:count])
    assert ours == _webdataset_bytes(SAMPLES[:count])
    assert len(ours) % tarfile.RECORDSIZE == 0


def test_tarfile_and_webdataset_read_every_sample_back(tmp_path: Path) -> None:
    shard = tmp_path / "00000.tar"
    shard.write_bytes(_ours(SAMPLES))
    with tarfile.open(shard) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    for key, data in SAMPLES:
        assert members[f"{key}.jpg"] == data
    read = {s["__key__"]: s for s in wds.WebDataset(str(shard), shardshuffle=False)}
    assert {key: (read[key]["jpg"], json.loads(read[key]["json"])) for key, _ in SAMPLES} == {
        key: (data, {"key": key}) for key, data in SAMPLES
    }


def test_a_closed_stream_takes_no_member() -> None:
    stream = TarStream(io.BytesIO(), user="u", group="g")
    stream.close()
    with pytest.raises(ValueError, match="closed"):
        stream.add("late.jpg", b"x")
