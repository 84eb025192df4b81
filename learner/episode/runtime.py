"""The episode runtime (openpi's ``Runtime(environment, agent, subscribers)``): a robot session,
a clock, two drivers and the subscribers, put together as one episode's story (``_Episode.run``).

Per chunk: the clock waits while the running chunk runs and returns the observation to infer the
next from; the policy's driver infers and sends it; the recorder keeps it (observation, actions,
the policy's trace: log_prob, value, chain; the inference time, the send time, and the rows of the
chunk that ran). A person may take over whenever the policy drives (``person.py``): the person's
driver then sends rows until the person hands back.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable

from learner.episode.clock import Clock, end_clock, episode_clock
from learner.episode.drivers import PolicyDriver
from learner.episode.person import PersonDriver, TakeoverWatch
from learner.episode.recording import EpisodeRecorder, InterventionDemos, Subscriber
from learner.episode.session import RobotClientLike, RobotSession, Running, Waited, chunk_done
from learner.episode.settings import ActorSettings
from learner.policies.base import Policy
from pde_contract.episodes import EpisodeFile
from pde_contract.messages import ActionSpace, Observation
from pde_contract.settings import DataLayout
from teleop.base import TeleopSource
from teleop.settings import TeleopSettings


class _Next(enum.Enum):
    INFER = "infer"  # the policy infers its next chunk from the newest observation
    LOOK = "look"  # back to the top: the policy's chunk still runs
    END = "end"  # the episode ends


class _Episode:
    """One episode under way: which chunk runs, the newest observation, the task's success."""

    def __init__(
        self,
        session: RobotSession,
        clock: Clock,
        policy: PolicyDriver,
        person: PersonDriver | None,
        subscribers: list[Subscriber],
        should_stop: Callable[[], bool],
    ) -> None:
        self.session, self.clock, self.policy, self.person = session, clock, policy, person
        self.subscribers, self.should_stop = subscribers, should_stop
        self.watch = person.watch if person is not None else TakeoverWatch(None, None)
        self.stop_on_success = policy.settings.stop_on_success
        self.running: Running | None = None
        self.success: bool | None = None

    def run(self, max_chunks: int) -> None:
        """Up to ``max_chunks`` policy chunks; ends early on the task's success or a stop."""
        self.obs = self.session.fresh_observation(-1)
        n_sent = 0
        while n_sent < max_chunks:
            if self.should_stop():
                self._stop()
                break
            step = _Next.INFER if self.running is None else self._look()
            if step is _Next.END:
                break
            if step is _Next.LOOK:
                continue
            inferred = self.policy.infer(self.obs)
            self.obs = inferred.observation
            self.clock.inferred(inferred.inference_s)
            if self.watch():
                # A person took over while the policy inferred: its chunk is never sent (nor
                # recorded); the policy infers again from where the person hands back.
                if self._take() is _Next.END:
                    break
                continue
            self._send(self.policy.send(inferred, self.clock.first_row_tick(self.obs, self.running)))
            n_sent += 1
        self._last_chunk()

    def _look(self) -> _Next:
        """Wait while the policy's chunk runs (a person may take over meanwhile)."""
        assert self.running is not None
        look = self.clock.look(self.running, self.obs, self.watch)
        if look is Waited.INTERRUPTED:
            return self._take()
        if not isinstance(look, Observation):  # should_stop() said stop
            self._stop()
            return _Next.END
        self.obs = look
        if self._task_done():
            if not self.clock.overlapping:
                self.running = None  # it has run: nothing left to wait for
            return _Next.END  # an overlapped one runs to its end in _last_chunk, as a sync one has
        return _Next.INFER

    def _take(self) -> _Next:
        """The person drives until they hand back."""
        assert self.person is not None
        take = self.person.take(self.running, self.obs, self.should_stop)
        for s in self.subscribers:
            s.on_take(take)
        self.running, self.obs = take.running, take.observation
        if take.stopped:
            return _Next.END
        if self.running is not None:
            return _Next.LOOK  # the person sent no row: the policy's chunk goes on
        return _Next.END if self._task_done() else _Next.INFER

    def _send(self, running: Running) -> None:
        if self.running is not None:
            self.running.preempted_at(running.accepted.start_tick)
        self.running = running
        for s in self.subscribers:
            s.on_chunk(running.record)

    def _last_chunk(self) -> None:
        """The last chunk runs to its end (its record already says so); a person may take it over
        too (the episode then ends with the take)."""
        if self.running is not None and self.person is not None:
            seq = self.running.seq
            waited = self.session.wait(seq, chunk_done(seq), self.should_stop, self.watch)
            if waited is Waited.STOPPED:
                self._stop()
            elif waited is Waited.INTERRUPTED:
                self._take()
        if self.running is not None:
            look = end_clock(self.session, self.should_stop).look(self.running, self.obs, None)
            if isinstance(look, Observation):
                self.obs, self.success = look, look.task_success
            else:
                self._stop()

    def _task_done(self) -> bool:
        """The simulator's word on the task (hardware never says); True: the episode ends here."""
        self.success = self.obs.task_success
        return bool(self.success) and self.stop_on_success

    def _stop(self) -> None:
        """Hold the arm (should_stop said so); the running chunk records the rows that ran."""
        self.session.stop(self.running)
        self.running = None


