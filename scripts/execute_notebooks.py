"""Execute the notebooks in place, keeping their outputs, so they render where the repository is browsed.

Usage: ``python scripts/execute_notebooks.py [notebooks/NAME.ipynb ...]`` (default: every notebook; the quickstart
needs Spark and Java). CI executes them again (``tests/test_notebooks.py``) and fails if any cell fails.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def execute(path: Path) -> None:
    """Run every cell of ``path`` in a fresh kernel (working directory: a temporary folder) and save it with all
    its outputs, as a reader running it sees them (the notebooks keep the JVM's log lines out of them). Raises
    whatever cell failed (the file is then left unchanged)."""
    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory() as cwd:
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
    nbformat.write(nb, path)


if __name__ == "__main__":
    targets = [Path(p) for p in sys.argv[1:]] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for target in targets:
        print(f"executing {target}", file=sys.stderr)
        execute(target)
