"""Progress where a run was started: lines on the run's log, which `prefect deployment run --watch`
prints as they come and the run's page shows.

`--watch` follows the run it started, not its subflows: a line logged in a subflow (build-corpus's
`corpus-stages`, link's `link-stages`) is sent to the parent flow run's log too. It prints logs only
from a server that streams them (PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED and
PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED, off by default; scripts/env.sh turns them on).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from runs.steps import Steps


def run_log() -> Callable[..., None]:
    """A function ``log(line, level=logging.INFO)`` that logs a line to the running flow's log and, in
    a subflow, to its parent flow run's log as well; outside a run, to Python's logging (a
    benchmark's plain call)."""
    from prefect.context import FlowRunContext
    from prefect.logging import get_run_logger
    from prefect.logging.loggers import flow_run_logger

    context = FlowRunContext.get()
    if context is None:
        logger = logging.getLogger("pearl.progress")
        return lambda line, level=logging.INFO: logger.log(level, line)
    own = get_run_logger()
    loggers = [own]
    if context.flow_run.parent_task_run_id is not None:
        from prefect.runtime import flow_run

        parent = flow_run.parent_flow_run_id
        if parent:
            loggers.append(flow_run_logger(flow_run_id=parent, flow_run_name=f"parent of {context.flow_run.name}"))

    def log(line: str, level: int = logging.INFO) -> None:
        for logger in loggers:
            logger.log(level, line)
    return log


class _ToRun(logging.Handler):
    def __init__(self, log: Callable[..., None]):
        super().__init__(logging.INFO)
        self.run_log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.run_log(record.getMessage(), record.levelno)
        except Exception:  # a log line never fails the stage
            self.handleError(record)


@contextmanager
def logs_in_run(*names: str) -> Iterator[None]:
    """While the block runs, the INFO-and-up lines of the Python loggers ``names`` (a stage's plain
    functions log there) go to the running flow's log as well (`run_log`), so the watch shows them.
    Prefect's PREFECT_LOGGING_EXTRA_LOGGERS would need the setting in every worker's environment,
    and it copies handlers, not levels: the root logger's WARNING still drops the INFO lines."""
    handler = _ToRun(run_log())
    loggers = [logging.getLogger(n) for n in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.removeHandler(handler)
            logger.setLevel(level)


def log_summary(title: str, lines: Iterable[str], log: Callable[[str], None] | None = None) -> None:
    """The end of a run in one log record: a title, then its lines indented (one record, so that the
    watch prints it together)."""
    (log or run_log())("\n  ".join([f"{title}:", *lines]))


def _datasets(result: Any, depth: int = 0) -> list:
    """The storage datasets in a step's result: the result, its items, a dataclass's fields."""
    from storage.datasets import Dataset

    if isinstance(result, Dataset):
        return [result]
    if depth > 1:
        return []
    if isinstance(result, (tuple, list)):
        items = result
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        items = [getattr(result, f.name) for f in dataclasses.fields(result)]
    else:
        return []
    return [d for item in items for d in _datasets(item, depth + 1)]


class LoggedSteps(Steps):
    """The flow's Prefect steps (`runs.steps.Steps`), each stage's start and end logged by ``log``
    (`run_log`): its time and the rows of the datasets its steps committed."""

    def __init__(self, log: Callable[[str], None]):
        self.log = log
        self.current: str | None = None
        self.started = 0.0
        self.seen: dict[str, Any] = {}

    def _seen(self, result):
        for d in _datasets(result):
            self.seen[f"{d.name}/{d.version}"] = d
        return result

    def call(self, task, *args):
        return self._seen(super().call(task, *args))

    def submit(self, task, *args):
        return self._seen(super().submit(task, *args))

    def map(self, task, *args) -> list:
        return self._seen(super().map(task, *args))

    def stage(self, name: str) -> None:
        self.end()
        self.current, self.started, self.seen = name, time.monotonic(), {}
        self.log(f"stage {name}: started")

    def end(self) -> None:
        """Log the open stage's end (the last stage ends when the wiring returns)."""
        if self.current is None:
            return
        rows = [f"{d.name} {d.manifest()['rows']:,} rows" for d in self.seen.values() if d.is_complete()]
        self.log(f"stage {self.current}: done in {time.monotonic() - self.started:.0f} s"
                 + (f" ({', '.join(rows)})" if rows else ""))
        self.current = None
