"""The README's "Use" block, run as a reader would paste it: from an empty folder outside the
repository, each command through the installed `hkv` (every one must exit 0)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def use_commands() -> list[list[str]]:
    """The `hkv` commands of the README's first bash block under "## Use", comments cut and
    continued lines joined."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Use\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    joined = block.replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "hkv":
            commands.append(words)
    return commands


def test_the_use_block_holds_the_tour():
    verbs = [words[1] for words in use_commands()]
    assert verbs[:5] == ["plan", "plan", "flags", "workload", "simulate"]
    assert "--plot" in use_commands()[4]


@pytest.mark.parametrize("words", use_commands(), ids=lambda w: " ".join(w[:2]))
def test_each_use_command_runs_from_an_empty_folder(words, tmp_path_factory):
    folder = tmp_path_factory.getbasetemp() / "readme-use"  # shared: simulate reads the trace
    folder.mkdir(exist_ok=True)
    if words[1] == "simulate":
        pytest.importorskip("matplotlib")
        trace = next(w for w in use_commands() if w[1] == "workload")
        subprocess.run([sys.executable, "-m", "hkv", *trace[1:]], cwd=folder, check=True)
    done = subprocess.run(
        [sys.executable, "-m", "hkv", *words[1:]], cwd=folder, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if words[1] == "simulate":
        assert (folder / "out" / "policies.png").read_bytes().startswith(b"\x89PNG")
