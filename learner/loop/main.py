"""``pde loop``: the same as ``pde learner run``."""

from learner.loop.service import main

__all__ = ["main"]
