"""User-facing errors.

Every mistake a user can make (a bad flag, a bad config field, a malformed trace line) raises
`HkvError` or a subclass. The CLI prints its message to stderr and exits with status 2; notebooks
and scripts see an ordinary exception whose message says what was wrong, the value seen and what
to do instead. Bugs stay ordinary exceptions with tracebacks.
"""

from __future__ import annotations

from typing import Any


class HkvError(ValueError):
    """A user mistake: the message names the field or flag, the value seen and the accepted ones."""


class ConfigError(HkvError):
    """A `HybridKVCacheConfig` (or one of its parts) holds a value outside its accepted range."""


class FlagConflict(HkvError):
    """Two command-line flags contradict each other; the message names both."""

    def __init__(self, first: str, second: str, reason: str):
        self.flags = (first, second)
        super().__init__(f"{first} conflicts with {second}: {reason}")


def shown(value: Any) -> str:
    """`value` as an error message shows it: its repr, a huge integer by its number of digits
    (a 10**400 typed by mistake should not fill the terminal)."""
    if isinstance(value, int) and abs(value) > 10**15:
        return f"an integer of {len(str(abs(value)))} digits"
    return repr(value)
