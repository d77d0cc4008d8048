"""Execute the numbered notebooks with papermill, as CI and `make all` do.

    python notebooks/run_all.py                 # every notebook, CPU defaults
    python notebooks/run_all.py --only 02 03    # some of them
    python notebooks/run_all.py -p TRACE /path/to/trace.jsonl   # override a parameter
    python notebooks/run_all.py --html          # also render out/html/*.html

Executed copies go to out/notebooks/ (gitignored), each notebook's results JSON to out/results/.
Notebooks run with notebooks/ as their working directory, exactly as in JupyterLab. A parameter
given with -p is passed only to notebooks that declare it in their `parameters` cell.
papermill, nbformat and nbconvert are imported by the functions that use them.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
OUT = ROOT / "out"


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
            return {
                t.id
                for node in tree.body
                if isinstance(node, ast.Assign)
                for t in node.targets
                if isinstance(t, ast.Name)
            }
    return set()


def run_notebook(path: Path, parameters: dict[str, object] | None = None) -> Path:
    """Execute one notebook; returns the executed copy. Raises papermill's error on failure."""
    import papermill

    out_dir = OUT / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    (OUT / "results").mkdir(parents=True, exist_ok=True)
    declared = declared_parameters(path)
    given = {k: v for k, v in (parameters or {}).items() if k in declared}
    executed = out_dir / path.name
    papermill.execute_notebook(
        str(path),
        str(executed),
        parameters=given,
        cwd=str(path.resolve().parent),
        kernel_name="python3",
        progress_bar=False,
    )
    return executed


def render_html(executed: Path) -> Path:
    """Render an executed notebook to out/html/; returns the HTML file's path."""
    import nbconvert
    import nbformat

    html_dir = OUT / "html"
    html_dir.mkdir(parents=True, exist_ok=True)
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nbformat.read(executed, as_version=4))
    target = html_dir / executed.with_suffix(".html").name
    target.write_text(body)
    return target


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
    parser.add_argument("--html", action="store_true", help="render HTML into out/html")
    args = parser.parse_args(argv)
    params = {name: _parse_value(value) for name, value in args.p}
    selected = [nb for nb in numbered_notebooks() if not args.only or nb.name[:2] in set(args.only)]
    if not selected:
        sys.stderr.write(f"run_all: no notebook matches --only {' '.join(args.only or [])}\n")
        return 2
    summary = []
    for nb in selected:
        start = time.perf_counter()
        executed = run_notebook(nb, params)
        entry = {"notebook": nb.name, "seconds": round(time.perf_counter() - start, 1)}
        if args.html:
            entry["html"] = str(render_html(executed).relative_to(ROOT))
        summary.append(entry)
        print(f"{nb.name}: ok in {entry['seconds']} s", flush=True)
    (OUT / "notebooks" / "summary.json").write_text(json.dumps(summary, indent=2))
    return 0
