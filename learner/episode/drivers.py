"""The policy driving: infer a chunk from the newest usable observation, send it, record it.

(A person driving is ``person.py``; a takeover switches from one driver to the other.)
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from learner.episode.session import RobotSession, Running
from learner.episode.settings import ActorSettings
from learner.policies.base import ChunkSample, ObsBatch, Policy
from pde_contract.episodes import ChunkRecord, PolicyTrace
from pde_contract.messages import ActionChunk, Observation
from pde_contract.seam import rows_run

log = logging.getLogger(__name__)


def policy_trace(sample: ChunkSample, i: int) -> PolicyTrace:
    """What PPO needs of sample ``i`` of a batch, as the episode file records it."""
    return PolicyTrace(
        log_prob=float(sample.log_prob[i]),
        log_prob_elements=sample.log_prob_elements[i].copy(),
        value=float(sample.value[i]),
        chain=sample.chain[i].copy(),
    )


@dataclass(frozen=True)
class Inferred:
    """A chunk the policy inferred, not sent yet."""

    observation: Observation  # what it was inferred from
    sample: ChunkSample
    inference_s: float


class PolicyDriver:
    """``policy`` acting under ``rollout_prompt`` in episode ``episode_id``."""

    def __init__(
        self,
        policy: Policy,
        session: RobotSession,
        settings: ActorSettings,
        episode_id: str,
        rollout_prompt: str,
    ) -> None:
        self.policy, self.session, self.settings = policy, session, settings
        self.episode_id, self.rollout_prompt = episode_id, rollout_prompt

    def infer(self, obs: Observation) -> Inferred:
        obs, batch = self._usable_observation(obs)
        t0 = time.perf_counter()
        sample = self.policy.sample(batch, [self.rollout_prompt], deterministic=self.settings.deterministic)
        return Inferred(obs, sample, time.perf_counter() - t0)

    def send(self, inferred: Inferred, first_row_tick: int) -> Running:
        """Submit the chunk; it preempts the one running (if any) at the server's next tick."""
        actions = inferred.sample.actions[0]
        chunk = ActionChunk(
            seq=self.session.next_seq(),
            episode_id=self.episode_id,
            action_space=self.policy.action_space,
            actions=actions,
            control_rate_hz=self.session.control_rate_hz,
            sent_time_s=time.time(),
            first_row_tick=first_row_tick,
        )
        accepted = self.session.submit(chunk)
        record = ChunkRecord(
            observation=inferred.observation,
            actions=actions,
            trace=policy_trace(inferred.sample, 0),
            inference_s=inferred.inference_s,
            sent_time_s=chunk.sent_time_s,
            rows_run=rows_run(accepted.rows_skipped, len(chunk.actions), accepted.start_tick, None),
        )
        return Running(record, accepted, len(chunk.actions))

    def _usable_observation(self, obs: Observation) -> tuple[Observation, ObsBatch]:
        """The observation preprocessed; one the policy cannot use (a camera frame missing from it)
        is replaced by the next published one, until ``obs_timeout_s``."""
        deadline = time.monotonic() + self.settings.obs_timeout_s
        while True:
            try:
                return obs, self.policy.preprocess([obs])
            except ValueError as e:
                if time.monotonic() > deadline:
                    raise
                log.warning("skipping observation %d: %s", obs.seq, e)
                obs = self.session.fresh_observation(obs.seq)
