"""Which device we run on, described the same way for every result row."""
from __future__ import annotations

import os
import platform

import torch

from helpers.profile_env import results_only


def resolve_device(name: str | torch.device | None = None) -> torch.device:
    """Turn a profile's device setting into a ``torch.device``, failing clearly where it cannot run.

    ``None`` or ``"auto"`` picks CUDA when available, else CPU.
    """
    if name is None or str(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device {str(name)!r} is not supported here: use 'cpu', 'cuda' or 'auto'") from None
    if device.type == "cuda" and not torch.cuda.is_available() and results_only():
        # rendering committed GPU rows without the GPU: models are built on the meta device (no memory, no
        # compute), the result store answers every measurement, and a missing row is an error (helpers.results)
        return torch.device("meta")
    if device.type == "meta" and results_only():
        return device
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {str(name)!r} was requested (a GPU profile such as params/gpu.yaml) but this machine has no "
            "CUDA GPU visible to PyTorch. Run with the CPU profile (params/cpu.yaml, the notebooks' defaults) "
            "or on a machine with an NVIDIA GPU and a CUDA build of torch."
        )
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {str(name)!r} is not supported here: use 'cpu', 'cuda' or 'auto'")
    return device


def cpu_name() -> str:
    """The CPU model name where Linux tells it, else the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device: str | torch.device | None = None) -> dict:
    """Name, memory and capability of ``device`` (CPU: name, threads and cores).

    Keys: device, device_name, total_memory_bytes, compute_capability, cpu_threads, cpu_count.
    """
    dev = resolve_device(device)
    info = {
        "device": dev.type,
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }
    if dev.type == "meta":  # results-only rendering: the device of the rows is in the rows (device_name)
        info.update(device_name="no device (results only)", total_memory_bytes=None, compute_capability=None)
    elif dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info.update(
            device_name=props.name,
            total_memory_bytes=int(props.total_memory),
            compute_capability=f"{props.major}.{props.minor}",
        )
    else:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = None
        info.update(device_name=cpu_name(), total_memory_bytes=total, compute_capability=None)
    return info
