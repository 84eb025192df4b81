"""The mixture book: what the loop writes down about each task's α mixture and success curves.

Pure (no store, no torch): the loop reads the task row, the canonical prompt and its labelled
outcomes from the store, asks the book, and writes back what the book returns. The book keeps no
copy of α, the EMA or the iteration: the task row is their one home (it survives a kill -9, and
the supervisor writes the stage on it), and a label the page changes later must count in the next
window, which a cached outcome list would miss. learner/mixture.py holds the α maths the book
applies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from learner.mixture import AlphaSchedule, window_success
from pde_contract.run_metrics import TaskCurve, task_metric


@dataclass(frozen=True)
class Metric:
    """One point of a curve, as ``Store.add_metric(name, value, step)`` takes it."""

    name: str
    value: float
    step: int


@dataclass(frozen=True)
class AlphaStart:
    """A task's mixture as it enters RL: s_bar_0 and α to write on its row."""

    ema_success: float
    alpha: float
    start: float  # s_bar_0 as chosen (before the schedule's own checks)
    why: str  # where s_bar_0 came from, for the log
    metrics: tuple[Metric, ...]


@dataclass(frozen=True)
class AlphaUpdate:
    """A task's mixture after one PPO iteration: what to write on its row."""

    ema_success: float
    alpha: float
    iteration: int
    metrics: tuple[Metric, ...]


@dataclass(frozen=True)
class MixtureBook:
    schedule: Callable[[float], AlphaSchedule]
    """The α schedule with the run's β, c, α_min and window, its EMA at the given s_bar."""
    ema_start: float | None
    """s_bar_0 when set; else the canonical prompt's success over its bootstrap rollouts."""
    alpha_window: int
    """s_t(p_g) is taken over the canonical prompt's last this many labelled episodes."""
    curve_window: int
    """The ``<task>/canonical_success`` curve is over the canonical prompt's last this many."""

    def start(
        self, task: str, canonical_success_rate: float | None, canonical_episodes: int, step: int
    ) -> AlphaStart:
        """A task that has just entered RL (its row's EMA unset): s_bar_0 is ``ema_start`` if
        set, else the canonical prompt's success over its labelled (bootstrap) rollouts so far, so
        the first batch already mixes in pool prompts when the canonical prompt rarely succeeds."""
        if self.ema_start is not None:
            start, why = self.ema_start, "ema_start setting"
        else:
            start = canonical_success_rate or 0.0
            why = f"canonical success over its {canonical_episodes} bootstrap rollouts"
        schedule = self.schedule(start)
        return AlphaStart(
            schedule.ema_success,
            schedule.alpha,
            start,
            why,
            (Metric(task_metric(task, TaskCurve.EMA_START), start, step),),
        )

    def update(
        self,
        task: str,
        ema_success: float | None,
        iteration: int,
        canonical_outcomes: Sequence[bool],
        step: int,
    ) -> AlphaUpdate:
        """Once per PPO iteration: fold in the canonical prompt's success over its last
        ``alpha_window`` of ``canonical_outcomes`` (oldest first; learner/mixture.py says why a
        window and not the batch's canonical episodes). No canonical outcome at all: α stays."""
        outcomes = list(canonical_outcomes)[-self.alpha_window :]
        schedule = self.schedule(ema_success or 0.0)
        alpha = schedule.update_from_window(outcomes)
        metrics = [Metric(task_metric(task, TaskCurve.ALPHA_WINDOW_EPISODES), float(len(outcomes)), step)]
        rate = window_success(outcomes, self.alpha_window)
        if rate is not None:
            metrics.append(Metric(task_metric(task, TaskCurve.ALPHA_WINDOW_SUCCESS), rate, step))
        return AlphaUpdate(schedule.ema_success, alpha, iteration + 1, tuple(metrics))

    def curves(
        self, task: str, canonical_outcomes: Sequence[bool], alpha: float, pool_size: int, step: int
    ) -> list[Metric]:
        """After each label: the canonical prompt's success over its last ``curve_window``
        labelled episodes (none while it has none), α and the pool's size, at ``step`` labels."""
        points = []
        rate = window_success(canonical_outcomes, self.curve_window)
        if rate is not None:
            points.append(Metric(task_metric(task, TaskCurve.CANONICAL_SUCCESS), rate, step))
        points.append(Metric(task_metric(task, TaskCurve.ALPHA), alpha, step))
        points.append(Metric(task_metric(task, TaskCurve.POOL_SIZE), float(pool_size), step))
        return points
