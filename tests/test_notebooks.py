"""The notebooks run top to bottom with no error (their last cells check what they show), show nothing on stderr
(no JVM log lines), render to HTML with values for people, and the committed files carry their executed outputs so
they render where the repository is browsed. Each executed notebook is rendered to HTML and screenshotted with
headless Chromium into build/notebooks/ (NAME.html, NAME.png) for people to look at."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
RENDERED = ROOT / "build" / "notebooks"
SCREEN_HEIGHT = 20000


def run_notebook(name: str, tmp_path: Path) -> nbformat.NotebookNode:
    """Execute ``name`` as Jupyter does: the kernel forwards what its process writes to stderr (the JVM's lines
    too) into the notebook, which ipykernel skips under pytest unless PYTEST_CURRENT_TEST is hidden from it."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    hidden = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        client.execute()
    finally:
        if hidden is not None:
            os.environ["PYTEST_CURRENT_TEST"] = hidden
    return nb


def stderr_text(nb: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
                   if o.output_type == "stream" and o.name == "stderr")


def html_outputs(nb: nbformat.NotebookNode) -> str:
    return "\n".join(str(o["data"]["text/html"]) for c in nb.cells for o in c.get("outputs", [])
                     if "text/html" in o.get("data", {}))


def render(nb: nbformat.NotebookNode, name: str) -> tuple[str, Path]:
    """``nb`` as HTML (nbconvert) and a full-page PNG of it (headless Chromium), both written to build/notebooks/;
    returns the HTML and the PNG's path (cropped to the page's content)."""
    from nbconvert import HTMLExporter
    from PIL import Image

    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    assert chromium, "the notebook screenshots need Chromium: apt-get install chromium (as root, _setup.sh does)"
    RENDERED.mkdir(parents=True, exist_ok=True)
    page, png = RENDERED / f"{Path(name).stem}.html", RENDERED / f"{Path(name).stem}.png"
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    page.write_text(body, encoding="utf-8")
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size=1280,{SCREEN_HEIGHT}",
                        "--virtual-time-budget=5000", page.as_uri()], check=True, capture_output=True, timeout=180)
    with Image.open(png) as shot:
        box = Image.eval(shot.convert("L"), lambda v: 255 - v).getbbox()
        assert box is not None, f"{png} is blank"
        shot.crop((0, 0, shot.width, box[3] + 20)).save(png)
    return body, png


def check_rendering(nb: nbformat.NotebookNode, name: str, min_height: int) -> str:
    """Render ``nb`` and check what can be checked without eyes: no stderr box, no JVM log lines, values for
    people (no pandas timedelta text, one missing-value marker), a screenshot of the whole page."""
    assert stderr_text(nb) == "", f"{name} wrote to stderr:\n{stderr_text(nb)[:2000]}"
    body, png = render(nb, name)
    assert not re.search(r"\bWARN\b|log4j|NativeCodeLoader", body), f"JVM log lines in {name}"
    tables = html_outputs(nb)
    assert not re.search(r"\d+ days \d\d:\d\d:\d\d", tables), f"a pandas timedelta shown in {name}"
    for marker in (">NaN<", ">NaT<", "><NA><", ">None<", "&lt;NA&gt;"):
        assert marker not in tables, f"{marker} shown in {name}: one missing-value marker (-) only"
    from PIL import Image

    with Image.open(png) as shot:
        assert min_height < shot.height < SCREEN_HEIGHT - 20, f"{png}: {shot.height} px high, cut or empty"
    assert png.stat().st_size > 50_000
    return body


def outputs_text(nb: nbformat.NotebookNode) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts += [str(v) for v in out.get("data", {}).values()]
    return "\n".join(parts)


def images(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def test_explore_notebook_runs_and_shows_tables_and_plots(tmp_path: Path) -> None:
    nb = run_notebook("explore.ipynb", tmp_path)
    text = outputs_text(nb)
    assert "visible records:" in text and "aborted transactions: 6" in text
    assert "<h4>txnlog store" in text and "<h4>topic orders" in text and "KiB" in text
    assert "StoreView('file://" in text and "TransactionView('p." in text
    assert images(nb) == 3
    body = check_rendering(nb, "explore.ipynb", min_height=4000)
    assert "text-align: left" in body and "1m00s" in body  # text left-aligned; the hung transaction's timeout


@pytest.mark.parametrize("name", ["explore.ipynb", "quickstart.ipynb"])
def test_committed_notebooks_carry_their_outputs(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("execution_count") for c in code), "run scripts/execute_notebooks.py and commit"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "executed top to bottom, once"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert stderr_text(nb) == "", "a committed notebook shows no stderr (JVM log lines)"
    if name == "explore.ipynb":
        assert all(c.outputs for c in code[1:]), "every cell after the setup shows something"
        assert images(nb) == 3 and "visible records:" in outputs_text(nb)
    else:
        assert "quickstart ok" in outputs_text(nb)


@pytest.mark.spark
def test_quickstart_notebook_runs(tmp_path: Path) -> None:
    nb = run_notebook("quickstart.ipynb", tmp_path)
    assert "quickstart ok" in outputs_text(nb)
    check_rendering(nb, "quickstart.ipynb", min_height=2000)
