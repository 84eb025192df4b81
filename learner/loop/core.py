"""EpisodeLoop: one episode after another, every step persisted in the store so that a restart
(even after kill -9) resumes where it stopped."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

from learner.loop.mixture_book import Metric, MixtureBook
from learner.loop.schedule import Plan, choose_next
from learner.loop.settings import LoopSettings
from learner.loop.training import BackgroundTrainer, episode_policy_version, staleness_stats
from learner.loop.updates import UpdateScheduler
from learner.rewards import reward_from_label
from pde_contract.episodes import EpisodeFile
from pde_contract.intents import AbortEpisode, IntentT, StartEpisode
from pde_contract.records import EpisodeStatus, LabelSource, PromptSource, PromptStatus, Stage
from pde_contract.run_metrics import (
    RunEpisode,
    TaskCurve,
    prompt_success_metric,
    source_success_metric,
    task_metric,
)
from pde_contract.service_state import LastStart, LoopPhase, LoopState
from pde_storage import CANONICAL_SUCCESS_WINDOW, EpisodeRow, IntentRow
from pde_storage.heartbeat import Heartbeat
from pde_storage.protocols import LoopStore
from pde_storage.service_states import run_control, write_state

log = logging.getLogger(__name__)

SERVICE_NAME = "loop"
# A wait's pause between looks doubles from poll_period_s up to this many times it (10 ms -> 100 ms
# by default): a long wait (Start, a label, the supervisor) reads ten times a second, not a
# hundred, and a click is still seen within 0.1 s. stop() (SIGTERM) ends the pause at once.
POLL_BACKOFF_FACTOR = 10


# an episode awaiting its label is done with once labelled, or aborted or discarded on the page
_ENDED = (EpisodeStatus.LABELLED, EpisodeStatus.ABORTED, EpisodeStatus.DISCARDED)


def next_poll_period_s(period_s: float, first_s: float) -> float:
    """The pause after one of ``period_s``, in a wait that started with ``first_s``."""
    return min(2.0 * period_s, POLL_BACKOFF_FACTOR * first_s)


class RobotLike(Protocol):
    def reset(
        self, task: str = "", seed: int | None = None, *, reset_joints_rad: tuple[float, ...] | None = None
    ) -> int | None: ...
    def stop(self) -> int | None: ...


class ActorLike(Protocol):
    def run_episode(
        self,
        *,
        episode_id: str,
        task: str,
        canonical_prompt: str,
        rollout_prompt: str,
        max_chunks: int,
        should_stop: Callable[[], bool] = ...,
        seed: int | None = None,
        practice: bool = ...,
    ) -> EpisodeFile: ...
    def set_policy(self, policy: Any) -> None: ...


class RunLogLike(Protocol):
    """Where a run's curves and episodes go besides the store (learner/run_log.py: TensorBoard)."""

    def scalar(self, name: str, value: float, step: int) -> None: ...
    def episode(self, record: RunEpisode) -> None: ...


def relabelled(episode: EpisodeFile, prompt: str) -> EpisodeFile:
    """``episode`` as if rolled out under ``prompt``: its behaviour log-probs are dropped, so PPO
    re-evaluates them under ``prompt`` at the update's start (learner.trainer)."""
    chunks = [
        msgspec.structs.replace(c, trace=msgspec.structs.replace(c.trace, log_prob_elements=None))
        if c.trace is not None
        else c
        for c in episode.chunks
    ]
    return msgspec.structs.replace(episode, rollout_prompt=prompt, chunks=chunks)


class LoopStopped(Exception):
    """The loop was asked to stop while it waited."""


def interrupted_reason() -> str:
    return (
        "interrupted: the loop process stopped mid-episode (killed or crashed); "
        f"found running at restart {datetime.now(UTC).isoformat(timespec='seconds')}"
    )


