"""Dask's conventions in :func:`dppca_dask.coordinator.client.connect`: the active client first, an embedded
LocalCluster shaped by ``ClusterOptions`` / ``dask.config`` only as the fallback, its dashboard, and the advice for a
script without a ``__main__`` guard."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import dask.config
import pytest

from dppca_dask.coordinator.client import MAIN_GUARD_ADVICE, ClusterOptions, active_client, connect
from dppca_dask.errors import InvalidParameterError


def test_config_namespace_has_the_documented_defaults() -> None:
    assert dask.config.get("dppca_dask.cluster.threads-per-worker") == 1
    assert dask.config.get("dppca_dask.cluster.memory-limit") == "auto"
    assert dask.config.get("dppca_dask.cluster.dashboard-address") is None
    assert dask.config.get("dppca_dask.cluster.use-active-client") is True


def test_options_fall_back_to_config_then_cpu_count() -> None:
    from dask.system import CPU_COUNT

    assert ClusterOptions().resolved().n_workers == max(CPU_COUNT, 1)
    with dask.config.set({"dppca_dask.cluster.n-workers": 3, "dppca_dask.cluster.memory-limit": "1GiB"}):
        resolved = ClusterOptions(threads_per_worker=2).resolved()
    assert (resolved.n_workers, resolved.threads_per_worker, resolved.memory_limit) == (3, 2, "1GiB")
    assert ClusterOptions(n_workers=5).resolved().n_workers == 5


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_workers": 0}, "n_workers must be an integer >= 1; got 0"),
        ({"threads_per_worker": 1.5}, "threads_per_worker must be an integer >= 1; got 1.5"),
        ({"n_workers": True}, "n_workers must be an integer >= 1; got True"),
        ({"memory_limit": "lots"}, "memory_limit must be bytes .*got 'lots'"),
        ({"memory_limit": -1}, "memory_limit must be bytes .*got -1"),
        ({"dashboard_address": 8787}, "dashboard_address must be an address .*got 8787"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        ClusterOptions(**kwargs)  # type: ignore[arg-type]


def test_the_active_client_is_used(local_client: object) -> None:
    assert active_client() is local_client
    with connect(None) as client:
        assert client is local_client
    assert local_client.status == "running"  # type: ignore[attr-defined]  # left open: it is the user's


def test_the_active_client_can_be_ignored_by_config(local_client: object) -> None:
    with dask.config.set({"dppca_dask.cluster.use-active-client": False}), \
            connect(None, cluster=ClusterOptions(n_workers=1, memory_limit="1GiB")) as client:
        assert client is not local_client
        assert len(client.scheduler_info()["workers"]) == 1
        # No dashboard asked for: no HTTP server of the cluster still listens.
        ports = list(client.run(lambda dask_worker: dask_worker.http_server.port).values())
        ports.append(client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.http_server.port))
        for port in ports:
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_a_dashboard_is_served_and_its_link_printed(local_client: object, capsys: pytest.CaptureFixture[str]) -> None:
    import urllib.request

    with dask.config.set({"dppca_dask.cluster.use-active-client": False}), \
            connect(None, cluster=ClusterOptions(n_workers=1, dashboard_address="127.0.0.1:0")) as client:
        link = client.cluster.dashboard_link  # type: ignore[union-attr]
        with urllib.request.urlopen(link.replace("/status", "/health"), timeout=10) as answer:
            assert answer.status == 200
    assert f"Dask dashboard at {link}" in capsys.readouterr().err


def test_a_script_without_main_guard_gets_one_clear_error(tmp_path: Path) -> None:
    script = tmp_path / "analysis.py"
    script.write_text(textwrap.dedent("""
        from dppca_dask.coordinator.client import connect
        from dppca_dask.errors import InvalidParameterError
        try:
            with connect(None, n_workers=1):
                pass
        except InvalidParameterError as exc:
            print("ADVICE:", exc)
            raise SystemExit(2)
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "DASK_DPPCA_DASK__CLUSTER__USE_ACTIVE_CLIENT": "0",
           "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "spawn"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                         cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stdout.strip() == f"ADVICE: {MAIN_GUARD_ADVICE}"  # refused in this process: no worker re-ran it
    assert "Traceback" not in out.stderr


def test_a_guarded_script_is_not_refused(tmp_path: Path) -> None:
    script = tmp_path / "guarded.py"
    script.write_text(textwrap.dedent("""
        from dppca_dask.coordinator.client import _unguarded_main_call

        def run():
            return _unguarded_main_call()

        if "__main__" == __name__:
            print("GUARDED", run())
        print("TOP", run())
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.split() == ["GUARDED", "False", "TOP", "True"], out.stderr[-2000:]
    # multiprocessing never re-runs a __main__.py (python -m PACKAGE): not refused either.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__main__.py").write_text(script.read_text().replace('if "__main__" == __name__:', "if False:"))
    out = subprocess.run([sys.executable, "-m", "pkg"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})
    assert out.stdout.split() == ["TOP", "False"], out.stderr[-2000:]


@pytest.mark.parametrize(("given", "bound"), [(":8799", "127.0.0.1:8799"), ("8799", "127.0.0.1:8799"),
                                              ("localhost:0", "127.0.0.1:0"), ("127.0.0.1:8787", "127.0.0.1:8787"),
                                              ("[::1]:8787", "[::1]:8787"), ("tcp://:8787", "127.0.0.1:8787")])
def test_the_dashboard_binds_the_loopback_whatever_the_form(given: str, bound: str) -> None:
    assert ClusterOptions(dashboard_address=given).resolved().dashboard_address == bound
    with dask.config.set({"dppca_dask.cluster.dashboard-address": given}):
        assert ClusterOptions().resolved().dashboard_address == bound


@pytest.mark.parametrize("given", ["0.0.0.0:8799", "[::]:8799", "*:8799", "10.1.2.3:8787", "example.org:80",
                                   "127.0.0.1:http", ":70000"])
def test_a_wildcard_or_another_host_is_refused(given: str) -> None:
    with pytest.raises(InvalidParameterError, match="dashboard_address"):
        ClusterOptions(dashboard_address=given)
    with dask.config.set({"dppca_dask.cluster.dashboard-address": given}), \
            pytest.raises(InvalidParameterError, match="dashboard_address"):
        ClusterOptions().resolved()


def test_a_dashboard_given_by_port_only_listens_on_the_loopback(local_client: object,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``:PORT`` used to listen on every interface (0.0.0.0) while the printed link said 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with dask.config.set({"dppca_dask.cluster.use-active-client": False}), \
            connect(None, cluster=ClusterOptions(n_workers=1, dashboard_address=f":{port}")) as client:
        hosts = client.run_on_scheduler(
            lambda dask_scheduler: sorted({s.getsockname()[0] for s in dask_scheduler.http_server._sockets.values()}))
        link = client.cluster.dashboard_link  # type: ignore[union-attr]
    assert hosts == ["127.0.0.1"] and link.startswith(f"http://127.0.0.1:{port}/")
    assert f"Dask dashboard at {link}" in capsys.readouterr().err


def test_the_command_line_refuses_a_wildcard_dashboard(capsys: pytest.CaptureFixture[str]) -> None:
    from dppca_dask.cli import main

    assert main(["pca", "no-such-store.zarr", "--epsilon", "1", "--delta", "1e-6",
                 "--dashboard-address", "0.0.0.0:8799"]) == 2
    assert "wildcard" in capsys.readouterr().err
