"""Demonstrations on the arm: teleoperation sources (SpaceMouse, keyboard, hand guiding, scripted)
behind one ABC (``teleop/base.py``), the recorder that streams their rows through the robot
server's safety path and writes episode files (``teleop/recorder.py``), and ``pde record``."""