class EpisodeLoop:
    def __init__(
        self,
        store: LoopStore,
        robot: RobotLike,
        actor: ActorLike,
        settings: LoopSettings,
        trainer: BackgroundTrainer | None = None,
        policy_version: int = 0,
        trained_through_episode_id: int = 0,
        warm_up: Callable[[Plan], None] | None = None,
        run_log: RunLogLike | None = None,
    ) -> None:
        self.store = store
        self.run_log = run_log
        self.robot = robot
        self.actor = actor
        self.settings = settings
        self.trainer = trainer
        self.updates = UpdateScheduler(
            settings.batch_size, settings.tasks, policy_version, trained_through_episode_id
        )
        # Runs while the operator resets the scene (prompt embedding, first inference), so the
        # first chunk after "start" does not pay for cold caches.
        self.warm_up = warm_up
        self.rng = random.Random(settings.seed)
        self.book = MixtureBook(
            settings.alpha_schedule, settings.ema_start, settings.alpha_window, CANONICAL_SUCCESS_WINDOW
        )
        self.stop_event = threading.Event()
        self.episodes_run = 0
        self._state: LoopState | None = None
        self._state_lock = threading.Lock()
        # Shown on the page until fixed: a robot error until the robot resets again, a failed PPO
        # update until an update succeeds.
        self.robot_error = ""
        self.training_error = ""
        # What the loop did with the last Start from the page; published with every state, so the
        # page reports the truth.
        self.last_start: LastStart | None = None
        self._scene_seed = 0
        self._scene_uses = 0  # episodes run on _scene_seed so far (settings.rollouts_per_scene)
        self.practice_runs = 0  # practice episodes run (never stored, not in episodes_run)

    @property
    def policy_version(self) -> int:
        """The version of the weights the actor runs."""
        return self.updates.policy_version

    @property
    def last_error(self) -> str:
        return " · ".join(e for e in (self.robot_error, self.training_error) if e)

    # --- state for the page -------------------------------------------------------------------

    def _publish(
        self,
        phase: LoopPhase,
        plan: Plan | None = None,
        *,
        detail: str | None = None,
        episode_id: int | None = None,
        started_at_s: float | None = None,
    ) -> None:
        """Publish ``phase`` (with the episode in hand, ``plan``, from resetting on)."""
        state = LoopState(
            phase=phase,
            pid=os.getpid(),
            policy_version=self.policy_version,
            training=bool(self.trainer and self.trainer.busy),
            auto_start=self.settings.auto_start,
            auto_label=self.settings.auto_label,
            last_error=self.last_error,
            last_start=self.last_start,
            batch_size=self.settings.batch_size,
            labels_until_update=self.updates.labels_until_update if self.trainer is not None else None,
            detail=detail,
            episode_id=episode_id,
            started_at_s=started_at_s,
        )
        if plan is not None:
            state = plan.shown_in(state)
        with self._state_lock:  # never let a heartbeat write an older phase after this one
            self._state = state
            write_state(self.store, SERVICE_NAME, state)

    def _beat(self) -> None:
        """Keeps the state row fresh while an episode, a reset or a video encode takes long (the
        page and `pde health learner` call a silent loop dead)."""
        with self._state_lock:
            if self._state is None:
                return
            training = bool(self.trainer and self.trainer.busy)
            write_state(self.store, SERVICE_NAME, msgspec.structs.replace(self._state, training=training))

    def _wait(self, what: Callable[[], Any]) -> Any:
        """Poll ``what`` until it returns something truthy, backing off (``POLL_BACKOFF_FACTOR``);
        raises LoopStopped on stop(), which also cuts a pause short."""
        period_s = self.settings.poll_period_s
        while True:
            got = what()
            if got:
                return got
            if self.stop_event.is_set():
                raise LoopStopped()
            self._swap_weights()
            self.stop_event.wait(period_s)
            period_s = next_poll_period_s(period_s, self.settings.poll_period_s)

    # --- start-up -------------------------------------------------------------------------------

    def recover(self) -> None:
        """Make the stored state consistent after a restart: create the tasks and write this
        loop's N on them (the supervisor judges candidates by it), mark episodes left running by a
        dead process aborted, drop start clicks meant for that process."""
        for task in self.settings.tasks:
            self.store.ensure_task(task, self.settings.catalogue.get(task).prompt)
            self.store.set_task_state(task, rollouts_per_prompt=self.settings.rollouts_per_prompt)
            if not self.settings.prompt_search and self.store.task_state(task).stage == Stage.BOOTSTRAP:
                log.info("task %s: no prompt search (prompt_search off): RL on the canonical prompt", task)
                self.store.set_task_state(task, stage=Stage.RL)
        aborted = self.store.abort_running_episodes(interrupted_reason())
        if aborted:
            log.warning("marked interrupted episode(s) %s aborted", aborted)
        self.store.discard_intents(StartEpisode)
        self.store.discard_intents(AbortEpisode)

    # --- one episode ----------------------------------------------------------------------------

    def run(self) -> int:
        """Episodes until stop() or settings.max_episodes; returns how many ran."""
        self.recover()
        self._publish(LoopPhase.STARTING)
        beat = Heartbeat("loop heartbeat", self.settings.heartbeat_period_s, self._beat, join_timeout_s=5.0)
        beat.start()
        try:
            self._finish_pending_labels()
            while not self.stop_event.is_set():
                if self.settings.max_episodes is not None and self.episodes_run >= self.settings.max_episodes:
                    break
                self.step()
        except LoopStopped:
            pass
        finally:
            beat.stop()
            self._publish(LoopPhase.STOPPED)
        return self.episodes_run

    def stop(self) -> None:
        self.stop_event.set()

    def finish_training(self, timeout_s: float | None = None) -> None:
        """On a clean stop: let a running PPO update end and register its checkpoint."""
        if self.trainer is not None:
            self.trainer.join(timeout_s)
            self._swap_weights()

    def _paused(self) -> bool:
        control = run_control(self.store)
        return control.paused and not control.practice  # practice runs episodes (recording none)

    def _practice(self) -> bool:
        return run_control(self.store).practice

    def step(self) -> EpisodeRow | None:
        if self._paused():
            self._publish(LoopPhase.PAUSED, detail="paused on the page: resume there to go on")
            self._wait(lambda: not self._paused())
        if self._practice():
            self._practice_episode()
            return None
        self._swap_weights()
        plan = self._choose()
        if plan is None:
            self._publish(
                LoopPhase.WAITING_FOR_SUPERVISOR, detail="every task waits for the supervisor's candidates"
            )
            # Polled with a throwaway generator: the episodes' draws must not depend on how often
            # the loop looked while it waited (the run would not be reproducible from its seed).
            self._wait(
                lambda: (
                    choose_next(
                        self.store, self.settings.tasks, self.settings.rollouts_per_prompt, random.Random(0)
                    )
                    is not None
                )
            )
            return None
        plan = plan.with_seed(self._next_scene_seed())
        self._publish(LoopPhase.RESETTING, plan)
        pose = self.settings.catalogue.get(plan.task).reset_joints_rad  # None: the robot's home
        try:
            self.robot.reset(plan.task, plan.seed, reset_joints_rad=pose)
        except Exception as e:  # e-stop latched, server down: show it and retry later
            self._robot_error(f"reset failed: {e}", plan)
            return None
        self.robot_error = ""  # the robot works again (the episode's abort reason stays in its row)
        if self.warm_up is not None:
            try:
                self.warm_up(plan)
            except Exception as e:  # only a speed-up: the episode itself will report real errors
                log.warning("warm-up before the episode failed: %s", e)
        start_intent_id = None
        if not self.settings.auto_start:
            start_intent_id = self._take_start(plan)
            if start_intent_id is None:
                return None
        return self._run_episode(plan, start_intent_id)

    def _take_start(self, plan: Plan) -> int | None:
        """Waits for the operator's Start; its intent's id, or None when the scene must be reset
        again: the Start was refused (the reason published), or the page's practice switch no longer
        says ``plan.practice`` (the next step resets for the other kind of episode)."""
        status = getattr(self.robot, "status", None)  # the real client has one; doubles may not
        uptime_at_reset_s = self._robot_uptime_s()
        self._publish(LoopPhase.AWAITING_START, plan)
        intent = self._wait(lambda: self._take_pending(StartEpisode) or self._practice() != plan.practice)
        if intent is True:
            return None
        refusal = self._start_refusal(status, uptime_at_reset_s) if status is not None else ""
        if refusal:
            # The page waits for this answer to its Start (never "episode started" on a refusal).
            self.last_start = LastStart(intent_id=intent.id, refused=refusal)
            self._robot_error(refusal, plan)
            return None
        return int(intent.id)

    def _take_pending(self, kind: type[IntentT]) -> IntentRow[IntentT] | None:
        """The oldest pending intent of ``kind``, taken; a plain read first, so a look that finds
        none opens no write transaction (``take_intent`` locks the row FOR UPDATE)."""
        if not self.store.pending_intents(kind):
            return None
        return self.store.take_intent(kind)

    def _practice_episode(self) -> None:
        """Practice (the page's switch, ``RunControl.practice``): an episode run as any other
        (reset, Start, the policy on the canonical prompt, a person taking over) and recorded
        nowhere: no episode row, file, video or label, so it never reaches PPO. Its id is negative
        (never a stored one), so the page can still end it, abort it or take control. The run's own
        draws (plan, scene seed) are left alone; tasks take turns."""
        self.practice_runs += 1
        episode_id = -self.practice_runs
        task = self.settings.tasks[(self.practice_runs - 1) % len(self.settings.tasks)]
        canon = self.store.prompts(task, PromptStatus.CANONICAL)[0]
        seed = random.randrange(2**31)  # not self.rng: the run's scenes do not depend on practice
        # (the stage is the task's own; the page shows "practice")
        stage = self.store.task_state(task).stage
        why = "practice: nothing is recorded"
        plan = Plan(task, canon.id, canon.text, canon.text, stage, why, seed, practice=True)
        self._publish(LoopPhase.RESETTING, plan)
        try:
            self.robot.reset(task, seed, reset_joints_rad=self.settings.catalogue.get(task).reset_joints_rad)
        except Exception as e:
            self._robot_error(f"practice reset failed: {e}", plan)
            return
        self.robot_error = ""
        if not self.settings.auto_start:
            start_intent_id = self._take_start(plan)
            if start_intent_id is None:
                return
            self.last_start = LastStart(intent_id=start_intent_id, episode_id=episode_id)
        self._publish(LoopPhase.RUNNING, plan, episode_id=episode_id, started_at_s=time.time())

        def should_stop() -> bool:  # the loop stops, practice ends, or the page aborts
            if self.stop_event.is_set() or not self._practice():
                return True
            return self._take_pending(AbortEpisode) is not None

        try:
            self.actor.run_episode(
                episode_id=str(episode_id),
                task=task,
                canonical_prompt=canon.text,
                rollout_prompt=canon.text,
                max_chunks=self.settings.max_chunks_of(task),
                should_stop=should_stop,
                seed=seed,
                practice=True,
            )  # the episode file is dropped here: nothing of it is kept
        except Exception as e:
            self.store.discard_intents(AbortEpisode)
            self._robot_error(f"practice episode failed: {e}", plan)
            return
        self.store.discard_intents(AbortEpisode)

    def _next_scene_seed(self) -> int:
        """A fresh scene seed, or the current one again while it has run fewer than
        ``rollouts_per_scene`` episodes."""
        if self._scene_uses % self.settings.rollouts_per_scene == 0:
            self._scene_seed = self.rng.randrange(2**31)
        self._scene_uses += 1
        return self._scene_seed

    def _choose(self) -> Plan | None:
        """The next plan, with every task that is in RL having its alpha started. The supervisor
        moves a task to RL from its own thread, possibly between starting the alphas and choosing:
        the plan would then sample the prompt from the row's unstarted alpha (canonical only), so
        that choice is taken back (the generator too) and made again once the alpha is started."""
        while True:
            self._init_rl_alpha()
            rng_state = self.rng.getstate()
            plan = choose_next(self.store, self.settings.tasks, self.settings.rollouts_per_prompt, self.rng)
            if (
                plan is None
                or plan.stage != Stage.RL
                or self.store.task_state(plan.task).ema_success is not None
            ):
                return plan
            self.rng.setstate(rng_state)

    def _robot_uptime_s(self) -> float | None:
        """The robot server's uptime, when the robot reports a status (the real client does)."""
        status = getattr(self.robot, "status", None)
        if status is None:
            return None
        try:
            return float(status().uptime_s)
        except Exception:  # unreachable: treated as restarted
            return None

    @staticmethod
    def _start_refusal(status: Callable[[], Any], uptime_at_reset_s: float | None) -> str:
        """Why a Start must not run the episode now ("" when it may)."""
        try:
            st = status()
        except Exception as e:
            return (
                f"Start refused: the robot server does not answer ({e}); the scene is reset again "
                "once it is back: check it and press Start"
            )
        if uptime_at_reset_s is not None and float(st.uptime_s) < uptime_at_reset_s:
            # Its reset and observations are gone with it: reset again and ask for Start again.
            return (
                "Start refused: the robot server restarted while waiting for Start; the scene is "
                "reset again: check it and press Start"
            )
        if st.estopped:
            return "Start refused: e-stop latched: release it on the page, then press Start"
        return ""

    def _run_episode(self, plan: Plan, start_intent_id: int | None = None) -> EpisodeRow | None:
        ep = self.store.create_episode(
            plan.task, plan.prompt_id, self.policy_version, plan.stage, seed=plan.seed
        )
        if start_intent_id is not None:
            self.last_start = LastStart(intent_id=start_intent_id, episode_id=ep.id)
        self.episodes_run += 1
        self._publish(LoopPhase.RUNNING, plan, episode_id=ep.id)
        abort_requested: list[str] = []

        def should_stop() -> bool:
            if self.stop_event.is_set():
                abort_requested.append("the loop was asked to stop mid-episode")
            elif self._take_pending(AbortEpisode) is not None:  # a read per chunk, no write lock
                abort_requested.append("the operator aborted the episode from the page")
            return bool(abort_requested)

        try:
            episode_file = self.actor.run_episode(
                episode_id=str(ep.id),
                task=plan.task,
                canonical_prompt=plan.canonical_prompt,
                rollout_prompt=plan.prompt,
                max_chunks=self.settings.max_chunks_of(plan.task),
                should_stop=should_stop,
                seed=plan.seed,
            )
        except Exception as e:
            self.store.discard_intents(AbortEpisode)
            self.store.abort_episode(
                ep.id, f"robot or policy error during the episode: {type(e).__name__}: {e}"
            )
            self._robot_error(f"episode {ep.id} aborted: {e}", plan)
            return self.store.episode(ep.id)
        # An abort clicked as the episode ended must not stop the next one.
        self.store.discard_intents(AbortEpisode)
        if abort_requested:
            self.store.abort_episode(ep.id, abort_requested[0])
            return self.store.episode(ep.id)
        videos = self.store.encode_episode_videos(ep.id, episode_file)
        self.store.finish_episode(ep.id, episode_file, videos=videos)
        self._label(ep.id, episode_file.success, plan)
        return self.store.episode(ep.id)

    def _robot_error(self, message: str, plan: Plan) -> None:
        log.error("%s", message)
        self.robot_error = message
        self._publish(LoopPhase.ROBOT_ERROR, plan)
        deadline = time.monotonic() + self.settings.error_backoff_s
        self._wait(lambda: time.monotonic() >= deadline)

    # --- labels, supervisor trigger, PPO --------------------------------------------------------

    def _label(self, episode_id: int, sim_success: bool | None, plan: Plan) -> None:
        if self.settings.auto_label:
            self.store.add_label(
                episode_id,
                bool(sim_success),
                source=LabelSource.SIMULATOR,
                reason="simulator success check"
                if sim_success is not None
                else "no success check reported: failure",
            )
        else:
            self._publish(LoopPhase.AWAITING_LABEL, plan, episode_id=episode_id)
            # discarded on the page (bad reset, someone in the scene): no label, go on
            self._wait(lambda: self.store.episode(episode_id).status in _ENDED)
        self._after_label(self.store.episode(episode_id))

    def _finish_pending_labels(self) -> None:
        """Episodes that ended before a restart but have no label yet: label or wait, as before."""
        for ep in self.store.episodes(status=EpisodeStatus.AWAITING_LABEL):
            if ep.task not in self.settings.tasks:
                continue
            sim = self.store.load_episode_file(ep.id).success if self.settings.auto_label else None
            self._label(ep.id, sim, Plan.of_episode(ep, "label of an episode from before the restart"))

    def _after_label(self, ep: EpisodeRow) -> None:
        if ep.status != EpisodeStatus.LABELLED:
            return
        self._record_curves(ep)
        self._maybe_start_update()

    def _record_curves(self, ep: EpisodeRow) -> None:
        """After ``ep``'s label: the book's curves, and the run's (its prompt's and its prompt
        source's success, the pool's admissions, the episode's time), at ``step`` labels."""
        task = ep.task
        step = self.store.count_episodes(status=EpisodeStatus.LABELLED)
        outcomes = self._canonical_outcomes(task, CANONICAL_SUCCESS_WINDOW)
        alpha = self.store.task_state(task).alpha
        prompts = self.store.prompts(task)
        n_of = {s: sum(p.status == s for p in prompts) for s in PromptStatus}
        self._add_metrics(self.book.curves(task, outcomes, alpha, n_of[PromptStatus.POOL], step))
        prompt = next(p for p in prompts if p.id == ep.prompt_id)
        same_source = [p for p in prompts if p.source == prompt.source]
        n_labelled = sum(p.n_episodes for p in same_source)
        judged = n_of[PromptStatus.POOL] + n_of[PromptStatus.REJECTED]
        episode_s = (ep.finished_at - ep.created_at).total_seconds() if ep.finished_at else 0.0
        points = [
            Metric(task_metric(task, TaskCurve.CANDIDATES), float(n_of[PromptStatus.CANDIDATE]), step),
            Metric(task_metric(task, TaskCurve.REJECTED), float(n_of[PromptStatus.REJECTED]), step),
            Metric(task_metric(task, TaskCurve.EPISODE_S), episode_s, step),
        ]
        if judged:
            rate = n_of[PromptStatus.POOL] / judged
            points.append(Metric(task_metric(task, TaskCurve.ADMISSION_RATE), rate, step))
        if prompt.success_rate is not None:
            points.append(Metric(prompt_success_metric(task, prompt.id), prompt.success_rate, step))
        if n_labelled:
            rate = sum(p.n_success for p in same_source) / n_labelled
            points.append(Metric(source_success_metric(task, PromptSource(prompt.source)), rate, step))
        self._add_metrics(points)
        if self.run_log is not None:
            self.run_log.episode(
                RunEpisode(
                    id=ep.id,
                    task=task,
                    prompt_id=ep.prompt_id,
                    prompt=ep.rollout_prompt,
                    prompt_source=PromptSource(prompt.source),
                    stage=ep.stage,
                    policy_version=ep.policy_version,
                    success=bool(ep.success),
                    episode_s=episode_s,
                    labelled_step=step,
                    videos=dict(ep.video_paths),
                )
            )

    def _canonical_outcomes(self, task: str, limit: int) -> list[bool]:
        """The outcomes of the task's canonical prompt's last ``limit`` labelled episodes, oldest
        first."""
        canon = self.store.prompts(task, PromptStatus.CANONICAL)[0]
        recent = self.store.episodes(
            task=task, status=EpisodeStatus.LABELLED, prompt_id=canon.id, newest_first=True, limit=limit
        )
        return [bool(e.success) for e in reversed(recent)]

    def _add_metrics(self, metrics: Sequence[Metric]) -> None:
        for m in metrics:
            self.store.add_metric(m.name, m.value, m.step)
            if self.run_log is not None:
                self.run_log.scalar(m.name, m.value, m.step)

    def _maybe_start_update(self) -> None:
        if self.trainer is None or self.trainer.busy:
            return
        chosen = self.updates.due(
            self.store.episodes(status=EpisodeStatus.LABELLED, since_id=self.updates.trained_through)
        )
        if chosen is None:
            return
        batch = [(self.store.load_episode_file(e.id), reward_from_label(e.success)) for e in chosen]
        relabelled = self._relabelled_search_successes(chosen)
        batch += [(f, reward_from_label(True)) for _, f in relabelled]
        rows = chosen + [row for row, _ in relabelled]
        self._update_alpha(chosen)
        # PPO starts from the weights in use (self.policy_version); episodes collected while the
        # previous update ran are older.
        versions = [
            episode_policy_version(f, row.policy_version) for (f, _), row in zip(batch, rows, strict=True)
        ]
        stale = staleness_stats(versions, self.policy_version)
        log.info(
            "PPO update to version %d: batch lag max %d, mean %.2f versions",
            self.updates.next_version,
            int(stale["stale_lag_max"]),
            stale["stale_lag_mean"],
        )
        self.trainer.start(batch, [e.id for e in chosen], self.updates.next_version, stale)
        if self.settings.synchronous_updates:
            self.trainer.join()
            self._swap_weights()
            return
        self._beat()  # the page shows the update running

    def _relabelled_search_successes(self, chosen: list[EpisodeRow]) -> list[tuple[EpisodeRow, EpisodeFile]]:
        """``relabel_search_successes``: for each task whose first RL episode is in this batch
        (its first PPO update, also after a restart), its successful bootstrap rollouts of
        candidate prompts, relabelled with the canonical prompt."""
        if not self.settings.relabel_search_successes:
            return []
        out: list[tuple[EpisodeRow, EpisodeFile]] = []
        chosen_ids = {e.id for e in chosen}
        for task in sorted({e.task for e in chosen}):
            first_rl = self.store.episodes(task=task, stage=Stage.RL, status=EpisodeStatus.LABELLED, limit=1)
            if not first_rl or first_rl[0].id not in chosen_ids:
                continue
            canon = self.store.prompts(task, PromptStatus.CANONICAL)[0]
            successes = [
                e
                for e in self.store.episodes(
                    task=task, stage=Stage.BOOTSTRAP, status=EpisodeStatus.LABELLED, success=True
                )
                if e.prompt_id != canon.id
            ]
            out += [(e, relabelled(self.store.load_episode_file(e.id), canon.text)) for e in successes]
            log.info(
                "task %s: %d search successes relabelled with the canonical prompt", task, len(successes)
            )
        return out

    def _init_rl_alpha(self) -> None:
        """When a task has just entered RL (the supervisor sets the stage), start its EMA
        (``MixtureBook.start``); the start is logged and recorded as a metric."""
        for task in self.settings.tasks:
            state = self.store.task_state(task)
            if state.stage != Stage.RL or state.ema_success is not None:
                continue
            canon = self.store.prompts(task, PromptStatus.CANONICAL)[0]
            step = self.store.count_episodes(status=EpisodeStatus.LABELLED)
            start = self.book.start(task, canon.success_rate, canon.n_episodes, step)
            self.store.set_task_state(task, ema_success=start.ema_success, alpha=start.alpha)
            self._add_metrics(start.metrics)
            log.info(
                "task %s enters RL: EMA starts at %.2f (%s) -> alpha %.2f",
                task,
                start.ema_success,
                start.why,
                start.alpha,
            )

    def _update_alpha(self, batch: list[EpisodeRow]) -> None:
        """Adaptive alpha per task in ``batch``, once per PPO iteration (``MixtureBook.update``).
        Tasks whose canonical prompt has no labelled episode yet keep their alpha."""
        step = self.store.count_episodes(status=EpisodeStatus.LABELLED)
        for task in sorted({e.task for e in batch}):
            state = self.store.task_state(task)
            outcomes = self._canonical_outcomes(task, self.settings.alpha_window)
            update = self.book.update(task, state.ema_success, state.iteration, outcomes, step)
            self.store.set_task_state(
                task, alpha=update.alpha, ema_success=update.ema_success, iteration=update.iteration
            )
            self._add_metrics(update.metrics)

    def _swap_weights(self) -> None:
        """Between episodes only (callers never run this while an episode executes)."""
        if self.trainer is None:
            return
        result = self.trainer.poll()
        if result is None:
            return
        swap = self.updates.swap(result)
        self.training_error = swap.error
        if swap.policy is None:
            log.error("%s", swap.error)
            return
        self.actor.set_policy(swap.policy)
        self._add_metrics(swap.metrics)
        log.info("policy version %d in use (update took %.1f s)", result.version, result.duration_s)
