"""What both halves of `python -m bench.transfer` share: the block dims and the timer."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

MINIMAX = {"kv_heads": 8, "head_dim": 128}  # one layer of MiniMax-M2.5 (docs/design.md §3)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any]) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start
