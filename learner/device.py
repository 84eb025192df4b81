"""Where the learner's policy runs: ``PDE_LEARNER_DEVICE`` = ``auto`` (CUDA when torch sees a GPU,
else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.

The spelling is checked when settings are read (no torch import); whether the device exists is
checked once at start-up by ``resolve_device``, with a message that says what to do.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICE_ENV = "PDE_LEARNER_DEVICE"
_SPEC = re.compile(r"auto|cpu|cuda(:\d+)?")


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
            else f"built for CUDA {torch.version.cuda} but finds no GPU (driver, CUDA_VISIBLE_DEVICES?)"
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
