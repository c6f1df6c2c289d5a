"""An entry point added to a benchmark program: run the dispatch on given buffers, a given number of times.

The benchmark function IREE dumps runs the dispatch on uninitialized memory and returns nothing, so it
can neither check numerics nor time the dispatch on the data it sees in the program (timings on
uninitialized memory are not the program's). ``tracelink_run`` takes one buffer view per binding (in
binding order) and a repeat count, dispatches the executable that many times over them with the
benchmark's push constants, and returns views of the written bindings. It is built as HAL-level IR next
to the benchmark function, so the same compiled candidate is verified (count 1) and timed (count n) on
the same seeded inputs, saved as .npy and fed with iree-run-module / iree-benchmark-module.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from tracelink.errors import TracelinkError
from tracelink.atomic import make_directory, write_atomic
from tracelink.collect.inputs import save_npy
from tracelink.tune.dispatch import ELEMENT_TYPES, Binding, Dispatch

RUN_FUNCTION = "tracelink_run"


def _dispatch_lines(dispatch: Dispatch) -> list[str]:
    """The repeated dispatch and its barrier, over the caller's buffers with the benchmark's push constants."""
    constants = [f"  %k{i} = arith.constant {value} : i32" for i, value in enumerate(dispatch.constants)]
    with_constants = f" constants([{', '.join(f'%k{i}' for i in range(len(constants)))}])" if constants else ""
    return [
        *constants,
        "  %c1 = arith.constant 1 : index",
        "  scf.for %i = %c0 to %count step %c1 {",
        "    hal.command_buffer.dispatch<%cmd : !hal.command_buffer> target(%exe : !hal.executable)[%function] "
        f"workgroups([%wx, %wy, %wz]){with_constants} bindings([",
        ",\n".join(f"      (%buffer{b.index} : !hal.buffer)[%c0, %size{b.index}]" for b in dispatch.buffers),
        '    ]) flags("None")',
        '    hal.command_buffer.execution_barrier<%cmd : !hal.command_buffer> source("Dispatch|CommandRetire") '
        'target("CommandIssue|Dispatch") flags("None")',
        "  }",
    ]


def _result_lines(view: int, binding: Binding) -> list[str]:
    """A buffer view over one written binding view (its offset, size, shape and element type)."""
    name = f"{binding.index}_{view}"
    lines = [
        f"  %offset{name} = arith.constant {binding.offset} : index",
        f"  %view_size{name} = arith.constant {binding.byte_size} : index",
    ]
    dims = []
    for axis, extent in enumerate(binding.shape):
        lines.append(f"  %dim{name}_{axis} = arith.constant {extent} : index")
        dims.append(f"%dim{name}_{axis}")
    lines.append(f"  %type{name} = hal.element_type<{ELEMENT_TYPES[binding.element_type][1]}> : i32")
    lines.append(
        f"  %result{name} = hal.buffer_view.create buffer(%buffer{binding.index} : !hal.buffer)"
        f"[%offset{name}, %view_size{name}] shape([{', '.join(dims)}]) type(%type{name}) encoding(%encoding) : !hal.buffer_view"
    )
    return lines


def run_function_text(dispatch: Dispatch, device_symbol: str) -> str:
    """MLIR text of the ``util.func`` that dispatches ``count`` times over caller-provided buffers."""
    target = f"@{dispatch.executable}::@{dispatch.variant}::@{dispatch.export}"
    buffers = dispatch.buffers
    args = ", ".join([*(f"%view{b.index}: !hal.buffer_view" for b in buffers), "%count_i32: i32"])
    outputs = [b for b in dispatch.bindings if not b.readonly]
    if not outputs:
        raise TracelinkError(f"{dispatch.export}: no binding is written; nothing to verify")
    result_types = ", ".join("!hal.buffer_view" for _ in outputs)
    lines = [
        f"util.func public @{RUN_FUNCTION}({args}) -> ({result_types}) attributes {{iree.abi.stub}} {{",
        f"  %device, %affinity = hal.device.resolve on(#hal.device.affinity<@{device_symbol}>) : !hal.device, i64",
        "  %c0 = arith.constant 0 : index",
        "  %count = arith.index_cast %count_i32 : i32 to index",
    ]
    for b in buffers:
        lines.append(f"  %buffer{b.index} = hal.buffer_view.buffer<%view{b.index} : !hal.buffer_view> : !hal.buffer")
        lines.append(f"  %size{b.index} = arith.constant {dispatch.buffer_size(b.index)} : index")
    lines += [
        '  %cmd = hal.command_buffer.create device(%device : !hal.device) mode("OneShot|AllowInlineExecution") '
        "categories(Dispatch) affinity(%affinity) : !hal.command_buffer",
        f"  %wx, %wy, %wz = hal.executable.calculate_workgroups device(%device : !hal.device) target({target}) "
        ": index, index, index",
        f"  %exe = hal.executable.lookup device(%device : !hal.device) executable(@{dispatch.executable}) : !hal.executable",
        f"  %function = hal.executable.lookup.function target(%exe : !hal.executable) function({target}) : i64",
        *_dispatch_lines(dispatch),
        "  hal.command_buffer.finalize<%cmd : !hal.command_buffer>",
        "  %no_wait = util.null : !hal.fence",
        '  %fence = hal.fence.create device(%device : !hal.device) flags("None") : !hal.fence',
        "  hal.device.queue.execute<%device : !hal.device> affinity(%affinity) wait(%no_wait) signal(%fence) "
        'commands(%cmd) flags("None")',
        "  %forever = arith.constant -1 : i32",
        '  %status = hal.fence.await until([%fence]) timeout_millis(%forever) flags("None") : i32',
        '  util.status.check_ok %status, "tracelink: dispatch failed"',
        "  %encoding = hal.encoding_type<dense_row_major> : i32",
    ]
    for view, binding in enumerate(outputs):
        lines += _result_lines(view, binding)
    results = ", ".join(f"%result{b.index}_{view}" for view, b in enumerate(outputs))
    lines.append(f"  util.return {results} : {result_types}")
    lines.append("}")
    return "\n".join(lines)


def check_supported(dispatch: Dispatch) -> None:
    for b in dispatch.bindings:
        if b.element_type not in ELEMENT_TYPES or ELEMENT_TYPES[b.element_type][0] is None:
            raise TracelinkError(f"{dispatch.export}: binding {b.index} has element type {b.element_type}, "
                                 "which verification cannot feed")


def write_inputs(dispatch: Dispatch, directory: Path) -> list[Path]:
    """Seeded random contents for every binding (small integers, or floats in [-1, 1]), as .npy files.

    A binding whose views start at an offset, or that has several views, gets a flat array covering
    its whole range, of its first view's element type."""
    check_supported(dispatch)
    make_directory(directory)
    rng = np.random.default_rng(zlib.crc32(dispatch.export.encode()))
    paths = []
    for b in dispatch.buffers:
        dtype = np.dtype(ELEMENT_TYPES[b.element_type][0])
        views = [v for v in dispatch.bindings if v.index == b.index]
        if any(v.offset % dtype.itemsize for v in views):
            raise TracelinkError(f"{dispatch.export}: binding {b.index} has a view at a byte offset that is "
                                 f"not a multiple of its {b.element_type} elements; verification cannot feed it")
        size = dispatch.buffer_size(b.index)
        shape = b.shape if len(views) == 1 and b.offset == 0 and size == b.byte_size else (-(-size // dtype.itemsize),)
        if dtype.kind == "f":
            data = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
        else:
            data = rng.integers(-8, 8, size=shape).astype(dtype)
        path = directory / f"binding{b.index}.npy"
        write_atomic(path, lambda temporary, data=data: save_npy(temporary, data))
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