class Actor:
    """Runs episodes of the policy in-process on one robot client."""

    def __init__(
        self,
        policy: Policy,
        client: RobotClientLike,
        settings: ActorSettings | None = None,
        teleop_settings: TeleopSettings | None = None,
    ) -> None:
        self.settings = settings or ActorSettings()
        self.session = RobotSession(client, self.settings)
        self._policy = policy.for_acting(self.settings)
        self._teleop_settings = teleop_settings
        self._lock = threading.Lock()
        self._episode_lock = threading.Lock()  # held by run_episode: an in-place swap waits for it

    @property
    def client(self) -> RobotClientLike:
        return self.session.client

    @property
    def control_rate_hz(self) -> float:
        return self.session.control_rate_hz

    def set_policy(self, policy: Policy) -> None:
        """Swap weights; takes effect at the next episode (never mid-episode). The acting copy takes
        ``policy``'s weights in place where it can (``Policy.take_weights_of``: π0.5's real-time copy
        keeps its fused weights and captured CUDA graphs; the swap waits for a running episode to
        end); otherwise ``policy`` becomes the actor's own (``Policy.for_acting``: a π0.5 one may be
        cast to bf16 in place)."""
        with self._episode_lock, self._lock:
            if self._policy.take_weights_of(policy):
                return
        acting = policy.for_acting(self.settings)
        with self._lock:
            self._policy = acting

    @property
    def policy(self) -> Policy:
        with self._lock:
            return self._policy

    def _teleop(self) -> TeleopSettings:
        # read from the environment at the first take, not by an actor nobody takes over from
        if self._teleop_settings is None:
            self._teleop_settings = TeleopSettings()
        return self._teleop_settings

    def run_episode(
        self,
        *,
        episode_id: str,
        task: str,
        canonical_prompt: str,
        rollout_prompt: str,
        max_chunks: int,
        should_stop: Callable[[], bool] = lambda: False,
        seed: int | None = None,
        person: TeleopSource | None = None,
        takeover_requested: Callable[[], bool] | None = None,
        practice: bool = False,
    ) -> EpisodeFile:
        """Roll out one episode under ``rollout_prompt``. Stops after ``max_chunks`` policy chunks,
        on simulated success, or as soon as ``should_stop()`` is true (the robot is told to hold).
        With ``person`` (a connected teleop source), a person may take over: when
        ``person.wants_control()`` or ``takeover_requested()`` says so (``person.py``). A
        ``practice`` episode (the page's practice mode) writes nothing: no intervention demos."""
        if max_chunks < 1:
            raise ValueError(f"max_chunks must be >= 1, got {max_chunks}")
        policy, cfg, session = self.policy, self.settings, self.session
        rate_hz = session.control_rate_hz
        if person is not None and policy.action_space is not ActionSpace.EE_DELTA:
            raise ValueError(
                f"a person takes over with ee_delta rows, but the policy acts in "
                f"{policy.action_space.value}: take over from an ee_delta policy, or run without person="
            )
        watch = TakeoverWatch(person, takeover_requested)
        if cfg.reset_before_episode:
            session.client.reset(task=task, seed=seed)
        recorder = EpisodeRecorder()
        subscribers: list[Subscriber] = [recorder]
        if cfg.intervention_demos and not practice:
            subscribers.append(InterventionDemos(DataLayout(cfg.data_dir)))
        episode = _Episode(
            session,
            episode_clock(session, cfg, should_stop, person is not None),
            PolicyDriver(policy, session, cfg, episode_id, rollout_prompt),
            None if person is None else PersonDriver(session, cfg, self._teleop, watch, episode_id),
            subscribers,
            should_stop,
        )
        # an in-place swap (set_policy) waits for the chunks to be done
        with session.heartbeat(), self._episode_lock:
            episode.run(max_chunks)
        result = EpisodeFile(
            episode_id=episode_id,
            task=task,
            canonical_prompt=canonical_prompt,
            rollout_prompt=rollout_prompt,
            action_space=policy.action_space,
            control_rate_hz=rate_hz,
            chunks=recorder.chunks,
            success=episode.success,
            seed=seed,
            source=f"policy:{getattr(policy, 'version', 'unknown')}",
            interventions=recorder.interventions,
        )
        for s in subscribers:
            s.on_episode_end(result)
        return result
