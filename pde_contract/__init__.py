"""The wire contract every PDE service imports: typed messages, the numpy-over-msgpack codec,
the robot client and the episode file format. It depends on numpy, pyzmq and msgspec only, so the
robot PC never needs torch and the learner never needs franky."""

from pde_contract.messages import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION"]
