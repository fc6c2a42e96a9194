"""Task errors on Dask workers reach the client without data in them, and distributed never logs them with the
task's arguments (``Compute Failed`` printed a store repr with its counts on the workers and on ``/info/logs``)."""

from __future__ import annotations

import pickle
import sys

import cloudpickle
import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.coordinator.requests import GramTimes
from dppca_dask.coordinator import Coordinator, PartitionData, PartitionSource
from dppca_dask.coordinator.guard import TaskFailure, guarded, unwrap
from dppca_dask.errors import InvalidInputError, TaskFailedError

SECRET = "49749"

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module


def _good(index: int) -> PartitionData:
    block = sp.csr_array(np.eye(3)[index : index + 1])
    return PartitionData(index, block, np.ones(1))


def _leaky(index: int) -> PartitionData:
    raise ValueError(f"row sum {SECRET} is odd")


def _package_error(index: int) -> PartitionData:
    raise InvalidInputError("row 2 has a NaN value; re-ingest", partition=index, row=2)


def _source(bad: object) -> PartitionSource:
    loaders = ((_good, (0,)), (bad, (1,)), (_good, (2,)))
    return PartitionSource(n_rows=3, n_cols=3, n_partitions=3, nbytes=72, loaders=loaders,  # type: ignore[arg-type]
                           description={"kind": "test"})


def _worker_logs(client: object) -> str:
    logs = client.get_worker_logs()  # type: ignore[attr-defined]
    return "\n".join(message for entries in logs.values() for _, message in entries)


@pytest.mark.parametrize("persist", [False, True])
def test_a_foreign_error_on_a_worker_is_withheld(local_client: object, persist: bool) -> None:
    request = GramTimes(np.ones(3), 1.0)
    with Coordinator(local_client, _source(_leaky), persist=persist) as coordinator:
        with pytest.raises(TaskFailedError) as caught:
            coordinator.execute(request)
        # the other partitions are fine: a source without the bad one computes
    err = caught.value
    assert SECRET not in str(err) and SECRET not in repr(err.args)
    assert err.error_type == "builtins.ValueError"
    assert "failed on a Dask worker with ValueError at test_cluster_task_errors.py:" in str(err)
    assert any("in _leaky" in frame for frame in err.frames)
    assert err.__cause__ is None and err.__context__ is None
    logs = _worker_logs(local_client)
    assert SECRET not in logs and "Compute Failed" not in logs


def test_a_package_error_keeps_its_class_message_and_location(local_client: object) -> None:
    with Coordinator(local_client, _source(_package_error), persist=False) as coordinator:
        with pytest.raises(InvalidInputError, match=r"^row 2 has a NaN value; re-ingest$") as caught:
            coordinator.execute(GramTimes(np.ones(3), 1.0))
    assert (caught.value.partition, caught.value.row) == (1, 2)
    assert caught.value.exit_code == 2


def test_a_source_without_failures_is_unchanged(local_client: object) -> None:
    with Coordinator(local_client, _source(_good), persist=False) as coordinator:
        result = coordinator.execute(GramTimes(np.ones(3), 1.0))
    np.testing.assert_allclose(result, [1.0, 1.0, 1.0])  # rows e0, e1, e2: sum of e_i e_i^T 1


def test_guarded_passes_failures_through_merges_and_pickles() -> None:
    failing = guarded(_leaky)
    failure = failing(1)
    assert isinstance(failure, TaskFailure) and failure.task == "leaky"
    merge = guarded(lambda *parts: sum(parts))
    assert merge(1, failure, 2) is failure  # the merge does not run
    assert merge(1, 2) == 3
    assert pickle.loads(pickle.dumps(failure)) == failure
    assert repr(failing) == "guarded(leaky)"
    assert guarded(failing) is failing
    again = cloudpickle.loads(cloudpickle.dumps(failing))(1)  # pickled by value, as for a worker
    # the same failure; the copy's code may carry another file name (cloudpickle >= 3.1 names it <dynamic-code>)
    assert (again.task, again.error_type, again.package_error) == (failure.task, failure.error_type, None)
    assert [f.split(":", 1)[1] for f in again.frames] == [f.split(":", 1)[1] for f in failure.frames]
    with pytest.raises(TaskFailedError):
        unwrap(failure)
    assert unwrap(5) == 5
