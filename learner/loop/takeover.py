"""The operator takes over from the page, as a wrapper around the actor (the episode loop itself is
unchanged, learner/loop/core.py).

"End episode now": the loop hands the actor a ``should_stop`` that aborts the episode when it says
stop. The wrapper asks one more thing: an ``EndEpisode`` intent for this episode. Then the actor
stops the robot and returns the chunks run so far, as it does at ``max_chunks``; the loop's own
``should_stop`` never said stop, so the episode is stored (videos, chunk rows) and awaits its label
like any other. The page sends the operator's verdict as the label once the episode has ended.

"Take control": with a person source (``PDE_TELEOP_PERSON``, teleop/settings.py), the wrapper passes
it to the actor as ``person=`` and a ``TakeControl`` intent for this episode as
``takeover_requested``; the person then drives until the source ends the take (learner/actor.py).
The wrapper publishes whether a person source exists (``TakeoverState``), so the page offers the
button only then."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

from learner.loop.core import ActorLike
from pde_contract.episodes import EpisodeFile
from pde_contract.intents import EndEpisode, TakeControl
from pde_contract.service_state import TAKEOVER_ROW, TakeoverState
from pde_storage.protocols import IntentConsumer, ServiceStates
from pde_storage.service_states import write_state
from teleop.base import TeleopSource

log = logging.getLogger("pde.loop")


class TakeoverStore(IntentConsumer, ServiceStates, Protocol):
    """Takes the page's intents; publishes whether a person may take over."""


class TakeoverActor:
    """``actor`` with the page's "end episode now" and, given ``person`` (a connected teleop
    source; the actor must accept ``person=`` and ``takeover_requested=``), "take control"."""

    def __init__(self, actor: ActorLike, store: TakeoverStore, person: TeleopSource | None = None) -> None:
        self.actor = actor
        self.store = store
        self.person = person
        # Stale requests from before this loop started would take over its first episode.
        store.discard_intents(TakeControl)
        write_state(
            store, TAKEOVER_ROW, TakeoverState(pid=os.getpid(), person=person.name if person else None)
        )

    def _requested(self, kind: type[EndEpisode] | type[TakeControl], episode_id: str, what: str) -> bool:
        if not self.store.pending_intents(kind):  # a read: no write lock per check
            return False
        row = self.store.take_intent(kind)
        if row is None:
            return False
        if str(row.intent.episode_id) != episode_id:  # meant for an earlier episode
            log.warning(
                "dropped a %r for episode %s during episode %s", what, row.intent.episode_id, episode_id
            )
            return False
        log.info("episode %s: %s by the operator (%s)", episode_id, what, row.intent.by)
        return True

    def run_episode(
        self, *, episode_id: str, should_stop: Callable[[], bool] = lambda: False, **episode: Any
    ) -> EpisodeFile:
        """The actor's episode (``episode``: task, prompts, max_chunks, seed, passed on as they
        are), stopped also when the page ends it, and taken over when the page asks."""
        ended: list[bool] = []

        def stop_or_end() -> bool:
            if should_stop():
                return True
            if not ended and self._requested(EndEpisode, episode_id, "end episode now"):
                ended.append(True)
            return bool(ended)

        if self.person is not None:
            episode["person"] = self.person
            episode["takeover_requested"] = lambda: self._requested(TakeControl, episode_id, "take control")
        return self.actor.run_episode(episode_id=episode_id, should_stop=stop_or_end, **episode)

    def set_policy(self, policy: Any) -> None:
        self.actor.set_policy(policy)
