"""Is the kernel real-time (PREEMPT_RT)? libfranka 0.21 asks only ``/sys/kernel/realtime``, which
the out-of-tree RT patch set provides and mainline kernels with PREEMPT_RT (6.12 and later, e.g.
Debian 13's ``linux-image-rt-amd64``) do not: there libfranka's Enforce check refuses a real-time
kernel. This module asks three places, so the backend can run libfranka's check itself where
libfranka would see it, and its own where libfranka cannot."""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

SYS_REALTIME = Path("/sys/kernel/realtime")
PROC_CONFIG = Path("/proc/config.gz")


@dataclass(frozen=True, slots=True)
class KernelRealtime:
    realtime: bool
    evidence: str  # what said so (or everything that was asked, when nothing did)
    libfranka_sees_it: bool  # /sys/kernel/realtime reads 1: libfranka's own check passes


def kernel_realtime(
    sys_realtime: Path = SYS_REALTIME, uname_version: str | None = None, proc_config: Path = PROC_CONFIG
) -> KernelRealtime:
    """The running kernel's real-time status. Inside a container these are the host's kernel's."""
    try:
        if sys_realtime.read_text().strip() == "1":
            return KernelRealtime(True, f"{sys_realtime} = 1", libfranka_sees_it=True)
    except OSError:
        pass
    version = os.uname().version if uname_version is None else uname_version
    if "PREEMPT_RT" in version.split():
        return KernelRealtime(True, f"uname -v: {version}", libfranka_sees_it=False)
    try:
        with gzip.open(proc_config, "rt") as f:
            if any(line.strip() == "CONFIG_PREEMPT_RT=y" for line in f):
                return KernelRealtime(True, f"{proc_config}: CONFIG_PREEMPT_RT=y", libfranka_sees_it=False)
    except OSError:
        pass
    return KernelRealtime(
        False,
        f"no {sys_realtime} = 1, no PREEMPT_RT in `uname -v` ({version}), "
        f"no CONFIG_PREEMPT_RT=y in {proc_config}",
        libfranka_sees_it=False,
    )
