"""The house rules that keep hkv navigable, checked on the source.

No module over 400 lines, no function over 60; no import cycle among hkv's modules, counting
imports inside functions; no code loaded by file path and no `sys.path` edits; the torch-free
wings import with torch, vLLM and transformers blocked; each part of hkv imports only its own
layer or lower ones (`LAYERS`); and the bench-only models stay out of the installed package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hkv"
CHECKED = [PACKAGE, ROOT / "bench"]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
TORCH_FREE_WINGS = ["models", "planning", "policies", "sim", "report", "cli"]
TORCH_FREE_MODULES = [
    "hkv",
    "hkv.cost",
    "hkv.calibrate",
    "hkv.inputs",
    "hkv.monitor",
    "hkv.versions",
    "hkv.storage.layout",
    "hkv.formats",
    "hkv.modalities",
    "hkv.storage.disk",
    "hkv.storage.table",
]


def python_files(*folders: Path) -> list[Path]:
    return sorted(p for folder in folders if folder.exists() for p in folder.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in python_files(*CHECKED)
        if (n := p.read_text().count("\n")) > MAX_MODULE_LINES
    }
    assert not long, long


def test_no_function_over_60_lines():
    long = {}
    for path in python_files(*CHECKED):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert not long, long


def runtime_nodes(tree: ast.AST):
    """Every node of `tree` but those under `if TYPE_CHECKING:` (annotations, never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *runtime_nodes(child)])
            continue
        yield node
        yield from runtime_nodes(node)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """hkv modules that `path` imports anywhere it runs (functions included)."""
    found = set()
    for node in runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in known)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in python_files(PACKAGE)}
    return {name: imported_modules(path, set(files)) - {name} for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle_even_inside_functions():
    graph = import_graph()
    # a package's __init__ re-exporting its modules is not a cycle with them
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("folder", ["hkv", "bench", "tests"])
def test_no_code_loaded_by_file_path_and_no_sys_path_edits(folder):
    banned = ("spec_from_file_location", "sys.path.", "runpy", "SourceFileLoader")
    offenders = [
        str(p.relative_to(ROOT))
        for p in python_files(ROOT / folder)
        if p != Path(__file__).resolve() and any(b in p.read_text() for b in banned)
    ]
    assert not offenders, offenders


def torch_free_modules() -> list[str]:
    """Every module of the torch-free wings, and the torch-free modules elsewhere."""
    wings = python_files(*(PACKAGE / wing for wing in TORCH_FREE_WINGS))
    return [*TORCH_FREE_MODULES, *(module_name(p) for p in wings if p.stem != "__main__")]


def test_torch_free_wings_import_without_torch_vllm_or_transformers():
    blocked = "import sys\nfor m in ('torch', 'vllm', 'transformers'):\n    sys.modules[m] = None\n"
    code = blocked + "".join(f"import {name}\n" for name in torch_free_modules())
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


LAYERS = [
    [
        "hkv.errors",
        "hkv.inputs",
        "hkv.outputs",
        "hkv.blocks",
        "hkv.formats",
        "hkv.modalities",
        "hkv.versions",
    ],
    ["hkv.models"],
    ["hkv.cost"],
    ["hkv.policies"],
    ["hkv.planning"],
    ["hkv.storage"],
    ["hkv.sim"],
    ["hkv.calibrate", "hkv.monitor", "hkv.tiny_model"],
    ["hkv.integrations", "hkv.report"],
    ["hkv.cli", "hkv.__main__", "hkv"],
]
"""hkv's parts from the bottom up: a part imports only parts of its own layer or below it
(imports inside functions included). Base types (errors, blocks, cold formats, what a model is)
sit under everything that reads them; the reports, integrations and the CLI sit on top."""


def part(module: str) -> str:
    """The part of hkv a module belongs to: `hkv.sim.replay` -> `hkv.sim`, `hkv.cost` itself."""
    return ".".join(module.split(".")[:2])


def upward_imports(graph: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    level = {name: i for i, names in enumerate(layers) for name in names}
    return [
        f"{source} -> {target}"
        for source, targets in sorted(graph.items())
        for target in sorted(targets)
        if level[part(target)] > level[part(source)]
    ]


def test_every_part_of_hkv_has_a_layer():
    parts = {part(name) for name in import_graph()}
    declared = {name for names in LAYERS for name in names}
    assert parts == declared, {"undeclared": parts - declared, "gone": declared - parts}


def test_each_part_imports_only_its_own_layer_or_lower():
    assert upward_imports(import_graph(), LAYERS) == []


def test_the_layer_check_finds_an_upward_import():
    graph = {"hkv.cost": {"hkv.planning.plan"}, "hkv.planning.plan": {"hkv.cost"}}
    layers = [["hkv.cost"], ["hkv.planning"]]
    assert upward_imports(graph, layers) == ["hkv.cost -> hkv.planning.plan"]


BENCH_ONLY = ROOT / "bench" / "sim"
"""Models only a benchmark runs, moved out of `hkv` so that an installed hkv carries none."""


def test_bench_only_modules_stay_out_of_hkv():
    moved = {p.stem for p in python_files(BENCH_ONLY)} - {"__init__"}
    assert moved, "bench/sim/ holds the bench-only models"
    back = sorted(str(p.relative_to(ROOT)) for p in python_files(PACKAGE) if p.stem in moved)
    assert not back, back


def test_hkv_never_imports_bench():
    offenders = []
    for path in python_files(PACKAGE):
        for node in runtime_nodes(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            offenders += [
                f"{module_name(path)} -> {n}" for n in names if n.split(".")[0] == "bench"
            ]
    assert not offenders, offenders


def test_the_package_discovery_ships_hkv_and_nothing_of_bench():
    from setuptools import find_packages

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = find_packages(str(ROOT), **found["packages"]["find"])
    assert "hkv" in packages and "hkv.models" in packages
    assert all(name == "hkv" or name.startswith("hkv.") for name in packages), packages
