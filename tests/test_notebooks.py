"""Every notebook in notebooks/ runs top to bottom on a CPU, so none can rot.

Executed with nbclient on the ``python3`` kernel of this interpreter, from notebooks/ as a user
would open them.  The committed files carry no outputs (small diffs, nothing stale).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

try:
    import matplotlib  # noqa: F401 - notebook 3 plots with it
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
except ImportError as e:  # a missing test dependency is an error, not a skip
    raise ImportError(f"{e}: the notebook tests need the test extra: pip install -e '.[test]'") from e

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def test_the_three_notebooks_exist():
    assert [p.stem for p in PATHS] == ["01_quickstart", "02_plugins", "03_performance"]


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name}: strip the outputs before committing"


@pytest.fixture(scope="module")
def kernel_ok():
    """Skip (saying why) only when no python3 kernel can start here."""
    from jupyter_client.manager import start_new_kernel

    try:
        km, kc = start_new_kernel(kernel_name="python3", startup_timeout=60)
    except Exception as e:  # noqa: BLE001 - any failure to start means: cannot run notebooks here
        pytest.skip(f"no Jupyter python3 kernel can start here: {type(e).__name__}: {e}")
    kc.stop_channels()
    km.shutdown_kernel(now=True)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_runs(path, kernel_ok, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # what the notebooks write lands in the test's folder
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    t0 = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as e:
        pytest.fail(f"{path.name}: a cell failed:\n{e}", pytrace=False)
    with capsys.disabled():
        print(f"\n{path.name}: {time.perf_counter() - t0:.1f} s")
    text = "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "stream"
    )
    if path.stem == "02_plugins":
        assert "every creator matches its spec" in text or "skipped the library check" in text
        assert "TensorRT" in text  # the engine cell ran or said what it skipped
