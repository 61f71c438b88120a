"""WebDataset tar members written straight into a stream.

`tarfile` builds each member's header (`TarInfo.tobuf`, its default PAX format: plain ustar unless a name needs
more), and the member's bytes go to the sink as they are: no copy of the `TarInfo`, no `BytesIO`, no pass through
tarfile's 10 KB stream buffer. The output is byte for byte what `webdataset.TarWriter(sink, mtime=0, user=...,
group=..., encoder=False)` writes for the same samples (`tests/data/publish/test_tar_stream.py` checks it against
webdataset itself). It does not import webdataset, whose package imports torch: about 1.5 s of CPU in every worker
process that writes a tar.
"""

from __future__ import annotations

import tarfile
from typing import Protocol

_NUL = b"\0"


class Sink(Protocol):
    def write(self, data: bytes, /) -> object: ...


class TarStream:
    """Members appended to `sink` in order; `close` writes the end-of-archive blocks and pads the stream to a whole
    record, as `tarfile.TarFile.close` does. The sink stays open."""

    def __init__(self, sink: Sink, *, user: str, group: str, mode: int = 0o444, mtime: int = 0) -> None:
        self.sink = sink
        self.user = user
        self.group = group
        self.mode = mode
        self.mtime = mtime
        self.offset = 0
        self.closed = False

    def add(self, name: str, data: bytes) -> None:
        if self.closed:
            raise ValueError("the tar is closed")
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = self.mtime
        info.mode = self.mode
        info.uname = self.user
        info.gname = self.group
        # The encoding and errors `tarfile.open` gives a TarFile by default, so that names encode as they would there.
        header = info.tobuf(tarfile.DEFAULT_FORMAT, tarfile.ENCODING, "surrogateescape")
        self.sink.write(header)
        self.sink.write(data)
        padding = -len(data) % tarfile.BLOCKSIZE
        if padding:
            self.sink.write(_NUL * padding)
        self.offset += len(header) + len(data) + padding

    def write_sample(self, key: str, members: dict[str, bytes]) -> None:
        """One WebDataset sample: `key.<extension>` per member, in sorted order of extension (webdataset's)."""
        for extension in sorted(members):
            self.add(f"{key}.{extension}", members[extension])

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        end = 2 * tarfile.BLOCKSIZE
        self.offset += end
        end += -self.offset % tarfile.RECORDSIZE
        self.sink.write(_NUL * end)
