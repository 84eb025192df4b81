"""The actor: runs one episode on the robot server with the policy in-process (``learner/episode/``
holds the runtime; these names stay importable from here)."""

from learner.episode.drivers import policy_trace
from learner.episode.recording import intervention_demos, write_intervention_demos
from learner.episode.runtime import Actor
from learner.episode.session import RobotClientLike
from learner.episode.settings import ActorSettings

__all__ = [
    "Actor",
    "ActorSettings",
    "RobotClientLike",
    "intervention_demos",
    "policy_trace",
    "write_intervention_demos",
]
