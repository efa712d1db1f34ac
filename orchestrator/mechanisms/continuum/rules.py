"""Continuum's decisions, written once for the vLLM plugin (``continuum.py``) and the simulator (``sim/scheduler.py``).

Every function here takes the ``PinTable``, a request's job identity (``JobTurn``: the plugin's ``JobTag`` and
the simulator's ``SimRequest`` both are one) and plain numbers, and returns a decision (a priority, whether
to wait, which pin to give up); neither caller decides anything of Continuum's itself, they only translate
their requests and block pools into these values and carry out the answer. Like ``pins``, this module imports
nothing of vLLM, Ray, HTTP or subprocess (the package's ``__init__`` files are empty, so importing it pulls
in nothing heavy either), which is what lets the simulator run Continuum without vLLM installed.

The rules, in the order a turn meets them:

- Ordering (``waiting_priority``): with ``pinned_first``, a waiting turn of a pinned job sorts before every
  unpinned request, among pinned jobs by arrival index; everything else keeps the priority it came with.
- Admission reserve (``must_wait_for_reserve``): a new job's first turn waits while admitting it would leave
  fewer free blocks than the jobs in flight are expected to grow by.
- Pressure (``take_pressure_victim``): which pin gives way to a request that cannot get blocks.
- Release: a pin ends when the job's next turn is admitted (``take_for_next_turn``), when its TTL is over
  (``PinTable.take_expired``), under pressure, when it is replaced, at a reset, and in the simulator when the
  client aborts the job (``take_for_aborted_job``). A finished turn is pinned unless it was the job's last
  (``keeps_finished_blocks``).

A request without a ``job_id`` (its client sent no ``vllm_xargs``) is outside Continuum: never pinned, never
held back by the reserve, and under pressure it may take any pin. The reserve holds back only a request known
to be a job's first turn (``turn == 1``). The plugin used to hold back a tagged request without a ``turn`` as
well (``turn not in (None, 1)``) while the simulator did not (``turn != 1``); a missing turn means missing job
information, which exempts a request everywhere else, so the simulator's reading is the rule. Our client
always sends the turn and every simulated request has one, so no measured or simulated cell changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from orchestrator.mechanisms.continuum.config import AdmissionRelease
from orchestrator.mechanisms.continuum.pins import PINNED_PRIORITY_OFFSET, Pin, PinTable


class JobTurn(Protocol):
    """The job a request belongs to, as the client tags it (``vllm_xargs``); read-only here."""

    @property
    def job_id(self) -> str | None: ...  # None: a request from a client that sends no job information

    @property
    def job_index(self) -> int: ...  # the job's arrival index: lower is older

    @property
    def turn(self) -> int | None: ...  # 1 for the job's first turn; None when not sent

    @property
    def is_last(self) -> bool: ...  # the job's last turn (True when not sent: nothing follows to pin for)


def num_blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks that ``num_tokens`` tokens occupy (the last one may be partly filled)."""
    return -(-num_tokens // block_size)


def waiting_priority(pins: PinTable, job: JobTurn, priority: int) -> int:
    """The priority a job's turn waits at: a pinned job's turn first (``pinned_first``), else ``priority``.

    Call when the turn arrives: the pin it would jump the queue for exists then, and the waiting queue is
    ordered on insertion. Only has an effect under vLLM's priority scheduling.
    """
    if pins.config.pinned_first and job.job_id is not None and job.job_id in pins:
        return PINNED_PRIORITY_OFFSET + job.job_index
    return priority


def must_wait_for_reserve(
    pins: PinTable,
    job: JobTurn,
    *,
    num_computed_tokens: int,
    num_tokens: int,
    num_free_blocks: int,
    running_job_tokens: Iterable[int],
    block_size: int,
) -> bool:
    """Whether a waiting request must stay waiting so the jobs in flight keep room to grow.

    Only a new job's first turn waits (``turn == 1``, nothing computed, no pin of its job): admitting it must
    leave at least ``PinTable.reserved_blocks`` free, counting the pinned jobs and the running requests of
    jobs with turns still to come (``running_job_tokens``, their current sizes in tokens). A preempted first
    turn has computed nothing again, so it waits like a new one. ``running_job_tokens`` is read only when a
    first turn meets a learned reserve, so a lazy iterable costs nothing otherwise.

    With the reserve off or nothing learned yet (a reserve of 0), a first turn whose whole prompt (hits
    included) needs more blocks than are free still waits here, before any pin could give way to it: pins
    never give way to a new job's first turn, under any ``admission_release``. Both schedulers have always
    done so.
    """
    if job.job_id is None or job.turn != 1 or num_computed_tokens or job.job_id in pins:
        return False
    running_job_blocks = (num_blocks_for(tokens, block_size) for tokens in running_job_tokens)
    return num_free_blocks - num_blocks_for(num_tokens, block_size) < pins.reserved_blocks(running_job_blocks)


def take_pressure_victim(pins: PinTable, job: JobTurn, num_others_running: int) -> Pin | None:
    """Take out of ``pins`` the pin that gives way to a request of ``job`` that cannot get blocks, by the
    ``admission_release`` rule; None when the request must wait (or, if it runs, vLLM preempts as usual).

    ``younger``: the youngest job's pin among jobs younger than the requester (a request without a job may
    take any). ``always``: the youngest job's. Neither takes the requester's own pin. ``idle`` (the public
    prototype's rule): the most recently pinned, the requester's own included, and only when no other request
    runs (``num_others_running``); the requester then hits its blocks from the free queue. The caller frees
    the pin's blocks.
    """
    release = pins.config.admission_release
    if release is AdmissionRelease.IDLE:
        return pins.take_latest() if not num_others_running else None
    if job.job_id is None or release is AdmissionRelease.ALWAYS:
        return pins.take_victim(exclude_job_id=job.job_id)
    return pins.take_victim(exclude_job_id=job.job_id, younger_than=job.job_index)


def take_for_next_turn(pins: PinTable, job_id: str | None) -> Pin | None:
    """A turn of ``job_id`` was admitted: its pin ends. The caller must free the pin's blocks only after the
    new turn has taken its own references on the blocks it hit, so only the blocks it did not hit go back."""
    return pins.take(job_id) if job_id is not None else None


def take_for_aborted_job(pins: PinTable, job_id: str) -> Pin | None:
    """The client gave up on a turn of ``job_id``, and with it on the job: forget it and take its pin, which the
    caller frees.

    Only the simulator applies this. In the plugin vLLM finishes an aborted request like any other
    (``_free_request_blocks``), so a non-last aborted turn is pinned until its TTL; the simulator's cells
    were fingerprinted with the rule as it is, so the difference is kept and written down here.
    """
    pins.forget_job(job_id)
    return pins.take(job_id)


def keeps_finished_blocks(pins: PinTable, job: JobTurn, num_tokens: int, block_size: int) -> bool:
    """Whether a finished turn's blocks are pinned (the caller then calls ``PinTable.pin`` and frees what it
    returns) instead of freed.

    Every turn of a job but its last is pinned. The last one's size (``num_tokens``) teaches the reserve how
    large a finished job grows, and the job's tool gaps are forgotten.
    """
    if job.job_id is None:
        return False
    if job.is_last:
        pins.forget_job(job.job_id)
        pins.on_job_finished(num_blocks_for(num_tokens, block_size))
        return False
    return True
