"""benchmarks/prefect_api.py: one API for a benchmark and its Dask workers, stopped when it ends."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import httpx
import psutil
import pytest

spec = importlib.util.spec_from_file_location(
    "prefect_api", Path(__file__).resolve().parents[1] / "benchmarks" / "prefect_api.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)


def worker_api_url() -> str | None:
    return os.environ.get("PREFECT_API_URL")


@pytest.fixture
def no_api(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)


def test_a_temporary_api_reaches_the_dask_workers_and_is_stopped_after(no_api):
    from distributed import Client, LocalCluster

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    home = os.environ.get("PREFECT_HOME")
    with pytest.raises(RuntimeError, match="the benchmark failed"), mod.prefect_api() as url:
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        assert os.environ["PREFECT_API_URL"] == url
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            assert list(client.run(worker_api_url).values()) == [url]
        raise RuntimeError("the benchmark failed")
    assert "PREFECT_API_URL" not in os.environ and os.environ.get("PREFECT_HOME") == home
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=5)
    left = [p.cmdline() for p in psutil.Process().children(recursive=True)
            if p.pid not in before and p.is_running() and "resource_tracker" not in " ".join(p.cmdline())]
    assert not left, f"processes left running: {left}"  # the server's and the workers'


def test_a_named_api_is_used_as_it_is(monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with mod.prefect_api() as url:
        assert url == "http://127.0.0.1:1/api"
        assert {p.pid for p in psutil.Process().children(recursive=True)} == before  # no server started
    assert os.environ["PREFECT_API_URL"] == "http://127.0.0.1:1/api"
