"""User-facing errors.

Every mistake a user can make (a bad flag, a bad config field, a malformed trace line) raises
`HkvError` or a subclass. The CLI prints its message to stderr and exits with status 2; notebooks
and scripts see an ordinary exception whose message says what was wrong, the value seen and what
to do instead. Bugs stay ordinary exceptions with tracebacks.
"""

from __future__ import annotations

import math
import os
from typing import Any


class HkvError(ValueError):
    """A user mistake: the message names the field or flag, the value seen and the accepted ones."""


class ConfigError(HkvError):
    """A `HybridKVCacheConfig` (or one of its parts) holds a value outside its accepted range."""


class FlagConflict(HkvError):
    """Two command-line flags contradict each other; the message names both."""

    def __init__(self, first: str, second: str, reason: str):
        self.flags = (first, second)
        self.reason = reason
        super().__init__(f"{first} conflicts with {second}: {reason}")


def is_number(value: Any) -> bool:
    """An int or a float, not a bool (`True` is no bandwidth, fraction or count of tokens)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def reject_unknown(
    where: str, given: Any, accepted: Any, *, error: type[HkvError] = HkvError
) -> None:
    """Raise `error` naming the keys of `given` that are not in `accepted` (in `given`'s order)
    and listing the accepted ones, where there is any: the one wording of every settings mapping
    hkv reads (a config file's, `plan`'s keywords, a generator's overrides, a vLLM tier's)."""
    accepted = list(accepted)
    unknown = [key for key in given if key not in accepted]
    if unknown:
        fields_ = ", ".join(shorten(repr(key)) for key in unknown)
        raise error(
            f"{where}: unknown field{'s' if len(unknown) > 1 else ''} {fields_}; accepted fields: "
            f"{', '.join(map(str, accepted))}"
        )


SHOWN_CHARS = 80
"""How many characters of a value an error message shows; longer ones are shortened."""

LINE_CHARS = 300
"""The longest error line the CLI prints."""


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text`, or its head and tail with the number of characters between, when it is longer
    than `limit` (a 100,000-character path typed by mistake should not fill the terminal)."""
    if len(text) <= limit:
        return text
    head = max(1, limit * 2 // 3)
    tail = max(1, limit - head - 20)
    return f"{text[:head]}...{text[-tail:]} ({len(text):,} characters)"


def shown(value: Any) -> str:
    """`value` as an error message shows it: its repr, a huge integer by its number of digits,
    a long string or path shortened (`shorten`)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**15:
        return f"an integer of {digits(value)} digits"
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    try:
        return shorten(repr(value))
    except (RecursionError, ValueError):  # nested past the recursion limit; an int too long
        return f"a {type(value).__name__} too deep or too long to show"


def digits(value: int) -> str:
    """How many decimal digits `value` has, without `str()` (which refuses more than 4,300)."""
    value = abs(value)
    count = int((value.bit_length() - 1) * math.log10(2)) + 1 if value else 1
    return f"{count + (value >= 10**count):,}"


def one_line(message: str, limit: int = LINE_CHARS) -> str:
    """`message` on one line for stderr: whitespace runs joined, each word longer than
    `SHOWN_CHARS` shortened, and the whole cut to `limit` characters."""
    words = [shorten(word) for word in message.split()]
    return shorten(" ".join(words), limit)
