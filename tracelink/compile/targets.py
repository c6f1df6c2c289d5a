"""Which code IREE compiles for the device a profile runs on, and how.

The runtime device (``--device`` of IREE's tools) decides the compiler's target backend: the CPU
devices run llvm-cpu code, Vulkan runs SPIR-V, CUDA runs PTX and HIP runs AMDGPU code (IREE's
``rocm`` backend). A GPU backend may take a chip (``--iree-cuda-target=sm_80``,
``--iree-rocm-target=gfx942``, ``--iree-vulkan-target=rdna3``) and target features; HIP has no
default chip, so it needs one.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracelink.errors import TracelinkError


@dataclass(frozen=True)
class DeviceTarget:
    """A runtime device and the compiler target that runs on it."""

    device: str  # --device of IREE's runtime tools
    driver: str  # the HAL driver behind it (``--dump_devices=DRIVER``)
    backend: str  # the compiler's target backend
    target_device: str  # --iree-hal-target-device
    chip_flag: str | None = None  # the backend's chip option, when it has one
    features_flag: str | None = None
    chip_required: bool = False
    # The collector that reads the device's own dispatch timestamps (IREE 3.13): Vulkan writes them to
    # the HAL profiler; CUDA and HIP implement no HAL profiling, their tracy build records GPU zones.
    timed_by: str = "hal"
    why_timed_by: str = ""

    @property
    def is_gpu(self) -> bool:
        return self.backend != "llvm-cpu"


TARGET_FLAGS = ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu")
DEVICE_TARGETS: dict[str, DeviceTarget] = {
    "local-task": DeviceTarget("local-task", "local-task", "llvm-cpu", "local"),
    "local-sync": DeviceTarget("local-sync", "local-sync", "llvm-cpu", "local"),
    "vulkan": DeviceTarget("vulkan", "vulkan", "vulkan-spirv", "vulkan", "--iree-vulkan-target", "--iree-vulkan-target-features",
                           why_timed_by="its Vulkan driver writes device-timestamped dispatch events to the HAL profiler and no Tracy GPU zones"),
    "cuda": DeviceTarget("cuda", "cuda", "cuda", "cuda", "--iree-cuda-target", "--iree-cuda-target-features", timed_by="tracy",
                         why_timed_by="its CUDA driver has no HAL-native profiling; its tracy-enabled build records a GPU zone per kernel"),
    "hip": DeviceTarget("hip", "hip", "rocm", "hip", "--iree-rocm-target", "--iree-rocm-target-features", chip_required=True, timed_by="tracy",
                        why_timed_by="its HIP driver has no HAL-native profiling; its tracy-enabled build records a GPU zone per kernel"),
}
DEVICES = tuple(DEVICE_TARGETS)


def device_target(device: str) -> DeviceTarget:
    """The target of a device name (``local-task``, ``local-sync``, ``vulkan``, ``cuda``, ``hip``)."""
    if device not in DEVICE_TARGETS:
        raise TracelinkError(f"unknown device '{device}' (devices: {', '.join(DEVICES)})")
    return DEVICE_TARGETS[device]


def target_flags(device: str, target_cpu: str, chip: str | None, features: str | None) -> list[str]:
    """The iree-compile flags that build for ``device``: the CPU for llvm-cpu, a chip and features for a GPU."""
    target = device_target(device)
    if not target.is_gpu:
        if chip or features:
            raise TracelinkError(f"--target-chip and --target-features are for GPU devices; {device} takes --target-cpu")
        return [*TARGET_FLAGS, f"--iree-llvmcpu-target-cpu={target_cpu}"]
    if target.chip_required and not chip:
        raise TracelinkError(f"--device {device} needs --target-chip (the GPU's architecture, e.g. gfx942 for an MI300)")
    flags = [f"--iree-hal-target-device={target.target_device}"]
    if chip:
        flags.append(f"{target.chip_flag}={chip}")
    if features:
        flags.append(f"{target.features_flag}={features}")
    return flags
