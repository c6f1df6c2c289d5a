"""Exports of the dumped executables: root op, shapes, tile configuration and dump files.

Read from the configured sources (``configured_<module>_<executable>.mlir``, the module's own symbol
name or ``module`` when it has none), where codegen has put a
``lowering_config`` on the ops it tiles; the root op is the heaviest of those.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from iree.compiler import ir

from tracelink.compile.benchmarks import benchmark_dump_name
from tracelink.ir_utils import attr, new_context, parse_file, symbol_name, walk
from tracelink.provenance.regions import iteration_space, tensor_bytes


@dataclass
class ExportInfo:
    """One dispatch function as compiled."""

    name: str
    executable: str
    root_op: str
    shapes: str  # operand and result types of the root op
    lowering_config: str
    workgroup_size: str
    source_file: str  # the executable's dumped source, relative to the artifacts directory
    configured_file: str
    benchmark_file: str  # its benchmark dump, written when a command first needs it (tracelink.compile.benchmarks)
    target_file: str = ""  # a GPU export's target code in MLIR (SPIR-V for Vulkan), when dumped
    binding_bytes: float | None = None  # bytes of every buffer view it binds, once; None when one is dynamic


CONFIGURED = "configured_"  # IREE names an executable's configured dump after its source dump, with this prefix


def source_dumps(executables_dir: Path) -> list[Path]:
    """The executables' dumped sources (``<stem>.mlir``), one per configured dump (``configured_<stem>.mlir``)."""
    return [configured.with_name(configured.name.removeprefix(CONFIGURED)) for configured in sorted(executables_dir.glob(f"{CONFIGURED}*.mlir"))]


def read_exports(executables_dir: Path, artifacts: Path, context: ir.Context | None = None) -> dict[str, ExportInfo]:
    """Every export in the configured executable dumps, by export name; their target code is added by
    :func:`with_target_code` once the hal phase has serialized the executables."""
    context = context or new_context()
    exports: dict[str, ExportInfo] = {}
    for configured in sorted(executables_dir.glob(f"{CONFIGURED}*.mlir")):
        stem = configured.name.removeprefix(CONFIGURED)[: -len(".mlir")]
        module = parse_file(configured, context)
        functions = {symbol_name(op): op for op in walk(module.operation) if op.name == "func.func"}
        variant = ""
        for op in walk(module.operation):
            if op.name == "hal.executable":
                executable = symbol_name(op) or stem
            if op.name == "hal.executable.variant":
                variant = symbol_name(op) or ""
            if op.name != "hal.executable.export":
                continue
            name = symbol_name(op) or "?"
            root = root_op(functions.get(name))
            size = attr(op, "workgroup_size")
            exports[name] = ExportInfo(
                name=name,
                executable=executable,
                root_op=root.name if root else "unknown",
                shapes=op_shapes(root) if root else "",
                lowering_config=str(attr(root, "lowering_config")) if root else "",
                workgroup_size=str(size) if size is not None else "",
                source_file=str((executables_dir / f"{stem}.mlir").relative_to(artifacts)),
                configured_file=str(configured.relative_to(artifacts)),
                benchmark_file=str((executables_dir / benchmark_dump_name(stem, variant)).relative_to(artifacts)) if variant else "",
                binding_bytes=binding_bytes(functions.get(name)),
            )
    return exports


def with_target_code(exports: dict[str, ExportInfo], executables_dir: Path, artifacts: Path) -> dict[str, ExportInfo]:
    """``exports`` with each one's target code in MLIR, where a GPU build's intermediates dump has it
    (``<stem>_<export>.spirv.mlir`` for Vulkan), relative to ``artifacts``."""
    found = {}
    for name, info in exports.items():
        path = executables_dir / f"{Path(info.source_file).stem}_{name}.spirv.mlir"
        found[name] = replace(info, target_file=str(path.relative_to(artifacts))) if path.is_file() else info
    return found


def root_op(function: ir.Operation | None) -> ir.Operation | None:
    """The heaviest op carrying a lowering configuration (codegen's root), else the heaviest linalg op."""
    if function is None:
        return None
    configured = [op for op in walk(function) if "lowering_config" in op.attributes]
    candidates = configured or [op for op in walk(function) if op.name.startswith(("linalg.", "iree_linalg_ext."))]
    return max(candidates, key=iteration_space, default=None)


def binding_bytes(function: ir.Operation | None) -> float | None:
    """Bytes of the buffer views a dispatch function opens (``hal.interface.binding.subspan``), each once:
    its compulsory traffic, read from the executable alone. None when a view is dynamic."""
    if function is None:
        return None
    sizes = [tensor_bytes(op.results[0].type) for op in walk(function) if op.name == "hal.interface.binding.subspan"]
    return sum(size for size, _ in sizes) if sizes and all(exact for _, exact in sizes) else None


def op_shapes(op: ir.Operation) -> str:
    """``(in types) -> (out types)`` of an op, types as MLIR prints them."""
    ins = ", ".join(str(v.type) for v in op.operands)
    outs = ", ".join(str(r.type) for r in op.results)
    return f"({ins}) -> ({outs})"
