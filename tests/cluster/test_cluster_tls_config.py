"""``cluster/tls.yaml``: the Dask TLS configuration, loaded with ``dask.config`` and used by real TLS clients."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import dask.config
import pytest
import yaml
from _local_cluster import CLUSTER_DIR, LoopbackCluster

TLS_YAML = CLUSTER_DIR / "tls.yaml"
ROLES = ("scheduler", "worker", "client")


def _expanded(cert_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("DPPCA_TLS_DIR", str(cert_dir))
    (raw,) = dask.config.collect_yaml([str(TLS_YAML)])
    return dask.config.expand_environment_variables(raw)


def _dotted(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``: ``dask.config.set`` replaces whole subtrees given as nested dicts."""
    out: dict[str, Any] = {}
    for name, value in tree.items():
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(value, dict):
            out.update(_dotted(value, path))
        else:
            out[path] = value
    return out


def test_tls_yaml_has_the_required_keys() -> None:
    config = yaml.safe_load(TLS_YAML.read_text())
    comm = config["distributed"]["comm"]
    assert comm["require-encryption"] is True
    tls = comm["tls"]
    assert tls["ca-file"] == "${DPPCA_TLS_DIR}/ca.pem"
    for role in ROLES:
        assert tls[role] == {"cert": "${DPPCA_TLS_DIR}/node.pem", "key": "${DPPCA_TLS_DIR}/node-key.pem"}, role


def test_tls_yaml_keys_are_known_to_distributed() -> None:
    """Every key of tls.yaml exists in distributed's own defaults, so none is silently ignored."""
    import distributed  # noqa: F401  (loads distributed's defaults into dask.config)

    config = yaml.safe_load(TLS_YAML.read_text())
    for key in _dotted(config):
        assert dask.config.get(key, default="<missing>") != "<missing>", key


def test_make_certs_renders_tls_yaml_for_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    certs = tmp_path / "certs with space"
    made = subprocess.run(["bash", str(CLUSTER_DIR / "make-certs.sh"), str(certs)], capture_output=True, timeout=60)
    assert made.returncode == 0, made.stderr
    (rendered,) = dask.config.collect_yaml([str(certs / "dask-tls.yaml")])
    assert rendered == _expanded(certs.resolve(), monkeypatch)
    assert rendered["distributed"]["comm"]["tls"]["client"]["key"] == str(certs.resolve() / "node-key.pem")


@pytest.mark.slow
def test_tls_yaml_configures_a_real_tls_client(
    loopback_tls_cluster: LoopbackCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distributed import Client
    from distributed.security import Security

    assert loopback_tls_cluster.cert_dir is not None
    config = _expanded(loopback_tls_cluster.cert_dir, monkeypatch)
    with dask.config.set(_dotted(config)):
        security = Security()
        assert security.require_encryption is True
        assert security.tls_ca_file == str(loopback_tls_cluster.cert_dir / "ca.pem")
        assert security.tls_client_key == str(loopback_tls_cluster.cert_dir / "node-key.pem")
        with Client(loopback_tls_cluster.address, security=security, timeout="30s", set_as_default=False) as client:
            assert len(client.nthreads()) == 2
            assert client.submit(sum, [1, 2, 3]).result() == 6
        # require-encryption: a tcp:// address is refused by the client before any connection is made.
        port = loopback_tls_cluster.address.rsplit(":", 1)[1]
        with pytest.raises(RuntimeError, match="encryption required"):
            Client(f"tcp://127.0.0.1:{port}", security=security, timeout="5s", set_as_default=False)


@pytest.mark.slow
def test_rendered_tls_yaml_as_dask_config_file(loopback_tls_cluster: LoopbackCluster) -> None:
    """DASK_CONFIG=DIR/dask-tls.yaml and DASK_SCHEDULER_ADDRESS: Client() connects with no arguments."""
    assert loopback_tls_cluster.cert_dir is not None
    env = loopback_tls_cluster.client_env()
    for name in list(env):
        if name.startswith("DASK_DISTRIBUTED__COMM__"):
            del env[name]
    env["DASK_CONFIG"] = str(loopback_tls_cluster.cert_dir / "dask-tls.yaml")
    script = (
        "from distributed import Client\n"
        "with Client(timeout='30s') as c:\n"
        "    print(c.scheduler.address, len(c.nthreads()))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [loopback_tls_cluster.address, "2"]
