"""Kinds of operator/service intents passed through the ``intents`` table (see Store.add_intent)."""

from __future__ import annotations

# page -> loop: the operator reset the scene; start the prepared episode now.
START_EPISODE = "start_episode"
# page -> loop: stop the running episode (the robot holds; the episode is aborted with a reason).
ABORT_EPISODE = "abort_episode"
# loop -> supervisor: a prompt of a task in the bootstrap stage has its N labelled rollouts.
# payload: {"task", "prompt_id", "n_episodes", "success_rate"}
PROMPT_ROLLOUTS_DONE = "prompt_rollouts_done"
# page -> loop, as a service-state row (not an intent: it is a switch, read before each episode):
# {"paused": bool}. While set, the loop finishes the episode in hand and waits before the next reset.
RUN_CONTROL = "_run_control"
