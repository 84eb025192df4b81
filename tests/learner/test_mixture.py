import random

import pytest

from learner.mixture import AlphaSchedule, sample_prompt


def test_alpha_schedule_hand_computed():
    sched = AlphaSchedule()  # beta .3, c .5, alpha_min .05
    assert sched.alpha == pytest.approx(0.05)  # s_bar 0 -> floor
    assert sched.update(0.2) == pytest.approx(0.12)  # s_bar .06 -> .06/.5
    assert sched.ema_success == pytest.approx(0.06)
    assert sched.update(1.0) == pytest.approx((0.3 + 0.7 * 0.06) / 0.5)  # s_bar .342 -> .684
    sched.update(1.0)  # s_bar .5394 -> clipped to 1
    assert sched.alpha == 1.0
    sched2 = AlphaSchedule(ema_success=0.01)
    assert sched2.alpha == pytest.approx(0.05)  # .02 < alpha_min


def test_alpha_schedule_rejects_bad_values():
    with pytest.raises(ValueError, match="success rate"):
        AlphaSchedule().update(1.5)
    with pytest.raises(ValueError, match="beta"):
        AlphaSchedule(beta=0.0)


def test_sample_prompt_frequencies():
    rng = random.Random(0)
    pool = ["a", "b"]
    draws = [sample_prompt("canon", pool, 0.3, rng) for _ in range(20000)]
    assert draws.count("canon") / len(draws) == pytest.approx(0.3, abs=0.02)
    assert draws.count("a") / len(draws) == pytest.approx(0.35, abs=0.02)
    assert draws.count("b") / len(draws) == pytest.approx(0.35, abs=0.02)


def test_sample_prompt_edge_cases():
    rng = random.Random(0)
    assert {sample_prompt("canon", [], 0.05, rng) for _ in range(50)} == {"canon"}
    assert {sample_prompt("canon", ["x"], 1.0, rng) for _ in range(50)} == {"canon"}
    assert {sample_prompt("canon", ["x"], 0.0, rng) for _ in range(50)} == {"x"}
    with pytest.raises(ValueError, match="alpha"):
        sample_prompt("canon", ["x"], 1.2, rng)


def test_window_success_uses_only_the_last_episodes():
    from learner.mixture import window_success

    assert window_success([], 16) is None
    assert window_success([True], 16) == 1.0
    assert window_success([True] * 10 + [False] * 6, 4) == 0.0  # the last 4 only
    assert window_success([False, True, True, False], 10) == 0.5


def test_alpha_window_one_new_episode_moves_alpha_by_at_most_beta_over_window():
    # alpha_min .05 and batch 8: most batches hold no canonical episode, a few exactly one.
    history = [False] * 16  # 16 canonical failures so far: s_bar 0, alpha at the floor
    sched = AlphaSchedule(window=16)
    assert sched.update_from_window(history) == pytest.approx(0.05)
    history.append(True)  # one lucky canonical episode
    sched.update_from_window(history)
    assert sched.ema_success == pytest.approx(0.3 * (1 / 16))  # not 0.3 * 1.0, as per batch
    # a batch with no canonical episode still updates alpha from the window (it does not freeze)
    before = sched.ema_success
    sched.update_from_window(history)
    assert sched.ema_success > before
    # with no canonical evidence at all, alpha and the EMA stay where they started
    start = AlphaSchedule(ema_success=0.4, window=16)
    assert start.update_from_window([]) == pytest.approx(0.8) and start.ema_success == 0.4


def test_alpha_window_follows_a_sustained_change():
    sched = AlphaSchedule(window=8)
    history = [False] * 8
    for _ in range(20):  # the canonical prompt starts to work
        history += [True, True]
        sched.update_from_window(history)
    assert sched.ema_success == pytest.approx(1.0, abs=0.01) and sched.alpha == 1.0
    with pytest.raises(ValueError, match="window"):
        AlphaSchedule(window=0)
