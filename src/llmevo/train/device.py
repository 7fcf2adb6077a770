"""Device selection: ``auto`` prefers CUDA, then Apple's MPS, then the CPU."""

from __future__ import annotations

import torch

from llmevo.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda", "mps")


def resolve_device(name: str) -> torch.device:
    if name not in DEVICES:
        raise ConfigError(f"unknown device '{name}'; expected one of: {', '.join(DEVICES)}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if not available[name]:
        raise ConfigError(f"device '{name}' is not available on this machine; use --device cpu or auto")
    return torch.device(name)


def accelerator_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"CUDA ({torch.cuda.get_device_name(device)})"
    if device.type == "mps":
        return "MPS"
    return "CPU"
