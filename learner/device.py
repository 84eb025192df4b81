"""Where the learner's policy runs: ``PDE_LEARNER_DEVICE`` = ``auto`` (CUDA when torch sees a GPU,
else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.

The spelling is checked when settings are read (no torch import); whether the device exists is
checked once at start-up by ``resolve_device``, with a message that says what to do.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICE_ENV = "PDE_LEARNER_DEVICE"
_SPEC = re.compile(r"auto|cpu|cuda(:\d+)?")

# The oldest Linux driver each CUDA major version runs on, from NVIDIA's CUDA Toolkit release notes
# (table "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version Compatibility"):
# torch's wheels carry their own CUDA runtime, so the driver is all the host has to match.
# torch 2.13 from PyPI is a CUDA 13 build (its Linux wheel requires nvidia-*-cu13).
CUDA_MIN_DRIVER: dict[int, tuple[int, ...]] = {13: (580,), 12: (525, 60, 13), 11: (450, 80, 2)}
NVIDIA_PROC_VERSION = Path("/proc/driver/nvidia/version")
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  ..." (or "Open Kernel Module for x86_64")
_PROC_DRIVER = re.compile(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)\s")


class DeviceUnavailableError(RuntimeError):
    """The configured device does not exist on this machine; the message says what to do."""


def check_device_spec(spec: str) -> str:
    """``spec`` normalised (trimmed, lower case), or ValueError naming the accepted values."""
    value = spec.strip().lower()
    if not _SPEC.fullmatch(value):
        raise ValueError(f"unknown device {spec!r}: use auto, cpu, cuda or cuda:N (N = GPU index)")
    return value


def resolve_device(spec: str, setting: str = DEVICE_ENV) -> torch.device:
    """The torch device for ``spec``; DeviceUnavailableError when CUDA is asked for and missing
    (``setting``: the variable the message names)."""
    import torch

    value = check_device_spec(spec)
    if value == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if value == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        build = (
            "a CPU-only build"
            if torch.version.cuda is None
            else f"built for CUDA {torch.version.cuda} but finds no GPU: "
            + driver_advice(torch.version.cuda, find_nvidia_driver())
        )
        raise DeviceUnavailableError(
            f"{setting}={spec} but torch sees no CUDA device: torch {torch.__version__} is {build}. "
            "Run the learner where a GPU is visible (docker: the GPU image with the compose GPU "
            "reservation and the NVIDIA container toolkit; otherwise a CUDA build of torch and the "
            f"NVIDIA driver), or set {setting}=cpu (or auto) to run on the CPU"
        )
    index = int(value.partition(":")[2] or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceUnavailableError(
            f"{setting}={spec} but torch sees {count} CUDA device(s), cuda:0 to cuda:{count - 1}: "
            f"pick one of those (CUDA_VISIBLE_DEVICES renumbers them from 0)"
        )
    return torch.device("cuda", index)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(f"{part:02d}" if i == 2 else str(part) for i, part in enumerate(version))


def find_nvidia_driver(
    proc_version: Path = NVIDIA_PROC_VERSION, nvidia_smi: str | None = "nvidia-smi"
) -> str | None:
    """The loaded NVIDIA kernel driver's version ("550.54.14"), or None when none is visible. The
    /proc file comes from the host's kernel, so a container sees it even without a GPU reserved."""
    try:
        match = _PROC_DRIVER.search(proc_version.read_text())
    except OSError:
        match = None
    if match:
        return match.group(1)
    exe = shutil.which(nvidia_smi) if nvidia_smi else None
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[0] if out and re.fullmatch(r"\d+\.\d+(\.\d+)?", out[0]) else None


def driver_advice(cuda_version: str, driver: str | None) -> str:
    """What to do when torch built for ``cuda_version`` sees no GPU, given the driver found."""
    need = CUDA_MIN_DRIVER.get(_version(cuda_version)[0])
    need_text = f"driver >= {_dotted(need)}" if need else "an NVIDIA driver that supports it"
    if driver is None:
        return (
            f"no NVIDIA driver is visible here ({NVIDIA_PROC_VERSION} and nvidia-smi absent); "
            f"CUDA {cuda_version} needs {need_text}"
        )
    if need and _version(driver) < need:
        return (
            f"the NVIDIA driver here is {driver}, older than CUDA {cuda_version} needs ({need_text}): "
            f"upgrade the host's driver to {_dotted(need)} or newer, or build the learner image with a "
            "torch for an older CUDA (docker/Dockerfile.gpu, TORCH_INDEX_URL)"
        )
    return (
        f"the NVIDIA driver {driver} is recent enough for CUDA {cuda_version} ({need_text}), so the "
        "GPU is hidden from this process (CUDA_VISIBLE_DEVICES, the container's GPU reservation?)"
    )


def describe_device(device: torch.device) -> str:
    """Which device the process got, for its start-up log: on CUDA the GPU's name, memory and the
    container's visible-device setting, so a wrong ``device_ids`` shows at a glance."""
    import os

    import torch

    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    visible = ", ".join(
        f"{var}={os.environ[var]}"
        for var in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
        if var in os.environ
    )
    # The UUID is what `nvidia-smi -L` lists beside each physical GPU's index (getattr: older
    # torch builds lack it); inside a container the one reserved GPU is always cuda:0.
    uuid = getattr(props, "uuid", None)
    return (
        f"cuda:{index} = {props.name} ({props.total_memory / 2**30:.0f} GiB"
        f"{f', UUID GPU-{uuid}' if uuid else ''}){'; ' + visible if visible else ''}"
    )
