"""Seam arithmetic of overlapped inference, in control ticks (never wall time), shared by the robot
server (which rows of a new chunk are already in the past) and the actor (which rows of each chunk
ran, for the episode file and PPO).

A chunk computed from an observation taken at server tick ``t`` (``Observation.tick``) means its
row ``r`` for tick ``t + r``. It reaches the server some ticks later, preempts the running chunk at
the next tick ``n`` and starts there with row ``n - t``: the rows before were meant for ticks that
have run (under the previous chunk), and replaying them late would put the arm where the policy
wanted it ``n - t`` ticks ago.
"""

from __future__ import annotations


class SeamError(ValueError):
    """A chunk whose rows cannot start at the next tick."""


def rows_in_the_past(first_row_tick: int, next_tick: int, n_rows: int) -> int:
    """How many leading rows of an ``n_rows`` chunk whose row 0 is meant for ``first_row_tick`` are
    meant for ticks before ``next_tick`` (the tick it would start at). ``first_row_tick`` < 0:
    none (the chunk starts with row 0 whenever it arrives)."""
    if first_row_tick < 0:
        return 0
    if first_row_tick > next_tick:
        raise SeamError(
            f"first_row_tick {first_row_tick} is ahead of the server's next tick {next_tick}: set it "
            "from Observation.tick of the observation the chunk was computed from (an observation "
            "from an earlier run of the server?)"
        )
    skipped = next_tick - first_row_tick
    if skipped >= n_rows:
        raise SeamError(
            f"all {n_rows} rows are in the past: the chunk was computed from the state at tick "
            f"{first_row_tick} and would start at tick {next_tick}; compute it from a newer "
            "observation (inference slower than the chunk?)"
        )
    return skipped


def rows_run(rows_skipped: int, n_rows: int, start_tick: int, next_start_tick: int | None) -> tuple[int, int]:
    """``[first, end)`` of the rows of a chunk (indices into the rows as sent) that ran: from its
    first unskipped row until the next chunk's ``start_tick`` preempted it, or to its end when none
    did (``next_start_tick`` None, or at or past its end). A tick < 0 is unknown (a server that
    does not count ticks): all rows are taken to have run, as before ticks were counted."""
    end = n_rows
    if next_start_tick is not None and next_start_tick >= 0 and start_tick >= 0:
        end = min(n_rows, rows_skipped + max(0, next_start_tick - start_tick))
    return rows_skipped, end


def inference_lead_ticks(inference_s: float, control_rate_hz: float, margin_ticks: int) -> int:
    """Ticks before a chunk's end at which to take the observation for the next one, so that an
    inference as slow as ``inference_s`` is back before the arm runs out of rows."""
    whole = int(inference_s * control_rate_hz)
    if whole < inference_s * control_rate_hz:
        whole += 1  # ceil without float surprises at exact multiples
    return whole + max(0, margin_ticks)
