"""Saving a report's figures: one place for the file format and resolution."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

DPI = 150


def save_figure(figure: Any, path: str | os.PathLike[str]) -> Path:
    """Save `figure` (a matplotlib Figure or a seaborn grid) as a PNG at `path`, creating its
    folder; return the path. The notebook still shows the figure inline."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=DPI)
    return target
