"""Atomic file writes: a file appears whole under its name or not at all."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing (``mode`` ``"w"`` for text, ``"wb"``
    for bytes); when the block ends without an error it is renamed onto ``path``, otherwise
    removed. Readers never see a half-written file."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json_atomic(obj: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Dump ``obj`` as compact JSON with sorted keys to ``path``, atomically. The text is encoded
    in one piece (``json.dumps``, the C encoder) and then written: ``json.dump`` to a file encodes
    chunk by chunk in Python, an order of magnitude slower on large objects."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    with atomic_open(path) as fh:
        fh.write(text)
