"""Writing what hkv makes (traces, profiles) so that a bad place to write is one `HkvError`.

A file is written atomically: into a temporary file beside it, renamed over it when complete, so
an interrupted or failed run (Ctrl-C, a full disk) leaves neither a half-written file nor the
temporary one. hkv writes only regular files: an empty name, a folder, a symbolic link, a device
node (`/dev/null`), a pipe or a socket is refused before anything is written, because the rename
would replace it with a regular file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from hkv.errors import HkvError
from hkv.inputs import open_problem, path_shown

TEMP_NAME_CHARS = 40
"""How much of the target's name the temporary file's name repeats (so it stays short enough)."""


def check_output(
    path: str | os.PathLike[str], what: str = "out", example: str = "out.json"
) -> Path:
    """`path` as a place to write a new or replace a regular file; `HkvError` naming what is
    wrong (`what` names the flag, `example` is a file name to suggest)."""
    text = os.fspath(path)
    if not text.strip():
        raise HkvError(f"{what}: got an empty path; give a file name such as {example}")
    if "\0" in text:
        raise HkvError(f"{what}: {path_shown(text)} holds a NUL byte; give a file name")
    try:
        mode = os.lstat(text).st_mode
    except FileNotFoundError:
        _probe(Path(text), what)
        return Path(text)
    except OSError as exc:  # a name too long, a path under a file
        raise HkvError(open_problem(text, what, exc, "write")) from None
    if stat.S_ISLNK(mode):
        raise HkvError(
            f"{what}: {path_shown(text)} is a symbolic link, which writing would replace; "
            "give the path of the file itself"
        )
    if stat.S_ISDIR(mode):
        raise HkvError(
            f"{what}: {path_shown(text)} is a folder; give a file name such as {example}"
        )
    if not stat.S_ISREG(mode):
        raise HkvError(
            f"{what}: {path_shown(text)} is not a regular file (a device, pipe or socket), "
            "which writing would replace; give a file's path"
        )
    _probe(Path(text), what)
    return Path(text)


def _probe(path: Path, what: str) -> None:
    """Make and remove a file in the nearest existing folder above `path`, so that a place
    that takes no files (read-only, `/proc`) is refused before the work, not after it."""
    folder = path.parent
    while not os.path.isdir(folder) and folder != folder.parent:
        folder = folder.parent
    try:
        fd, name = tempfile.mkstemp(prefix=".hkv-probe-", dir=folder)
    except OSError as exc:
        raise HkvError(open_problem(path, what, exc, "write")) from None
    os.close(fd)
    os.unlink(name)


def write_atomic(
    path: str | os.PathLike[str], chunks: Iterable[str], what: str = "out", example: str = "out"
) -> Path:
    """Write `chunks` (UTF-8 text) to `path` atomically, creating missing folders; returns the
    path. `HkvError` when the place cannot be written; nothing is left behind then."""
    return _write_atomic(path, chunks, what, example, binary=False)


def write_atomic_bytes(
    path: str | os.PathLike[str], data: bytes, what: str = "out", example: str = "out"
) -> Path:
    """`write_atomic` for bytes (a PNG, say)."""
    return _write_atomic(path, (data,), what, example, binary=True)


def _write_atomic(
    path: str | os.PathLike[str], chunks: Iterable, what: str, example: str, *, binary: bool
) -> Path:
    path = check_output(path, what, example)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        prefix = f".{path.name[:TEMP_NAME_CHARS]}."
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise HkvError(open_problem(path, what, exc, "write")) from None
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as out:
            for chunk in chunks:
                out.write(chunk)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600
        os.replace(tmp, path)
    except OSError as exc:
        raise HkvError(open_problem(path, what, exc, "write")) from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
