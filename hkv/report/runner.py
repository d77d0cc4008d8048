"""Execute the numbered notebooks with papermill, as CI and `make all` do.

    python notebooks/run_all.py                 # every notebook, CPU defaults
    python notebooks/run_all.py --only 02 03    # some of them
    python notebooks/run_all.py -p TRACE /path/to/trace.jsonl   # override a parameter

Executed copies go to out/notebooks/ (gitignored), their HTML to out/html/, each notebook's
results JSON to out/results/. Notebooks run with notebooks/ as their working directory, exactly
as in JupyterLab. A parameter given with -p is passed only to notebooks that declare it in its
`parameters` cell. papermill, nbformat and nbconvert are imported by the functions that use them.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
OUT = ROOT / "out"

# The kernel's environment: figures inline, and each source of noise turned down where it
# starts. The report keeps what a reader needs; none of these changes a number it shows.
KERNEL_ENV = {
    # matplotlib's inline backend: figures go into the notebook (and its HTML) as well as to
    # out/figures. A kernel that inherits MPLBACKEND=Agg draws them into nothing.
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    # vLLM logs errors only. Its warnings on the CPU build are advice for tuning a CPU server
    # (LD_PRELOAD tcmalloc / iomp, thread binding, no Triton CPU backend, eager mode chosen
    # on purpose); notebook 02 lists them where it starts the engine.
    "VLLM_LOGGING_LEVEL": "ERROR",
    # torch's C++ warnings: vLLM's CPU worker binds memory to NUMA node 0 and torch says so
    # ("NUMA binding: Using MEMBIND policy"), which on these machines changes nothing
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    # transformers' and huggingface_hub's progress bars ("Loading weights")
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    # tqdm.auto warns "IProgress not found" in any kernel without ipywidgets; no progress bar
    # is left for it to draw there
    "PYTHONWARNINGS": "ignore:IProgress not found",
}
# The kernel's sockets are CurveZMQ-encrypted (keys provisioned by the kernel manager; the
# kernelspec `make setup` installs declares curve support). Plain TCP would make ipykernel log
# "Kernel is running over TCP without encryption" at every start, and rightly so.
KERNEL_MANAGER_CONFIG = {"KernelManager": {"transport_encryption": "required"}}


@contextlib.contextmanager
def kernel_environment(env: Mapping[str, str] = KERNEL_ENV) -> Iterator[None]:
    """Set `env` in os.environ while a kernel starts (it inherits it), then restore it.
    PYTHONWARNINGS is added to, not replaced."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            current = os.environ.get(name) if name == "PYTHONWARNINGS" else None
            os.environ[name] = f"{current},{value}" if current else value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def numbered_notebooks(notebooks: Path = NOTEBOOKS) -> list[Path]:
    """The `NN_*.ipynb` notebooks in `notebooks`, in order."""
    return sorted(notebooks.glob("[0-9][0-9]_*.ipynb"))


def declared_parameters(path: Path) -> set[str]:
    """Names assigned in the notebook's cell tagged `parameters` (empty when it has none)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            tree = ast.parse(cell.source)
            targets = [
                t for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
            ]
            targets += [node.target for node in tree.body if isinstance(node, ast.AnnAssign)]
            names = set()
            for target in targets:  # `A, B = 1, 2` declares both (notebook 08's directories)
                parts = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
                names.update(t.id for t in parts if isinstance(t, ast.Name))
            return names
    return set()


INPUTS = ("hkv", "data")
"""What a notebook's outputs depend on besides the notebook itself (and the installed packages)."""


def inputs_digest(path: Path, root: Path = ROOT) -> str:
    """A digest of what executing notebook `path` with its default parameters reads: the
    notebook, every file under `INPUTS` of `root` and the packages' versions. Equal digests,
    equal inputs: the outputs of the last such run stand for a new one."""
    from hkv.versions import package_versions

    digest = hashlib.blake2b(path.read_bytes(), digest_size=16)
    digest.update(json.dumps(package_versions(), sort_keys=True).encode())
    for folder in INPUTS:
        for file in sorted((root / folder).rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def _stamp(path: Path, out: Path) -> Path:
    return out / "notebooks" / f"{path.stem}.inputs"


def fresh(path: Path, *, out: Path = OUT, root: Path = ROOT) -> bool:
    """Whether `out` holds a complete default-parameter run of `path` (the executed copy, its
    HTML and its results JSON) made from the inputs there are now (`inputs_digest`)."""
    stamp = _stamp(path, out)
    done = [stamp, out / "notebooks" / path.name, html_path(out / "notebooks" / path.name, out=out)]
    done.append(out / "results" / f"{path.stem}.json")
    if not all(p.is_file() for p in done):
        return False
    return stamp.read_text().strip() == inputs_digest(path, root)


def run_notebook(
    path: Path, parameters: dict[str, object] | None = None, *, out: Path = OUT
) -> Path:
    """Execute one notebook into `out`/notebooks and render it into `out`/html (`out` is the
    repository's out/ by default); returns the executed copy. Raises papermill's error on
    failure. A run with the default parameters leaves a stamp of its inputs (`fresh`)."""
    import papermill
    from traitlets.config import Config

    out_dir = out / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out / "results").mkdir(parents=True, exist_ok=True)
    declared = declared_parameters(path)
    given = {k: v for k, v in (parameters or {}).items() if k in declared}
    executed = out_dir / path.name
    _stamp(path, out).unlink(missing_ok=True)
    with kernel_environment():
        papermill.execute_notebook(
            str(path),
            str(executed),
            parameters=given,
            cwd=str(path.resolve().parent),
            kernel_name="python3",
            progress_bar=False,
            config=Config(KERNEL_MANAGER_CONFIG),
        )
    render_html(executed, out=out)
    if not given:
        _stamp(path, out).write_text(inputs_digest(path) + "\n")
    return executed


def render_html(executed: Path, *, out: Path = OUT) -> Path:
    """Render an executed notebook to out/html/; returns the HTML file's path."""
    import nbconvert
    import nbformat

    body, _ = nbconvert.HTMLExporter().from_notebook_node(nbformat.read(executed, as_version=4))
    target = html_path(executed, out=out)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(body)
    return target


def html_path(executed: Path, *, out: Path = OUT) -> Path:
    """Where `render_html` writes the HTML of an executed notebook."""
    return out / "html" / executed.with_suffix(".html").name


def _parse_value(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: list[str] | None = None) -> int:
    """The command line of `notebooks/run_all.py`; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="run_all.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--only", nargs="*", default=None, help="notebook number prefixes")
    parser.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    args = parser.parse_args(argv)
    params = {name: _parse_value(value) for name, value in args.p}
    selected = [nb for nb in numbered_notebooks() if not args.only or nb.name[:2] in set(args.only)]
    if not selected:
        sys.stderr.write(f"run_all: no notebook matches --only {' '.join(args.only or [])}\n")
        return 2
    summary = []
    for nb in selected:
        start = time.perf_counter()
        kept = not params and fresh(nb)  # `make test` (or `make all`) ran it on these inputs
        executed = OUT / "notebooks" / nb.name if kept else run_notebook(nb, params)
        entry = {
            "notebook": nb.name,
            "seconds": round(time.perf_counter() - start, 1),
            "html": str(html_path(executed).relative_to(ROOT)),
        }
        summary.append({**entry, "kept": kept})
        done = "unchanged inputs, its last run kept" if kept else f"ok in {entry['seconds']} s"
        print(f"{nb.name}: {done}", flush=True)
    (OUT / "notebooks" / "summary.json").write_text(json.dumps(summary, indent=2))
    return 0
