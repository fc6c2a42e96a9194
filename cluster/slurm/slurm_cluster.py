"""A Dask cluster on SLURM (dask-jobqueue) for dppca_dask jobs.

Run on a login node (or inside an allocation) of a SLURM cluster, with dppca_dask and ``dask-jobqueue>=0.8.3``
installed in an environment that the compute nodes see at the same path::

    python cluster/slurm/slurm_cluster.py --jobs 4 --cores 8 --memory 32GiB --walltime 02:00:00 \\
        --queue normal --account myproject -- dppca-dask run jobs/example.toml

The scheduler runs in this Python process; each SLURM job runs ``--processes`` Dask workers. Once ``--min-workers``
workers are connected, the command after ``--`` runs with ``DASK_SCHEDULER_ADDRESS`` (and, with ``--tls-dir``,
Dask's TLS settings) in its environment, and the cluster is released when it ends; its exit status is returned.
Without a command, the address is printed and written to ``--scheduler-file`` and the cluster stays up until
Ctrl-C. ``--print-job-script`` prints the batch script that would be submitted and submits nothing.

Worker jobs start ``python -m distributed.cli.dask_worker`` (a module of distributed, not the ``dask-worker``
console script that distributed 2026.x removed), with OMP/OpenBLAS/MKL limited to one thread per process: the
Dask worker threads are the parallelism, and oversubscribed BLAS threads slow the sparse kernels down.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "client_environment", "main", "make_cluster"]

#: Lines run in every worker job before the worker starts.
THREAD_LIMITS = (
    "export OMP_NUM_THREADS=1",
    "export OPENBLAS_NUM_THREADS=1",
    "export MKL_NUM_THREADS=1",
)
#: glibc's heap in every worker job, as the embedded cluster's workers have it (dppca_dask.cluster.worker-environ).
HEAP_SETTINGS = (
    "export MALLOC_MMAP_THRESHOLD_=33554432",
    "export MALLOC_TRIM_THRESHOLD_=67108864",
)
#: Dask settings in every worker job, as the embedded cluster has them (dppca_dask.cluster.dask-config): no statistical
#: profiler (its dashboard page shows which code paths a step took, which depend on the data), event-loop checks once
#: a second (the scheduler, which runs in this process, gets the latter in make_cluster).
DASK_SETTINGS = (
    "export DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False",
    "export DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL=1s",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="slurm_cluster.py",
        description="Start Dask workers as SLURM jobs (dask-jobqueue) and run a dppca_dask command against them.",
        epilog="Example: python cluster/slurm/slurm_cluster.py --jobs 4 --cores 8 --memory 32GiB "
        "-- dppca-dask run jobs/example.toml",
    )
    p.add_argument("--jobs", type=int, default=2, help="number of SLURM jobs (default 2)")
    p.add_argument("--cores", type=int, default=8, help="cores per job (default 8)")
    p.add_argument(
        "--processes", type=int, default=None,
        help="Dask worker processes per job (default: as many as --cores, one thread each)",
    )  # fmt: skip
    p.add_argument("--memory", default="32GiB", help="memory per job, shared by its worker processes (default 32GiB)")
    p.add_argument("--walltime", default="01:00:00", help="SLURM time limit per job (default 01:00:00)")
    p.add_argument("--queue", default=None, help="SLURM partition (-p)")
    p.add_argument("--account", default=None, help="SLURM account (-A)")
    p.add_argument("--interface", default=None, help="network interface of workers and scheduler, e.g. ib0")
    p.add_argument("--local-directory", default=None, help="fast node-local disk for spilling, e.g. $TMPDIR")
    p.add_argument("--log-directory", default=None, help="directory for the SLURM job logs")
    p.add_argument("--job-name", default="dppca-dask", help="SLURM job name (default dppca-dask)")
    p.add_argument(
        "--python", default=sys.executable,
        help="Python that runs the workers on the compute nodes (default: this Python, which must be at the same "
        "path there)",
    )  # fmt: skip
    p.add_argument(
        "--prologue", action="append", default=[], metavar="LINE",
        help="extra line run before the worker starts, e.g. 'module load python' or 'source venv/bin/activate'",
    )  # fmt: skip
    p.add_argument(
        "--sbatch", action="append", default=[], metavar="DIRECTIVE",
        help="extra #SBATCH directive, e.g. --sbatch=--constraint=haswell",
    )  # fmt: skip
    p.add_argument(
        "--tls-dir", default=None,
        help="TLS with ca.pem, node.pem, node-key.pem from this directory on the shared file system "
        "(make it with cluster/make-certs.sh DIR)",
    )  # fmt: skip
    p.add_argument(
        "--scheduler-port", type=int, default=0,
        help="scheduler port (default 0: a free one); fix it, e.g. 8786, to know the address before the start",
    )  # fmt: skip
    p.add_argument("--dashboard-address", default=":8787", help="scheduler dashboard (default :8787)")
    p.add_argument(
        "--min-workers", type=int, default=None,
        help="workers to wait for before running the command (default: all, --jobs x processes)",
    )  # fmt: skip
    p.add_argument("--wait", type=float, default=1800.0, help="seconds to wait for the workers (default 1800)")
    p.add_argument("--scheduler-file", default="scheduler.json", help="where to write the scheduler address")
    p.add_argument("--print-job-script", action="store_true", help="print the batch script and exit")
    p.add_argument("command", nargs=argparse.REMAINDER, help="command to run against the cluster, after --")
    return p


def _processes(args: argparse.Namespace) -> int:
    return args.processes if args.processes is not None else args.cores


def _security(args: argparse.Namespace) -> Any:
    if args.tls_dir is None:
        return None
    from distributed.security import Security

    tls_dir = Path(args.tls_dir).resolve()
    ca, cert, key = (tls_dir / name for name in ("ca.pem", "node.pem", "node-key.pem"))
    for path in (ca, cert, key):
        if not path.is_file():
            raise SystemExit(
                f"slurm_cluster.py: error: {path} is missing; make it with cluster/make-certs.sh {tls_dir}"
            )
    return Security(
        require_encryption=True,
        tls_ca_file=str(ca),
        tls_scheduler_cert=str(cert),
        tls_scheduler_key=str(key),
        tls_worker_cert=str(cert),
        tls_worker_key=str(key),
        tls_client_cert=str(cert),
        tls_client_key=str(key),
    )


def make_cluster(args: argparse.Namespace) -> Any:
    """A ``dask_jobqueue.SLURMCluster`` for ``args`` (no job is submitted until it is scaled)."""
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError as exc:
        raise SystemExit(
            "slurm_cluster.py: error: dask-jobqueue is not installed; pip install 'dask-jobqueue>=0.8.3'"
        ) from exc

    processes = _processes(args)
    if args.cores < 1 or processes < 1 or args.cores % processes:
        raise SystemExit(
            f"slurm_cluster.py: error: --cores ({args.cores}) must be a positive multiple of --processes ({processes})"
        )
    import dask

    scheduler_options: dict[str, Any] = {"port": args.scheduler_port, "dashboard_address": args.dashboard_address}
    # The scheduler runs in this process: its event-loop check once a second, as the workers' (DASK_SETTINGS)
    with dask.config.set({"distributed.admin.tick.interval": "1s"}):
        return SLURMCluster(
            cores=args.cores,
            processes=processes,
            memory=args.memory,
            walltime=args.walltime,
            queue=args.queue,
            account=args.account,
            interface=args.interface,
            local_directory=args.local_directory,
            log_directory=args.log_directory,
            job_name=args.job_name,
            python=args.python,
            job_extra_directives=list(args.sbatch),
            job_script_prologue=[*THREAD_LIMITS, *HEAP_SETTINGS, *DASK_SETTINGS, *args.prologue],
            # `python -m distributed.cli.dask_worker`: the module, which distributed keeps; the `dask-worker` script
            # is gone in distributed 2026.x. Equivalent to `dask worker`, and it accepts --nworkers and --nanny.
            worker_command="distributed.cli.dask_worker",
            # A worker that has lost the scheduler for this long exits, so no SLURM job idles on after a crash.
            death_timeout=120,
            security=_security(args),
            scheduler_options=scheduler_options,
        )


def client_environment(address: str, args: argparse.Namespace) -> dict[str, str]:
    """Environment for the command: the scheduler address and, with TLS, the client's TLS settings."""
    env = dict(os.environ)
    env["DASK_SCHEDULER_ADDRESS"] = address
    for line in THREAD_LIMITS:
        name, value = line.removeprefix("export ").split("=", 1)
        env.setdefault(name, value)
    if args.tls_dir is not None:
        tls_dir = Path(args.tls_dir).resolve()
        env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] = "True"
        env["DASK_DISTRIBUTED__COMM__TLS__CA_FILE"] = str(tls_dir / "ca.pem")
        env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"] = str(tls_dir / "node.pem")
        env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"] = str(tls_dir / "node-key.pem")
    return env


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]

    if args.print_job_script:
        with make_cluster(args) as cluster:
            print(cluster.job_script())
        return 0

    from distributed import Client

    n_workers = args.min_workers if args.min_workers is not None else args.jobs * _processes(args)
    with make_cluster(args) as cluster, Client(cluster) as client:
        address = cluster.scheduler_address
        Path(args.scheduler_file).write_text(json.dumps({"address": address}, indent=2) + "\n")
        print(f"scheduler {address}; submitting {args.jobs} SLURM job(s)", file=sys.stderr)
        cluster.scale(jobs=args.jobs)
        client.wait_for_workers(n_workers, timeout=args.wait)
        print(f"{len(client.nthreads())} workers connected", file=sys.stderr)
        if command:
            return subprocess.call(command, env=client_environment(address, args))
        print(address, flush=True)
        print("cluster up; Ctrl-C releases the SLURM jobs", file=sys.stderr)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
