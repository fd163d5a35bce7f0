"""Reading user files with a size limit that holds for devices, pipes and compressed data.

Every reader of user files (graphs, plans, instances) calls :func:`read_limited`
before it parses anything.
"""

from __future__ import annotations

import os
import stat
import zlib
from itertools import chain
from pathlib import Path
from typing import Iterator

from pase.errors import FormatError

__all__ = ["read_limited"]

# :func:`read_limited` reads this much at a time.
_CHUNK_BYTES = 2**20
_GZIP_MAGIC = b"\x1f\x8b"


def read_limited(path: str | Path, limit: int, *, what: str = "file", gunzip: bool = False) -> bytes:
    """The contents of the file at ``path``, at most ``limit`` bytes of them.

    The file is read in chunks and refused once it yields more than ``limit``
    bytes, whatever its size on disk says, so a device (``/dev/zero``), a pipe
    or a file that grows while read costs at most ``limit + 1`` bytes of
    memory; a regular file larger than ``limit`` is refused before reading.
    With ``gunzip``, contents starting with the gzip magic number are
    decompressed while read (every member of a multi-member file), and
    ``limit`` bounds both the compressed and the uncompressed bytes, so a
    small file that inflates enormously (a gzip bomb) is refused early.

    Parameters
    ----------
    path : str or Path
    limit : int
        Most bytes accepted.
    what : str
        What the file is, for messages ("plan file", "instance"...).
    gunzip : bool
        Decompress gzip-compressed contents.

    Raises
    ------
    FormatError
        The file is missing, a directory, unreadable, larger than ``limit``
        bytes (uncompressed), or holds damaged or truncated gzip data; the
        message names the file and what to do.
    """
    path = Path(path)
    shown = f"{what} {str(path)!r}"
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise FormatError(f"cannot read {shown}: it is a directory; give the path of a file")
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise FormatError(f"{path.name} is {info.st_size / 2**20:.1f} MiB; at most {limit / 2**20:.0f} MiB is "
                              "accepted")
        with open(path, "rb") as f:
            chunks = _chunks(f, limit, path.name)
            first = next(chunks, b"")
            if gunzip and first[:2] == _GZIP_MAGIC:
                return _inflate(first, chunks, limit, path.name)
            return b"".join([first, *chunks])
    except FileNotFoundError:
        raise FormatError(f"cannot read {shown}: there is no such file; check the path") from None
    except OSError as exc:
        raise FormatError(f"cannot read {shown}: {exc.strerror or exc}") from None
    except (zlib.error, EOFError) as exc:
        raise FormatError(f"cannot read {shown}: damaged gzip data ({exc}); compress the file again") from None


def _too_large(name: str, limit: int, how: str = "") -> FormatError:
    return FormatError(f"{name} is more than {limit / 2**20:.0f} MiB{how}; at most {limit / 2**20:.0f} MiB is accepted")


def _chunks(f, limit: int, name: str) -> Iterator[bytes]:
    """The bytes of ``f`` in chunks; ``FormatError`` as soon as they add up to more than ``limit``."""
    total = 0
    while chunk := f.read(min(_CHUNK_BYTES, limit + 1 - total)):
        total += len(chunk)
        if total > limit:
            raise _too_large(name, limit)
        yield chunk


def _inflate(first: bytes, chunks: Iterator[bytes], limit: int, name: str) -> bytes:
    """Gzip data (``first``, then ``chunks``) decompressed; ``FormatError`` past ``limit`` uncompressed bytes."""
    out: list[bytes] = []
    size = 0
    inflater = zlib.decompressobj(wbits=31)  # 31: gzip header and trailer
    for chunk in chain((first,), chunks):
        while chunk:
            # Never ask for more than one byte past the limit: the output is bounded while it is made.
            piece = inflater.decompress(chunk, limit + 1 - size)
            size += len(piece)
            if size > limit:
                raise _too_large(name, limit, " uncompressed")
            out.append(piece)
            if inflater.eof:  # a member ended: what follows is the next member
                chunk = inflater.unused_data
                if chunk:
                    inflater = zlib.decompressobj(wbits=31)
            else:
                chunk = inflater.unconsumed_tail
    if not inflater.eof:
        raise EOFError("the compressed data ends early")
    return b"".join(out)
