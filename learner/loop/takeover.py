"""The operator takes over: "end episode now" from the page, as a wrapper around the actor (the
episode loop itself is unchanged, learner/loop/core.py).

The loop hands the actor a ``should_stop`` that aborts the episode when it says stop. The wrapper
asks one more thing: an ``END_EPISODE`` intent for this episode. Then the actor stops the robot
and returns the chunks run so far, as it does at ``max_chunks``; the loop's own ``should_stop``
never said stop, so the episode is stored (videos, chunk rows) and awaits its label like any
other. The page sends the operator's verdict as the label once the episode has ended."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from learner.loop.core import ActorLike
from pde_contract.episodes import EpisodeFile
from pde_storage import intents
from pde_storage.protocols import IntentConsumer

log = logging.getLogger("pde.loop")


class TakeoverActor:
    """``actor`` with the page's "end episode now" (see the module docstring)."""

    def __init__(self, actor: ActorLike, store: IntentConsumer) -> None:
        self.actor = actor
        self.store = store

    def _end_requested(self, episode_id: str) -> bool:
        if not self.store.pending_intents(intents.END_EPISODE):  # a read: no write lock per check
            return False
        intent = self.store.take_intent(intents.END_EPISODE)
        if intent is None:
            return False
        if str(intent.payload.get("episode_id")) != episode_id:  # meant for an earlier episode
            log.warning(
                "dropped an 'end episode now' for episode %s during episode %s",
                intent.payload.get("episode_id"),
                episode_id,
            )
            return False
        log.info("episode %s: ended now by the operator (%s)", episode_id, intent.payload.get("by", "page"))
        return True

    def run_episode(
        self, *, episode_id: str, should_stop: Callable[[], bool] = lambda: False, **episode: Any
    ) -> EpisodeFile:
        """The actor's episode (``episode``: task, prompts, max_chunks, seed, passed on as they
        are), stopped also when the page ends it."""
        ended: list[bool] = []

        def stop_or_end() -> bool:
            if should_stop():
                return True
            if not ended and self._end_requested(episode_id):
                ended.append(True)
            return bool(ended)

        return self.actor.run_episode(episode_id=episode_id, should_stop=stop_or_end, **episode)

    def set_policy(self, policy: Any) -> None:
        self.actor.set_policy(policy)
