"""The simulated FR3 tabletop: MuJoCo world (world.py), tasks (tasks/), scripted expert (expert.py),
demonstration recorder (recorder.py) and the ``pde sim`` command (main.py)."""
