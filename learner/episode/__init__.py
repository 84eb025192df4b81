"""One episode on the robot, in the shape of openpi's ``Runtime(environment, agent, subscribers)``:

- ``session.py``: the robot session at the bottom (observe, submit, stop; which chunk runs and
  which of its rows ran).
- ``clock.py``: when to look next, one clock per timing mode (sync, overlapped, the sim's stream).
- ``drivers.py`` (the policy) and ``person.py`` (a person taking over): who sends the rows; a
  takeover is a switch from one driver to the other.
- ``recording.py``: the subscribers (the episode recorder, intervention demos).
- ``runtime.py``: ``Actor.run_episode``, the episode's story.
"""
