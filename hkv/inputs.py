"""Reading what users hand hkv (JSON, YAML and text files) so that every mistake is an `HkvError`.

A file may be missing, a folder, unreadable, not UTF-8, not JSON, nested deeper than the parser
recurses, or of the wrong shape; each case gets one line naming the file and what to give
instead. YAML is read with the safe loader and without aliases, so an alias bomb is refused
before it expands.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hkv.errors import HkvError


def read_text(path: str | os.PathLike[str], what: str) -> str:
    """The UTF-8 text of file `path`; `what` names the input in the error (`trace`, `profile`)."""
    path = Path(path)
    if path.is_dir():
        raise HkvError(f"{what}: {str(path)!r} is a folder; give a file")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HkvError(f"{what}: no such file {str(path)!r}") from None
    except UnicodeDecodeError:
        raise HkvError(f"{what}: {str(path)!r} is not UTF-8 text") from None
    except OSError as exc:
        raise HkvError(f"{what}: cannot read {str(path)!r} ({exc.strerror})") from None


def parse_json(text: str, where: str) -> Any:
    """`text` as JSON; `where` names it in the error (a file, or a file and line)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise HkvError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise HkvError(f"{where}: JSON nested too deep") from None


def read_json(path: str | os.PathLike[str], what: str, *, kind: type = dict) -> Any:
    """The JSON document in file `path`, which must be a `kind` (an object by default)."""
    data = parse_json(read_text(path, what), f"{what} {path}")
    if not isinstance(data, kind):
        raise HkvError(
            f"{what} {path}: holds a JSON {type(data).__name__}; expected a {kind.__name__}"
        )
    return data


def read_yaml(path: str | os.PathLike[str], what: str) -> Any:
    """The YAML document in file `path` (safe loader; aliases refused)."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise HkvError(f"{what} {path}: YAML aliases (*name) are not accepted")
            return super().compose_node(parent, index)

    text = read_text(path, what)
    try:
        return yaml.load(text, Loader=NoAliases)
    except yaml.YAMLError as exc:
        raise HkvError(f"{what} {path}: not valid YAML ({' '.join(str(exc).split())})") from None
    except RecursionError:
        raise HkvError(f"{what} {path}: YAML nested too deep") from None
