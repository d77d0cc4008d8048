"""Sizes as people write them on a command line: "16GiB", "16GB", "16" (GiB, vLLM's unit)."""

from __future__ import annotations

import re

from hkv.errors import HkvError

GIB = 1 << 30
MAX_BYTES = float(1 << 60)  # an exbibyte: beyond any machine

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
    "K": 2**10,
    "M": 2**20,
    "G": 2**30,
    "T": 2**40,
}


def parse_size(text: str, *, flag: str) -> tuple[int, str | None]:
    """Bytes in `text` ("16GB", "16GiB", "16"); a bare number is GiB, vLLM's unit.

    Returns the bytes and, for decimal units, a note on how they were read.
    """
    match = _SIZE.match(str(text))
    if not match:
        raise HkvError(f"{flag}: cannot read size {text!r}; write e.g. 16GiB, 16GB or 16 (GiB)")
    number, unit = float(match.group(1)), (match.group(2) or "GiB").upper()
    if unit not in _UNITS:
        raise HkvError(f"{flag}: unknown unit in {text!r}; use B, KB, MB, GB, TB or KiB ... TiB")
    nbytes = number * _UNITS[unit]
    if not nbytes <= MAX_BYTES:  # also inf and nan
        raise HkvError(f"{flag}: {text!r} is more than any machine has (at most 1 EiB)")
    nbytes = int(nbytes)
    note = None
    if unit in ("KB", "MB", "GB", "TB"):
        note = (
            f"{flag} {text}: read as decimal units = {nbytes / GIB:.2f} GiB; "
            f"write {match.group(1)}GiB for binary gibibytes"
        )
    return nbytes, note
