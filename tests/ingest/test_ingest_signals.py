"""Interrupted ingests leave no raw data behind (issue 9, item 3), and later ingests clean up after killed ones.

Real ``dppca-dask ingest`` subprocesses are signalled while their temporary store (``.NAME.partial-*``) or spill
directory (``.NAME.spill-*``) exists; afterwards nothing of the ingest may remain beside the output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import InvalidParameterError
from dppca_dask.ingest import ingest, terminate_cleanly
from dppca_dask.storage._files import OWNER_FILE

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env["DASK_DPPCA_DASK__INGEST__IN_MEMORY_MAX_BYTES"] = "0"  # Matrix Market through the spilling parser
    return env


def write_svmlight_rows(path: Path, n_rows: int, rng: np.random.Generator) -> Path:
    cols = rng.integers(1, 500, size=(n_rows, 8))
    with open(path, "w") as handle:
        for r in range(n_rows):
            handle.write("1 " + " ".join(f"{c}:1.5" for c in np.unique(cols[r])) + "\n")
    return path


def write_mtx_shuffled(path: Path, n_entries: int, rng: np.random.Generator) -> Path:
    rows = rng.integers(1, 50_001, n_entries)
    cols = rng.integers(1, 401, n_entries)
    with open(path, "w") as handle:
        handle.write(f"%%MatrixMarket matrix coordinate real general\n50000 400 {n_entries}\n")
        np.savetxt(handle, np.column_stack([rows, cols, np.full(n_entries, 2.0)]), fmt="%d %d %.1f")
    return path


def leftovers(directory: Path, name: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(f".{name}.") or n == name)


#: ``dppca-dask`` with SIGINT as a terminal gives it (handled, not blocked), whatever this test process inherited: a
#: test process started in the background by a non-interactive shell has SIGINT ignored, and its children with it.
AS_FROM_A_TERMINAL = (
    "import signal, sys; "
    "signal.signal(signal.SIGINT, signal.default_int_handler); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
    "from dppca_dask.cli import main; sys.exit(main())"
)


def signal_during(argv: list[str], directory: Path, marker: str, signum: int) -> tuple[int, str]:
    process = subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL, *argv], env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if any(marker in n for n in os.listdir(directory)):
                time.sleep(0.2)  # let the writer get going
                break
            time.sleep(0.01)
        assert process.poll() is None, f"the ingest ended before it could be signalled: {process.stderr.read()}"
        process.send_signal(signum)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, err


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_while_writing_removes_the_partial_store(tmp_path: Path, rng: np.random.Generator,
                                                        signum: int, code: int) -> None:
    src = write_svmlight_rows(tmp_path / "big.svm", 60_000, rng)
    out = tmp_path / "out" / "s.zarr"
    out.parent.mkdir()
    returncode, err = signal_during(["ingest", str(src), "--out", str(out), "--n-features", "500",
                                     "--rows-per-partition", "200"], out.parent, ".partial-", signum)
    assert returncode == code, err
    assert "Traceback" not in err
    assert leftovers(out.parent, "s.zarr") == []


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_while_spilling_removes_the_spill_directory(tmp_path: Path, rng: np.random.Generator,
                                                           signum: int, code: int) -> None:
    src = write_mtx_shuffled(tmp_path / "big.mtx", 400_000, rng)
    out = tmp_path / "out" / "m.zarr"
    out.parent.mkdir()
    returncode, err = signal_during(["ingest", str(src), "--out", str(out), "--rows-per-partition", "500"],
                                    out.parent, ".spill-", signum)
    assert returncode == code, err
    assert "Traceback" not in err
    assert leftovers(out.parent, "m.zarr") == []


KILLED_WRITER = """
import os, signal, sys
import numpy as np, scipy.sparse as sp
from dppca_dask.ingest._common import spill_directory
from dppca_dask.storage import StoreWriter
out = sys.argv[1]
writer = StoreWriter(out, n_cols=4, rows_per_partition=2)
writer.append(sp.csr_array(np.ones((5, 4))))
context = spill_directory(out)
spill = context.__enter__()
print(writer._tmp, spill, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_later_ingest_removes_temporaries_of_a_killed_one(tmp_path: Path) -> None:
    out = tmp_path / "s.zarr"
    result = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(out)], env=_env(), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL
    partial, spill = result.stdout.split()
    assert os.path.isdir(partial) and os.path.isdir(spill)
    assert os.path.isfile(os.path.join(partial, OWNER_FILE))
    # Not ours: a directory without an owner marker, and one owned by a live process (this one), stay.
    foreign = tmp_path / ".s.zarr.partial-foreign"
    foreign.mkdir()
    (tmp_path / "keep.svm").write_text("1 1:1\n")
    ingest(tmp_path / "keep.svm", out)
    assert not os.path.exists(partial) and not os.path.exists(spill)
    assert foreign.is_dir()
    assert sorted(os.listdir(tmp_path)) == [".s.zarr.partial-foreign", "keep.svm", "s.zarr"]


# ------------------------------------------------------------------------------ the caller's SIGTERM handling
def _application_handler(signum: int, frame: object) -> None:  # pragma: no cover - never called
    raise AssertionError("not reached")


@pytest.mark.parametrize("before", [signal.SIG_DFL, signal.SIG_IGN, _application_handler],
                         ids=["default", "ignored", "application"])
def test_ingest_leaves_sigterm_handled_as_before(tmp_path: Path, before: object) -> None:
    # In a long-running process (a notebook, a server) an ingest, finished or failed, leaves SIGTERM as it was.
    previous = signal.signal(signal.SIGTERM, before)  # type: ignore[arg-type]
    try:
        ingest(sp.random(40, 6, density=0.3, format="csr", random_state=1), tmp_path / "a.zarr")
        assert signal.getsignal(signal.SIGTERM) is before
        with pytest.raises(InvalidParameterError, match="format must be one of"):
            ingest(tmp_path / "missing.svm", tmp_path / "b.zarr", format="nope")
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_while_ingesting_exits_143_and_then_sigterm_is_handled_as_before() -> None:
    with pytest.raises(SystemExit) as exited:
        with terminate_cleanly():
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)  # else this kills pytest
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # the handler raises here, in the main thread
    assert exited.value.code == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
