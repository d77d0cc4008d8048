"""Reading what users hand hkv (JSON, YAML and text files) so that every mistake is an `HkvError`.

A file may be missing, a folder, under something that is not a folder, unreadable, named longer
than the file system allows, endless (`/dev/zero`), not UTF-8, not JSON, nested deeper than the
parser recurses, holding integers longer than Python converts, or of the wrong shape; each case
gets one line naming the file (shortened when long) and what to give instead. Files are read in
bounded pieces, so no input makes hkv read without end. YAML is read with the safe loader and
without aliases, so an alias bomb is refused before it expands.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from hkv.errors import HkvError, shown

MIB = 2**20
MAX_FILE_BYTES = 64 * MIB
"""The largest config, profile or model file read (real ones are kilobytes)."""
MAX_LINE_BYTES = 64 * MIB
"""The longest line of a line-per-record file (a trace request of a million blocks is ~8 MiB)."""
MAX_LINES_BYTES = 2048 * MIB
"""The largest line-per-record file (a trace) read."""


def path_shown(path: str | os.PathLike[str]) -> str:
    """A path as messages show it: quoted, and shortened when long."""
    return shown(os.fspath(path))


def open_problem(path: str | os.PathLike[str], what: str, exc: OSError, verb: str = "read") -> str:
    """One line saying why `path` could not be opened or `verb`-ed."""
    name = path_shown(path)
    if isinstance(exc, FileNotFoundError) and verb != "read":
        return f"{what}: cannot {verb} {name} (its folder takes no new files); give another path"
    if isinstance(exc, FileNotFoundError):
        return f"{what}: no such file {name}"
    if isinstance(exc, IsADirectoryError):
        return f"{what}: {name} is a folder; give a file"
    if isinstance(exc, NotADirectoryError):
        return f"{what}: {name} lies under something that is not a folder; give a file's path"
    if exc.errno == errno.ENAMETOOLONG:
        return f"{what}: {name} is a name longer than the file system allows; give a shorter one"
    return f"{what}: cannot {verb} {name} ({exc.strerror or type(exc).__name__})"


@contextmanager
def opened(path: str | os.PathLike[str], what: str) -> Iterator[BinaryIO]:
    """`path` open for binary reading; `HkvError` when it cannot be."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below; open errors become HkvError
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        if not isinstance(exc, OSError):
            raise HkvError(f"{what}: {path_shown(path)} holds a NUL byte; give a file") from None
        raise HkvError(open_problem(path, what, exc)) from None
    with handle:
        yield handle


def _read(handle: BinaryIO, size: int, path: Any, what: str, *, line: bool = False) -> bytes:
    try:
        return handle.readline(size) if line else handle.read(size)
    except OSError as exc:
        raise HkvError(open_problem(path, what, exc)) from None


def read_text(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of file `path`, at most `max_bytes`; `what` names the input in the error
    (`trace`, `profile`)."""
    with opened(path, what) as handle:
        data = _read(handle, max_bytes + 1, path, what)
    if len(data) > max_bytes:
        raise HkvError(
            f"{what}: {path_shown(path)} is larger than {max_bytes // MIB:,} MiB, the most hkv "
            "reads for it; give the right file"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HkvError(
            f"{what}: {path_shown(path)} is not UTF-8 text (byte {exc.start:,}); give a text file"
        ) from None


def read_lines(
    path: str | os.PathLike[str],
    what: str,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_bytes: int = MAX_LINES_BYTES,
) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of UTF-8 file `path`, split at '\\n' only (a JSON
    string may hold U+2028 or U+0085), read a line at a time with the caps given."""
    total = 0
    with opened(path, what) as handle:
        for lineno in range(1, sys.maxsize):
            raw = _read(handle, max_line_bytes + 1, path, what, line=True)
            if not raw:
                return
            total += len(raw)
            if len(raw) > max_line_bytes:
                raise HkvError(
                    f"{what}: {path_shown(path)} line {lineno:,} is longer than "
                    f"{max_line_bytes // MIB:,} MiB, the most hkv reads for a line; is it the "
                    "right file?"
                )
            if total > max_bytes:
                raise HkvError(
                    f"{what}: {path_shown(path)} is larger than {max_bytes // MIB:,} MiB, the "
                    "most hkv reads; split it or give the right file"
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise HkvError(
                    f"{what}: {path_shown(path)} line {lineno:,} is not UTF-8 text; give a text "
                    "file"
                ) from None
            yield lineno, text


def json_or_text(text: str, where: str) -> Any:
    """A NAME=VALUE option's VALUE: a JSON value where it is one (a number, true, a list, a
    quoted string), else the text itself (`first=lru`); `where` names it in the error when it is
    nested too deep to read."""
    try:
        return json.loads(text)
    except RecursionError:
        raise HkvError(f"{where}: the value is nested too deep; give a simpler one") from None
    except ValueError:  # not JSON, or an integer longer than int() converts
        return text


def parse_json(text: str, where: str) -> Any:
    """`text` as JSON; `where` names it in the error (a file, or a file and line)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise HkvError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError:  # int() refuses more digits than sys.get_int_max_str_digits()
        raise HkvError(
            f"{where}: holds an integer of more than {sys.get_int_max_str_digits():,} digits; "
            "no number hkv reads is that long"
        ) from None
    except RecursionError:
        raise HkvError(f"{where}: JSON nested too deep") from None


def read_json(path: str | os.PathLike[str], what: str, *, kind: type = dict) -> Any:
    """The JSON document in file `path`, which must be a `kind` (an object by default)."""
    where = f"{what} {path_shown(path)}"
    data = parse_json(read_text(path, what), where)
    if not isinstance(data, kind):
        raise HkvError(f"{where}: holds a JSON {type(data).__name__}; expected a {kind.__name__}")
    return data


def read_yaml(path: str | os.PathLike[str], what: str) -> Any:
    """The YAML document in file `path` (safe loader; aliases refused)."""
    import yaml

    where = f"{what} {path_shown(path)}"

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise HkvError(f"{where}: YAML aliases (*name) are not accepted")
            return super().compose_node(parent, index)

    text = read_text(path, what)
    try:
        return yaml.load(text, Loader=NoAliases)
    except yaml.YAMLError as exc:
        raise HkvError(f"{where}: not valid YAML ({' '.join(str(exc).split())})") from None
    except ValueError:  # an integer longer than int() converts
        raise HkvError(f"{where}: holds a number hkv cannot read") from None
    except RecursionError:
        raise HkvError(f"{where}: YAML nested too deep") from None
