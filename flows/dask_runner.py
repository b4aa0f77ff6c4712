"""The task runner the data flows use: an existing Dask cluster, or a local one."""
from __future__ import annotations

from prefect_dask import DaskTaskRunner


def dask_task_runner(address: str | None = None, n_workers: int = 2) -> DaskTaskRunner:
    if address:
        return DaskTaskRunner(address=address)
    # One thread per worker process: the stages are CPU-bound pure Python (GIL).
    return DaskTaskRunner(
        cluster_kwargs={"n_workers": n_workers, "threads_per_worker": 1, "processes": True}
    )
