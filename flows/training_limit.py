"""One training at a time on a Prefect server: the global concurrency limit `pearl-training`.

`train/pearl` and `train/pearl-gpu` are two deployments of the same flow, and a deployment's
`concurrency_limit` (prefect.yaml) counts the runs of that deployment only, so without this
limit both could train the same model version at once, on the same storage and device. The
`train` flow holds one slot of this limit around its training steps (the character encoder and
the phrase encoder), whichever deployment, or none, started it.

- The limit is a Prefect global concurrency limit with 1 slot. `scripts/deploy.sh` creates it
  (`flows.deploy`), and so does the first training that finds it missing (a run outside a
  deployment, the test harness's throwaway server, a server deployed by hand), so the slot is
  always taken strictly: a training never runs unlimited for want of the limit. An existing
  limit is left as it is: raise it (`prefect gcl update pearl-training --limit 2`) to let two
  trainings run at once, or disable it (`--disable`) to lift it.
- The slot is a lease of LEASE_SECONDS that Prefect renews in a thread every 3/4 of that time
  for as long as the training runs, so an hours-long training keeps it; a run that is killed
  (SIGKILL, lost machine) stops renewing, and the server frees its slot within LEASE_SECONDS.
- A failed renewal (the API unreachable for the three attempts Prefect makes) does not stop
  the training: hours of GPU work are not thrown away for an API outage. Prefect logs a
  warning in the run; the slot then expires, and a second training may start beside it.
- A training waits for the slot as long as the other one trains (no timeout), logging that it
  waits; `retrain`'s `train_timeout_hours` bounds the wait of a scheduled retrain.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

TRAINING_LIMIT = "pearl-training"
TRAINING_SLOTS = 1
LEASE_SECONDS = 600


def ensure_training_limit(client) -> bool:
    """Create the training limit on the server of ``client`` (a sync Prefect client) unless it
    exists; True when this call created it."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    try:
        client.read_global_concurrency_limit_by_name(TRAINING_LIMIT)
        return False
    except ObjectNotFound:
        pass
    try:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=TRAINING_LIMIT, limit=TRAINING_SLOTS))
    except ObjectAlreadyExists:  # another process created it first
        return False
    return True


def _logger() -> logging.Logger:
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:  # outside a flow or task run
        return logging.getLogger(__name__)


@contextmanager
def training_slot() -> Iterator[None]:
    """Hold the server's training slot for the duration of the block (waiting for it first)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import ConcurrencyLeaseHolder
    from prefect.concurrency.sync import concurrency
    from prefect.context import FlowRunContext

    with get_client(sync_client=True) as client:
        if ensure_training_limit(client):
            _logger().info(f"created the global concurrency limit {TRAINING_LIMIT!r} ({TRAINING_SLOTS} slot)")
    context = FlowRunContext.get()
    holder = (ConcurrencyLeaseHolder(type="flow_run", id=context.flow_run.id)
              if context and context.flow_run else None)
    _logger().info(f"taking a slot of {TRAINING_LIMIT!r}: one training at a time on this server, "
                   "so this run waits here while another one trains")
    started = time.monotonic()
    with concurrency(TRAINING_LIMIT, occupy=1, lease_duration=LEASE_SECONDS, strict=True,
                     raise_on_lease_renewal_failure=False, holder=holder):
        waited = time.monotonic() - started
        _logger().info(f"holding a slot of {TRAINING_LIMIT!r}"
                       + (f" after waiting {waited:.0f}s" if waited >= 1 else ""))
        yield
