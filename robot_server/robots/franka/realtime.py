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


def classify_kernel(
    sys_realtime_text: str | None,
    uname_version: str,
    config_preempt_rt: bool | None = None,
    sys_realtime: Path = SYS_REALTIME,
    proc_config: Path = PROC_CONFIG,
) -> KernelRealtime:
    """The decision from what was read: ``/sys/kernel/realtime``'s text (None: absent), ``uname -v``
    and whether the kernel's config has CONFIG_PREEMPT_RT=y (None: not readable). One home for the
    backend's check and ``pde doctor``'s."""
    if (sys_realtime_text or "").strip() == "1":
        return KernelRealtime(True, f"{sys_realtime} = 1", libfranka_sees_it=True)
    if "PREEMPT_RT" in uname_version.split():
        return KernelRealtime(True, f"uname -v: {uname_version}", libfranka_sees_it=False)
    if config_preempt_rt:
        return KernelRealtime(True, f"{proc_config}: CONFIG_PREEMPT_RT=y", libfranka_sees_it=False)
    return KernelRealtime(
        False,
        f"no {sys_realtime} = 1, no PREEMPT_RT in `uname -v` ({uname_version}), "
        f"no CONFIG_PREEMPT_RT=y in {proc_config}",
        libfranka_sees_it=False,
    )


def kernel_realtime(
    sys_realtime: Path = SYS_REALTIME, uname_version: str | None = None, proc_config: Path = PROC_CONFIG
) -> KernelRealtime:
    """The running kernel's real-time status. Inside a container these are the host's kernel's."""
    try:
        sys_text: str | None = sys_realtime.read_text()
    except OSError:
        sys_text = None
    version = os.uname().version if uname_version is None else uname_version
    config: bool | None
    try:
        with gzip.open(proc_config, "rt") as f:
            config = any(line.strip() == "CONFIG_PREEMPT_RT=y" for line in f)
    except OSError:
        config = None
    return classify_kernel(sys_text, version, config, sys_realtime, proc_config)
