"""``pde doctor``: the robot PC's readiness checks (main.py), each a function over the System
boundary (system.py, checks.py)."""
