"""The operator takes over from the page, as a wrapper around the actor (the episode loop itself is
unchanged, learner/loop/core.py).

"End episode now": the loop hands the actor a ``should_stop`` that aborts the episode when it says
stop. The wrapper asks one more thing: an ``END_EPISODE`` intent for this episode. Then the actor
stops the robot and returns the chunks run so far, as it does at ``max_chunks``; the loop's own
``should_stop`` never said stop, so the episode is stored (videos, chunk rows) and awaits its label
like any other. The page sends the operator's verdict as the label once the episode has ended.

"Take control": with a person source (``PDE_TELEOP_PERSON``, teleop/settings.py), the wrapper passes
it to the actor as ``person=`` and a ``TAKE_CONTROL`` intent for this episode as
``takeover_requested``; the person then drives until the source ends the take (learner/actor.py).
The wrapper publishes whether a person source exists (``TAKEOVER_STATE``), so the page offers the
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
from pde_storage import intents
from pde_storage.protocols import IntentConsumer, ServiceStates
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
        store.discard_intents(intents.TAKE_CONTROL)
        store.set_service_state(
            intents.TAKEOVER_STATE, {"person": person.name if person else None, "pid": os.getpid()}
        )

    def _requested(self, kind: str, episode_id: str, what: str) -> bool:
        if not self.store.pending_intents(kind):  # a read: no write lock per check
            return False
        intent = self.store.take_intent(kind)
        if intent is None:
            return False
        if str(intent.payload.get("episode_id")) != episode_id:  # meant for an earlier episode
            log.warning(
                "dropped a %r for episode %s during episode %s",
                what,
                intent.payload.get("episode_id"),
                episode_id,
            )
            return False
        log.info("episode %s: %s by the operator (%s)", episode_id, what, intent.payload.get("by", "page"))
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
            if not ended and self._requested(intents.END_EPISODE, episode_id, "end episode now"):
                ended.append(True)
            return bool(ended)

        if self.person is not None:
            episode["person"] = self.person
            episode["takeover_requested"] = lambda: self._requested(
                intents.TAKE_CONTROL, episode_id, "take control"
            )
        return self.actor.run_episode(episode_id=episode_id, should_stop=stop_or_end, **episode)

    def set_policy(self, policy: Any) -> None:
        self.actor.set_policy(policy)


class StorePageCommands:
    """The page's newest teleop command (``intents.PAGE_TELEOP_STATE``, written by the page's
    server), stamped with this process's clock when its number changes: the page source's
    watchdog then measures the page's silence here, and the two machines' clocks never mix. A
    command already there at the first read is of unknown age: stamped 0, so it never moves the
    arm."""

    def __init__(self, store: ServiceStates, clock_unix_s: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock_unix_s
        self._seq: object = None
        self._command: PageCommand | None = None
        self._first = True

    def __call__(self) -> PageCommand | None:
        row = self.store.service_states().get(intents.PAGE_TELEOP_STATE)
        first, self._first = self._first, False
        if row is None or row.state.get("seq") == self._seq:
            return self._command
        st = row.state
        self._seq = st.get("seq")
        try:
            self._command = PageCommand.checked(
                list(st["axes"]),
                int(st["gripper_presses"]),
                int(st["end_presses"]),
                str(st.get("device", "")),
                received_unix_s=0.0 if first else self._clock(),
            )
        except (KeyError, TypeError, ValueError, TeleopError) as e:  # a row this version cannot read
            log.warning("ignored the page's teleop command %s: %s", st, e)
            self._command = None
        return self._command
