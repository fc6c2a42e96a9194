"""An Airflow DAG that runs a dppca-dask job spec once a day, with catch-up (backfill) and the job's exit codes
mapped onto Airflow's task states.

Copy this file into the Airflow ``dags/`` folder, and set ``DPPCA_JOB`` (the job spec) and, if ``dppca-dask`` is
not on the workers' ``PATH``, ``DPPCA_DASK`` (the command). Each run is ``dppca-dask run SPEC --date {{ ds }}
--json``: the logical date of the DAG run is the job's date, so a catch-up (``airflow dags backfill``, or
``catchup=True`` after a pause) runs every missed day, in any order, and a retried task never releases twice (the
ledger's job id is ``<id>@<date>``: a completed date prints its saved result and spends nothing).

Exit codes (docs/guide/jobs-scheduling.md):

====  =====================================  ===========================================================
code  meaning                                Airflow state
====  =====================================  ===========================================================
0     released, or already released          success
2     invalid spec, input or date            failed, not retried (a retry cannot fix it)
3     privacy budget exhausted               skipped (nothing was read or spent; not an error to page on)
4     mechanism failure (public)             failed, not retried
5     Dask cluster lost during the run       failed, retried (a re-run resumes under the same job id)
1     unexpected error                       failed, retried
====  =====================================  ===========================================================

A window job for a day whose data has not arrived exits 2 (failed): give its sensor, or the task that writes the
day's extract, as an upstream task.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess

from airflow import DAG
from airflow.exceptions import AirflowException, AirflowFailException, AirflowSkipException
from airflow.operators.python import PythonOperator

JOB = os.environ.get("DPPCA_JOB", "/opt/dppca/jobs/window-nightly.toml")
COMMAND = os.environ.get("DPPCA_DASK", "dppca-dask")

#: What each exit code of ``dppca-dask run`` becomes: ``success``, ``skip``, ``fail`` (no retry) or ``retry``.
EXIT_CODES = {0: "success", 2: "fail", 3: "skip", 4: "fail", 5: "retry", 1: "retry"}


def classify(code: int) -> str:
    """The Airflow outcome of an exit code (an unknown code, a signal's negative one among them, is retried)."""
    return EXIT_CODES.get(code, "retry")


def run_job(ds: str, **_: object) -> dict:
    """Run the job for the DAG run's date; raise what makes Airflow skip, fail or retry the task."""
    proc = subprocess.run([COMMAND, "--log-format", "json", "run", JOB, "--date", ds, "--json"],
                          capture_output=True, text=True, check=False)
    print(proc.stderr, end="")  # the job's structured log lines, into the task log
    try:
        outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        outcome = {"exit_code": proc.returncode, "error": proc.stdout[-2000:]}
    what = classify(proc.returncode)
    if what == "skip":
        raise AirflowSkipException(f"privacy budget exhausted: {outcome.get('error')}")
    if what == "fail":
        raise AirflowFailException(f"dppca-dask run exited {proc.returncode}: {outcome.get('error')}")
    if what == "retry":
        raise AirflowException(f"dppca-dask run exited {proc.returncode}: {outcome.get('error')}")
    return outcome  # pushed to XCom: status, output, ledger figures


with DAG(
    dag_id="dppca_nightly",
    start_date=_dt.datetime(2026, 11, 1),
    schedule="@daily",
    catchup=True,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": _dt.timedelta(minutes=10)},
    tags=["dppca", "privacy"],
) as dag:
    PythonOperator(task_id="release", python_callable=run_job, op_kwargs={"ds": "{{ ds }}"})
