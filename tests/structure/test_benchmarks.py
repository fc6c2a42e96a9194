"""The benchmark scripts run as their docstrings say (they are scripts, not timed tests: only that they start, and
that the utility benchmark's quick mode completes; ``bench_utility.py --quick`` once crashed in its Analyze Gauss
runs, which no test ran)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("bench_*.py"))


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCHMARKS.parent), *sys.path]),
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=BENCHMARKS, capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_there_are_benchmarks() -> None:
    assert {"bench_iteration.py", "bench_scale.py", "bench_utility.py"} <= set(SCRIPTS)


def test_each_benchmark_starts() -> None:
    """Each script's ``--help``, all in one process (their imports shared): a script that fails to import or to
    build its options fails here."""
    probe = (
        "import runpy, sys\n"
        "sys.path.insert(0, '.')\n"
        f"for script in {SCRIPTS!r}:\n"
        "    sys.argv = [script, '--help']\n"
        "    try:\n"
        "        runpy.run_path(script, run_name='__main__')\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code in (0, None), (script, exc.code)\n"
        "    else:\n"
        "        raise AssertionError(f'{script} --help did not exit')\n"
        "    print('started', script, flush=True)\n"
    )
    proc = _run("-c", probe, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("started ")] == SCRIPTS


@pytest.mark.parametrize("script", ["bench_utility.py", "bench_centred.py"])
def test_a_utility_benchmark_quick_mode_ends_with_its_ratio(script: str) -> None:
    if script == "bench_centred.py":
        pytest.importorskip("sklearn")  # its reference is scikit-learn's PCA
        if not (BENCHMARKS.parent.parent / "shared" / "data" / "w8a.svm").exists():
            pytest.skip("the w8a sample data is not beside the project")
    proc = _run(script, "--quick", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("ratio ") and float(last.split()[1]) > 0, last
