"""Jobs: a TOML spec names the data, mechanism, privacy budget, ledger, output and cluster; ``run_job`` runs it.

See :mod:`dppca_dask.jobs.spec` for the file format and :mod:`dppca_dask.jobs.runner` for what a run does (and
why re-running a job id is safe). ``dppca-dask run JOB.toml`` is the command line. What a job released is read
back with :mod:`dppca_dask.jobs.outputs` (the table of releases, the latest result), from a directory or a bucket.
"""

from __future__ import annotations

from dppca_dask.jobs.outputs import latest_output, load_latest, load_output, read_releases
from dppca_dask.jobs.runner import run_job, today
from dppca_dask.jobs.steps import JobOutcome
from dppca_dask.jobs.spec import JobSpec, load_job, parse_job

__all__ = ["JobOutcome", "JobSpec", "latest_output", "load_job", "load_latest", "load_output", "parse_job",
           "read_releases", "run_job", "today"]
