"""hkv installed as a package (not run from this checkout) keeps what it needs at run time.

vLLM loads hkv's policies from wherever `pip` put hkv. The first `vllm serve` of an installed hkv
(on the H200) stopped at engine start: `auto` and `modality_aware` default to
MiniMax-M2.5's cost model, whose config then lived outside the package.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

PROBE = """
import json, importlib.metadata as md, hkv
from hkv.models.model_spec import shipped_models
from hkv.cost import CostModel
from hkv.policies import make_policy
eps = md.entry_points(group="vllm.general_plugins")
eps = sorted(e.name for e in eps if e.value.startswith("hkv."))
print(json.dumps({"file": hkv.__file__, "models": shipped_models(), "plugins": eps,
                  "cost_model": CostModel.default().spec.name,
                  "auto": type(make_policy("auto", 64)).__name__}))
"""


def checkout_copy(dest: Path) -> Path:
    """The checkout's files as a fresh clone would have them (tracked and new, none ignored):
    a build from ROOT itself would pick up whatever a stale `build/lib` still holds."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def test_an_installed_hkv_has_its_model_configs_and_vllm_entry_points(tmp_path):
    target = tmp_path / "site"
    source = checkout_copy(tmp_path / "src")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(target)}
    env.pop("HKV_MODELS_DIR", None)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(found["file"]).is_relative_to(target)  # the installed copy, not this checkout
    assert not (target / "bench").exists()  # benchmarks and their models stay in the checkout
    bench_only = {p.stem for p in (ROOT / "bench" / "sim").glob("*.py")} - {"__init__"}
    assert not [p for p in (target / "hkv").rglob("*.py") if p.stem in bench_only]
    assert found["models"] == ["deepseek-v3", "gpt-oss-120b", "minimax-m2.5"]
    assert found["cost_model"] == "minimax-m2.5" and found["auto"] == "AutoPolicy"
    assert found["plugins"] == ["hkv_minimax_router_fix", "hkv_policies"]
