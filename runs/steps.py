"""How a stage's steps run. A stage function (`pages_stage`, ...) names its tasks and where each
runs, through a `Steps`: `call` in the flow's process, `submit` one task on the task runner, `map`
a task over items on the task runner (Prefect's `Task.map` arguments: iterables are mapped,
`unmapped(x)` is given to every item); each returns once its tasks are done. `stage` marks where a
measured stage starts and `load` names the models the next tasks load (once per process).

`Steps()` runs them as the running flow's Prefect task runs (`stage` and `load` do nothing: the
tasks load their models on first use). benchmarks/stage_rates.py passes its own, which runs the
task bodies on Dask and measures each step: the flow and the benchmark run one wiring
(flows/build_corpus.py, `corpus_wiring`).
"""
from __future__ import annotations

from typing import Callable


class Steps:
    def call(self, task, *args):
        return task(*args)

    def submit(self, task, *args):
        return task.submit(*args).result()

    def map(self, task, *args) -> list:
        return task.map(*args).result()

    def stage(self, name: str) -> None:
        """The steps from here to the next `stage` are the stage `name` (benchmarks' unit of measure)."""

    def load(self, fn: Callable, *args, in_flow: bool = False) -> None:
        """`fn(*args)` loads the models the next tasks use, on the workers (and in the flow's process
        too, `in_flow`, where a task the flow calls directly loads them)."""


PREFECT = Steps()
