"""The block manager's argument checks: each names what was wrong in one `HkvError`, before
the call changes anything (`hkv.storage.manager`). Torch is read, never imported here.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable
from typing import Any

from hkv.errors import HkvError


def block_id(value: Any, action: str) -> int:
    """`value` as a block id: an integer (Python's or numpy's), never a float or a bool."""
    if isinstance(value, bool | float | str | bytes) or value is None:
        raise HkvError(f"{action}: block id {value!r}; expected an integer (a BlockId)")
    try:
        return operator.index(value)
    except TypeError:
        raise HkvError(f"{action}: block id {value!r}; expected an integer (a BlockId)") from None


def block_ids(values: Any, action: str) -> list[int]:
    """`values` (a list, tuple, set, range or other iterable of ids; not one id, nor a string)
    as block ids, in order, repeats kept."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise HkvError(f"{action}: got {values!r}; expected a list of block ids, e.g. [3, 5]")
    values = list(values)
    if set(map(type, values)) <= {int}:  # the usual case, checked at C speed
        return values
    return [block_id(value, action) for value in values]


def unpinnable(blocks: list[Any], own: set[int], action: str) -> None:
    """Each of `blocks` (repeats: one pin each) holds a pin its caller may release: not one
    that the pending access holds for it (`own`: the keys it pinned until it completes)."""
    by_key = {b.key: b for b in blocks}
    for key, count in Counter(b.key for b in blocks).items():
        if by_key[key].pins - (key in own) < count:
            held = " (the pending access holds it until complete_access)" if key in own else ""
            raise HkvError(f"{action}: block {key} is not pinned {count} time(s){held}")


def kv(value: Any, layout: Any, action: str) -> None:
    """`value` (None, or a block's values) as the layout stores them: a tensor of its shape
    and dtype (a cast would change what was given: float32 into bfloat16, say)."""
    if value is None:
        return
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if not hasattr(value, "copy_") or shape is None:
        raise HkvError(f"{action}: kv is a {type(value).__name__}; expected a torch.Tensor")
    if tuple(shape) != layout.shape:
        raise HkvError(f"{action}: kv shape {tuple(shape)}; expected {layout.shape}")
    if dtype != layout.torch_dtype:
        raise HkvError(
            f"{action}: kv dtype {dtype}; expected {layout.torch_dtype} (the layout's): "
            f"convert it first (kv.to({layout.torch_dtype}))"
        )


def placement(position: Any, tokens: Any, block_tokens: int) -> tuple[int, int]:
    """A new block's `position` (its first token, >= 0) and `tokens` (1 to `block_tokens`)."""
    checked = []
    for name, value, low, high in (
        ("position", position, 0, None),
        ("tokens", tokens, 1, block_tokens),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise HkvError(f"admit: {name} {value!r}; expected an integer")
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f">= {low}"
            raise HkvError(f"admit: {name} {value}; expected {bound}")
        checked.append(value)
    return checked[0], checked[1]
