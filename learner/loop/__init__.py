"""The PDE episode loop (Algorithm 1): choose task and prompt, have the operator reset the scene,
run the episode through the actor, collect the label, trigger the supervisor and PPO."""
