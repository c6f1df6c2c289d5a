"""Facts about the host that need no measurement: CPU model, cores, cache sizes, tracelink's cache folder."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cache_dir() -> Path:
    """tracelink's cache folder: ``$XDG_CACHE_HOME/tracelink``, else ``~/.cache/tracelink``."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tracelink"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine_cores() -> int:
    """CPUs this process may run on: IREE's local-task device starts one worker per CPU."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cache_size(level: int, default: int) -> int:
    """Size of this machine's level-``level`` data cache, from sysfs."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        try:
            if int((index / "level").read_text()) != level or (index / "type").read_text().strip() == "Instruction":
                continue
            text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
        return int(text.rstrip("KM")) * scale
    return default
