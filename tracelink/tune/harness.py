"""A verification entry point added to a benchmark program: run the dispatch once on given buffers.

The benchmark function IREE dumps runs the dispatch on uninitialized memory and returns nothing, so it
cannot check numerics. ``tracelink_verify`` takes one buffer view per binding (inputs and outputs, in
binding order), dispatches the executable once over them and returns views of the written bindings.
It is built as HAL-level IR next to the benchmark function, so the same compiled candidate is both
benchmarked and verified. Inputs are seeded random arrays saved as .npy, fed with iree-run-module.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from tracelink import TracelinkError
from tracelink.tune.dispatch import ELEMENT_TYPES, Dispatch

VERIFY_FUNCTION = "tracelink_verify"


def verify_function_text(dispatch: Dispatch, device_symbol: str) -> str:
    """MLIR text of the ``util.func`` that dispatches once over caller-provided buffers."""
    target = f"@{dispatch.executable}::@{dispatch.variant}::@{dispatch.export}"
    args = ", ".join(f"%view{b.index}: !hal.buffer_view" for b in dispatch.bindings)
    outputs = [b for b in dispatch.bindings if not b.readonly]
    if not outputs:
        raise TracelinkError(f"{dispatch.export}: no binding is written; nothing to verify")
    lines = [
        f"util.func public @{VERIFY_FUNCTION}({args}) -> ({', '.join('!hal.buffer_view' for _ in outputs)}) "
        "attributes {iree.abi.stub} {",
        f"  %device, %affinity = hal.device.resolve on(#hal.device.affinity<@{device_symbol}>) : !hal.device, i64",
        "  %c0 = arith.constant 0 : index",
    ]
    for b in dispatch.bindings:
        lines.append(f"  %buffer{b.index} = hal.buffer_view.buffer<%view{b.index} : !hal.buffer_view> : !hal.buffer")
        lines.append(f"  %size{b.index} = arith.constant {b.buffer_size} : index")
        lines.append(f"  %offset{b.index} = arith.constant {b.offset} : index")
        lines.append(f"  %view_size{b.index} = arith.constant {b.byte_size} : index")
    lines += [
        '  %cmd = hal.command_buffer.create device(%device : !hal.device) mode("OneShot|AllowInlineExecution") '
        "categories(Dispatch) affinity(%affinity) : !hal.command_buffer",
        f"  %wx, %wy, %wz = hal.executable.calculate_workgroups device(%device : !hal.device) target({target}) "
        ": index, index, index",
        f"  %exe = hal.executable.lookup device(%device : !hal.device) executable(@{dispatch.executable}) : !hal.executable",
        f"  %function = hal.executable.lookup.function target(%exe : !hal.executable) function({target}) : i64",
        "  hal.command_buffer.dispatch<%cmd : !hal.command_buffer> target(%exe : !hal.executable)[%function] "
        "workgroups([%wx, %wy, %wz]) bindings([",
        ",\n".join(f"    (%buffer{b.index} : !hal.buffer)[%c0, %size{b.index}]" for b in dispatch.bindings),
        '  ]) flags("None")',
        '  hal.command_buffer.execution_barrier<%cmd : !hal.command_buffer> source("Dispatch|CommandRetire") '
        'target("CommandIssue|Dispatch") flags("None")',
        "  hal.command_buffer.finalize<%cmd : !hal.command_buffer>",
        "  %no_wait = util.null : !hal.fence",
        '  %fence = hal.fence.create device(%device : !hal.device) flags("None") : !hal.fence',
        "  hal.device.queue.execute<%device : !hal.device> affinity(%affinity) wait(%no_wait) signal(%fence) "
        'commands(%cmd) flags("None")',
        "  %forever = arith.constant -1 : i32",
        '  %status = hal.fence.await until([%fence]) timeout_millis(%forever) flags("None") : i32',
        '  util.status.check_ok %status, "tracelink: verification dispatch failed"',
        "  %encoding = hal.encoding_type<dense_row_major> : i32",
    ]
    results = []
    for b in outputs:
        hal_type = ELEMENT_TYPES[b.element_type][1]
        dims = []
        for axis, extent in enumerate(b.shape):
            lines.append(f"  %dim{b.index}_{axis} = arith.constant {extent} : index")
            dims.append(f"%dim{b.index}_{axis}")
        lines.append(f"  %type{b.index} = hal.element_type<{hal_type}> : i32")
        lines.append(
            f"  %result{b.index} = hal.buffer_view.create buffer(%buffer{b.index} : !hal.buffer)"
            f"[%offset{b.index}, %view_size{b.index}] "
            f"shape([{', '.join(dims)}]) type(%type{b.index}) encoding(%encoding) : !hal.buffer_view"
        )
        results.append(f"%result{b.index}")
    lines.append(f"  util.return {', '.join(results)} : {', '.join('!hal.buffer_view' for _ in outputs)}")
    lines.append("}")
    return "\n".join(lines)


def check_supported(dispatch: Dispatch) -> None:
    for b in dispatch.bindings:
        if b.element_type not in ELEMENT_TYPES or ELEMENT_TYPES[b.element_type][0] is None:
            raise TracelinkError(f"{dispatch.export}: binding {b.index} has element type {b.element_type}, "
                                 "which verification cannot feed")


def write_inputs(dispatch: Dispatch, directory: Path) -> list[Path]:
    """Seeded random contents for every binding (small integers, or floats in [-1, 1]), as .npy files.

    A binding whose view starts at an offset gets a flat array covering the offset too."""
    check_supported(dispatch)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(zlib.crc32(dispatch.export.encode()))
    paths = []
    for b in dispatch.bindings:
        dtype = np.dtype(ELEMENT_TYPES[b.element_type][0])
        if b.offset % dtype.itemsize:
            raise TracelinkError(f"{dispatch.export}: binding {b.index} starts at byte {b.offset}, "
                                 f"not a multiple of its {b.element_type} elements; verification cannot feed it")
        shape = b.shape if b.offset == 0 else (b.buffer_size // dtype.itemsize,)
        if dtype.kind == "f":
            data = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
        else:
            data = rng.integers(-8, 8, size=shape).astype(dtype)
        path = directory / f"binding{b.index}.npy"
        np.save(path, data)
        paths.append(path)
    return paths


def output_count(dispatch: Dispatch) -> int:
    return sum(1 for b in dispatch.bindings if not b.readonly)


def compare(outputs: list[np.ndarray], references: list[np.ndarray], reduction: int) -> str | None:
    """None when ``outputs`` match ``references``, else a short description of the first mismatch.

    Floating-point results may differ by reassociation of the reduction: the tolerance grows with
    the reduction length and the precision of the type. Integers must match exactly.
    """
    for i, (out, ref) in enumerate(zip(outputs, references)):
        if out.shape != ref.shape:
            return f"output {i} has shape {out.shape}, expected {ref.shape}"
        if ref.dtype.kind != "f":
            mismatched = int(np.count_nonzero(out != ref))
            if mismatched:
                return f"output {i}: {mismatched} of {ref.size} elements differ"
            continue
        if np.isnan(out).sum() != np.isnan(ref).sum():
            return f"output {i}: NaN where the default config has none"
        eps = float(np.finfo(ref.dtype).eps)
        scale = float(np.nanmax(np.abs(ref))) if ref.size else 1.0
        tolerance = 32 * eps * np.sqrt(max(reduction, 1)) * max(scale, 1.0)
        error = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        worst = float(np.nanmax(error)) if error.size else 0.0
        if worst > tolerance:
            bad = int(np.count_nonzero(error > tolerance))
            return f"output {i}: {bad} of {ref.size} elements differ (max error {worst:.3g} > {tolerance:.3g})"
    return None
