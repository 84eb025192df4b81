"""Seam arithmetic of overlapped inference (pde_contract.seam), in ticks and rows."""

import pytest

from pde_contract.seam import SeamError, inference_lead_ticks, rows_in_the_past, rows_run


def test_rows_meant_for_ticks_that_ran_are_in_the_past():
    # computed from the state at tick 100; it reaches the server before tick 103: rows 0-2 were
    # meant for ticks 100-102, which ran under the previous chunk
    assert rows_in_the_past(first_row_tick=100, next_tick=103, n_rows=10) == 3
    assert rows_in_the_past(first_row_tick=100, next_tick=100, n_rows=10) == 0  # no tick ran meanwhile
    assert rows_in_the_past(first_row_tick=-1, next_tick=500, n_rows=10) == 0  # no tick given: row 0 first


def test_a_chunk_wholly_in_the_past_or_from_the_future_is_refused():
    with pytest.raises(SeamError, match="all 10 rows are in the past"):
        rows_in_the_past(first_row_tick=100, next_tick=110, n_rows=10)
    assert rows_in_the_past(first_row_tick=100, next_tick=109, n_rows=10) == 9  # its last row still runs
    with pytest.raises(SeamError, match="ahead of the server's next tick 100"):
        rows_in_the_past(first_row_tick=101, next_tick=100, n_rows=10)


def test_rows_run_end_where_the_next_chunk_takes_over():
    # rows 3.. started at tick 103; the next chunk took over at tick 108: rows 3-7 ran
    assert rows_run(rows_skipped=3, n_rows=10, start_tick=103, next_start_tick=108) == (3, 8)
    # the next chunk came after this one ended (the arm held meanwhile): all its rows ran
    assert rows_run(rows_skipped=3, n_rows=10, start_tick=103, next_start_tick=130) == (3, 10)
    assert rows_run(rows_skipped=0, n_rows=10, start_tick=50, next_start_tick=None) == (0, 10)
    # no tick known: taken to have run to its end
    assert rows_run(rows_skipped=0, n_rows=10, start_tick=-1, next_start_tick=-1) == (0, 10)
    # preempted at its first tick: none ran
    assert rows_run(rows_skipped=2, n_rows=10, start_tick=50, next_start_tick=50) == (2, 2)


@pytest.mark.parametrize(
    ("inference_s", "rate_hz", "margin", "lead"),
    [(0.15, 10.0, 1, 3), (0.1, 10.0, 1, 2), (0.0, 10.0, 1, 1), (0.15, 10.0, 0, 2), (0.021, 50.0, 2, 4)],
)
def test_the_observation_is_taken_as_many_ticks_before_the_seam_as_inference_takes(
    inference_s, rate_hz, margin, lead
):
    assert inference_lead_ticks(inference_s, rate_hz, margin) == lead
