"""Sim speed profiles: how finely the simulated FR3 is integrated and solved per control tick.

``default`` is what the lab demo, the recorded demonstrations and every test run (SIM.md's
settings). ``fast`` is an opt-in for benchmarks that calibrate their own premise with it
(docs/sim.md, "Speed profiles"): a coarser physics step, a shorter IK with a looser tolerance, and
setpoints held over blocks of substeps so MuJoCo runs each block in one ``mj_step`` call. Its
episodes differ from the default's; the scripted expert's success on the benchmark task is checked
to be unchanged (bench/bench_sim_profiles.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SimProfile:
    name: str
    # MuJoCo's integration step (implicitfast). The contacts' solref time constant stays 5 ms;
    # MuJoCo raises it to 2 steps where the step is coarser (its refsafe rule).
    physics_timestep_s: float
    # Differential IK per control tick: at most this many iterations, stopping early once the
    # pose error (m + rad, as one 6-vector norm) is below the tolerance.
    ik_max_iterations: int
    ik_tolerance: float
    # Substeps the arm's and the gripper's setpoints are held for: each block is one mj_step
    # call (1: a new setpoint every substep). The ramp and the gripper move in as many steps.
    # With 4 ms steps, 3-step blocks (12 ms) dropped the tape off the top rack in 25 of 30 expert
    # episodes (docs/sim.md, "Speed profiles"); 2-step blocks did not.
    setpoint_hold_steps: int
    # How far inside the workspace box the servos' setpoint keeps the TCP (robots/sim/robot_sim.py),
    # so that the measured TCP, which overshoots a setpoint arriving at speed, stays in the box:
    # the tracking error measured at the walls with this profile's physics, rounded up.
    tracking_margin_m: float = 0.003

    def __post_init__(self) -> None:
        if not 0.0005 <= self.physics_timestep_s <= 0.01:
            raise ValueError(f"physics_timestep_s={self.physics_timestep_s} outside 0.0005..0.01 s")
        if self.ik_max_iterations < 1 or self.ik_tolerance <= 0:
            raise ValueError(
                f"ik_max_iterations={self.ik_max_iterations}, ik_tolerance={self.ik_tolerance}: "
                "use at least 1 iteration and a tolerance > 0"
            )
        if self.setpoint_hold_steps < 1:
            raise ValueError(f"setpoint_hold_steps={self.setpoint_hold_steps}: use 1 or more")


DEFAULT = SimProfile(
    name="default", physics_timestep_s=0.002, ik_max_iterations=20, ik_tolerance=1e-4, setpoint_hold_steps=1
)
FAST = SimProfile(
    name="fast",
    physics_timestep_s=0.004,
    ik_max_iterations=8,
    ik_tolerance=5e-4,
    setpoint_hold_steps=2,
    tracking_margin_m=0.006,  # 2.9 mm past a wall measured at 0.003 (coarser steps, looser IK)
)
SIM_PROFILES = {p.name: p for p in (DEFAULT, FAST)}


def load_profile(name: str) -> SimProfile:
    """The profile called ``name``; a ValueError lists the known ones."""
    try:
        return SIM_PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown sim profile {name!r}: choose one of {sorted(SIM_PROFILES)}") from None
