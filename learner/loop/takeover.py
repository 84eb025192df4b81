"""The operator takes over from the page, as a wrapper around the actor (the episode loop itself is
unchanged, learner/loop/core.py).

"End episode now": the loop hands the actor a ``should_stop`` that aborts the episode when it says
stop. The wrapper asks one more thing: an ``EndEpisode`` intent for this episode. Then the actor
stops the robot and returns the chunks run so far, as it does at ``max_chunks``; the loop's own
``should_stop`` never said stop, so the episode is stored (videos, chunk rows) and awaits its label
like any other. The page sends the operator's verdict as the label once the episode has ended.

"Take control": with a person source (``PDE_TELEOP_PERSON``, teleop/settings.py), the wrapper passes
it to the actor as ``person=`` and a ``TakeControl`` intent for this episode as
``takeover_requested``; the person then drives until the source ends the take (learner/episode/person.py).
The wrapper publishes whether a person source exists (``TakeoverState``), so the page offers the
button only then. With ``PDE_TELEOP_PERSON=page`` the person is the page's keys and gamepad
(teleop/page.py), read from the database row the page's server writes (``StorePageCommands``)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from learner.loop.core import ActorLike
from pde_contract.episodes import EpisodeFile
from pde_contract.intents import EndEpisode, TakeControl
from pde_contract.service_state import PAGE_TELEOP_ROW, TAKEOVER_ROW, PageTeleopState, TakeoverState
from pde_storage.protocols import IntentConsumer, ServiceStates
from pde_storage.service_states import read_state, write_state
from teleop.base import TeleopError, TeleopSource
from teleop.page import PageCommand

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


class StorePageCommands:
    """The page's newest teleop command (``PageTeleopState``, written by the page's server),
    stamped with this process's clock when its number changes: the page source's watchdog then
    measures the page's silence here, and the two machines' clocks never mix. A command already
    there at the first read is of unknown age: stamped 0, so it never moves the arm. A row this
    version cannot read is no command."""

    def __init__(self, store: ServiceStates, clock_unix_s: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock_unix_s
        self._seq: str | None = None
        self._command: PageCommand | None = None
        self._first = True

    def __call__(self) -> PageCommand | None:
        state, _ = read_state(self.store, PAGE_TELEOP_ROW, PageTeleopState)
        first, self._first = self._first, False
        if state is None:
            self._seq, self._command = None, None
            return None
        if state.seq == self._seq:
            return self._command
        self._seq = state.seq
        try:
            self._command = PageCommand.checked(
                state.axes,
                state.gripper_presses,
                state.end_presses,
                state.device,
                received_unix_s=0.0 if first else self._clock(),
            )
        except TeleopError as e:
            log.warning("ignored the page's teleop command %s: %s", state, e)
            self._command = None
        return self._command
