"""The mixture book on its own: no store, no torch."""

from __future__ import annotations

import pytest

from learner.loop.mixture_book import Metric, MixtureBook
from learner.mixture import AlphaSchedule


def _book(ema_start: float | None = None, alpha_window: int = 4, curve_window: int = 3) -> MixtureBook:
    def schedule(ema_success: float) -> AlphaSchedule:
        return AlphaSchedule(beta=0.5, consolidation_target=0.5, alpha_min=0.1, ema_success=ema_success)

    return MixtureBook(schedule, ema_start, alpha_window, curve_window)


def test_a_task_entering_rl_starts_from_its_bootstrap_rate_or_the_setting() -> None:
    start = _book().start("t", canonical_success_rate=0.2, canonical_episodes=5, step=7)
    assert (start.start, start.ema_success, start.alpha) == (0.2, 0.2, pytest.approx(0.4))
    assert "5 bootstrap rollouts" in start.why
    assert start.metrics == (Metric("t/ema_start", 0.2, 7),)
    # no canonical episode yet: s_bar_0 = 0, alpha at its floor
    assert _book().start("t", None, 0, 0).alpha == 0.1
    explicit = _book(ema_start=1.0).start("t", canonical_success_rate=0.0, canonical_episodes=5, step=7)
    assert (explicit.ema_success, explicit.alpha, explicit.why) == (1.0, 1.0, "ema_start setting")


def test_an_update_folds_in_the_canonical_window_and_counts_the_iteration() -> None:
    # the last 4 of 6 outcomes: 1 success in 4; s_bar = .5 * .25 + .5 * 1
    update = _book().update("t", 1.0, 2, [True, True, False, True, False, False], step=9)
    assert update.ema_success == pytest.approx(0.625) and update.alpha == 1.0 and update.iteration == 3
    assert update.metrics == (
        Metric("t/alpha_window_episodes", 4.0, 9),
        Metric("t/alpha_window_success", 0.25, 9),
    )


def test_an_update_without_canonical_outcomes_keeps_alpha() -> None:
    update = _book().update("t", 0.1, 0, [], step=1)
    assert (update.ema_success, update.alpha, update.iteration) == (0.1, pytest.approx(0.2), 1)
    assert update.metrics == (Metric("t/alpha_window_episodes", 0.0, 1),)
    # an unstarted EMA (None) counts as 0
    assert _book().update("t", None, 0, [], step=1).alpha == 0.1


def test_the_curves_cover_the_last_window_and_skip_an_empty_one() -> None:
    points = _book().curves("t", [False, True, True, False], alpha=0.3, pool_size=2, step=4)
    assert points == [
        Metric("t/canonical_success", 2 / 3, 4),
        Metric("t/alpha", 0.3, 4),
        Metric("t/pool_size", 2.0, 4),
    ]
    assert [m.name for m in _book().curves("t", [], 1.0, 0, 0)] == ["t/alpha", "t/pool_size"]
