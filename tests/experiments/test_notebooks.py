"""The notebooks: committed without outputs, and executed (nbclient) on the quick results."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

#: The first test here sets up the session's quick run of every script (python -m
#: experiments --quick): about 2 minutes, 105 s on a quiet 2-core machine and more
#: when it is shared, past the suite's 120 s per test.
pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_notebooks_are_committed_without_outputs() -> None:
    assert {p.stem for p in NOTEBOOKS} == {"cost_analysis", "index_comparison", "elasticity"}
    for path in NOTEBOOKS:
        book = json.loads(path.read_text())
        for cell in book["cells"]:
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [], path.name
                assert cell["execution_count"] is None, path.name


@pytest.mark.slow
# The first of these pays for `quick_results` (every figure script, ~60 s quiet, 150 s on
# a loaded 2-core machine), and pytest-timeout counts fixture setup against the test.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_on_the_quick_results(
    quick_results: Path, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECACHE_RESULTS", str(quick_results))
    book = nbformat.read(path, as_version=4)
    client = NotebookClient(
        book,
        timeout=90,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    errors = [
        o for c in book.cells for o in c.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors
