"""The robot server: the only process that touches the arm. It streams camera frames and robot
state (PUB) and executes action chunks (commands on ROUTER) through a safety layer that sits in
front of every backend (``robots/sim``: MuJoCo FR3; ``robots/franka``: franky-control)."""
