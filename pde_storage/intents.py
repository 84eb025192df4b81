"""Kinds of operator/service intents passed through the ``intents`` table (see Store.add_intent)."""

from __future__ import annotations

# page -> loop: the operator reset the scene; start the prepared episode now.
START_EPISODE = "start_episode"
# page -> loop: stop the running episode (the robot holds; the episode is aborted with a reason).
ABORT_EPISODE = "abort_episode"
# page -> loop: end the running episode now and keep it (not an abort): the robot holds, the episode
# is stored and awaits its label like any other. payload: {"episode_id", "success" (the operator's
# verdict, sent by the page as the label once the episode has ended; None: no verdict), "by"}.
# Taken by learner.loop.takeover.TakeoverActor, between and during chunks.
END_EPISODE = "end_episode"
# page -> loop: a person takes over the running episode now (the configured teleop source drives
# until it ends the take; then the policy goes on). payload: {"episode_id", "by"}. Taken by
# TakeoverActor, which is asked by the actor at every poll while the policy drives.
TAKE_CONTROL = "take_control"
# loop -> page, as a service-state row: {"person": the person source's name or None, "pid"} (the
# loop's pid: the row speaks for that loop only). The page offers "take control" only with a person.
TAKEOVER_STATE = "takeover"
# page -> loop, as a service-state row: the page's keys and gamepad while it holds control of a
# takeover (PDE_TELEOP_PERSON=page): {"seq", "axes", "gripper_presses", "end_presses", "device"},
# written by operator_ui/routers/teleop.py, read each tick by learner/loop/takeover.py.
PAGE_TELEOP_STATE = "teleop_page"
# loop -> supervisor: a prompt of a task in the bootstrap stage has its N labelled rollouts.
# payload: {"task", "prompt_id", "n_episodes", "success_rate"}
PROMPT_ROLLOUTS_DONE = "prompt_rollouts_done"
# page -> loop: pause and practice are not intents but a switch read before each episode:
# pde_contract.service_state.RunControl, read by pde_storage.service_states.run_control.
