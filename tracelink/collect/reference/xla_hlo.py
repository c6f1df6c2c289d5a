"""XLA's compiled module as the ops each of its thunks runs, each with its Python stack and its work.

jaxlib's ``HloModule`` binding names instructions and opcodes but gives no instruction's metadata
(``op_name``, ``stack_frame_id``), shape or called computations, and the module's text prints each
stack frame's parent one too high; so the module is read from its serialized ``HloModuleProto``
through a descriptor, made in code, of the few fields read here (numbers from XLA's ``hlo.proto`` and
``xla_data.proto``; every other field is skipped as unknown).

A thunk runs one instruction of a computation that is not fused; a fusion's thunk runs the ops of its
fused computation. Its time is split over those ops by their work: a dot or a convolution by its FLOPs,
any other op by its output's elements (one operation each), and an op that only names or reshapes data
(a parameter, constant, bitcast, broadcast, reshape, tuple) by none. A fusion of such ops alone is its
own instruction's. Control flow (``while``, ``conditional``, ``call``) runs none itself: its body's
thunks have events of their own, inside its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from google.protobuf.message import Message

from tracelink.compile.proto_schema import INT32, INT64, MESSAGE, STRING, Schema, message_class

# the subset of XLA's protos read here, in messages of tracelink's own names
SCHEMA: Schema = {
    "Module": [("name", 1, STRING, False, ""), ("computations", 3, MESSAGE, True, "Computation"),
               ("stack_frame_index", 17, MESSAGE, False, "StackFrameIndex")],
    "Computation": [("name", 1, STRING, False, ""), ("instructions", 2, MESSAGE, True, "Instruction"), ("id", 5, INT64, False, "")],
    "Instruction": [
        ("name", 1, STRING, False, ""), ("opcode", 2, STRING, False, ""), ("shape", 3, MESSAGE, False, "Shape"),
        ("metadata", 7, MESSAGE, False, "Metadata"), ("convolution_dimension_numbers", 16, MESSAGE, False, "ConvolutionDimensions"),
        ("dot_dimension_numbers", 30, MESSAGE, False, "DotDimensions"), ("id", 35, INT64, False, ""),
        ("operand_ids", 36, INT64, True, ""), ("called_computation_ids", 38, INT64, True, ""),
    ],
    "Shape": [("dimensions", 3, INT64, True, "")],
    "Metadata": [("op_name", 2, STRING, False, ""), ("stack_frame_id", 15, INT32, False, "")],
    "DotDimensions": [("lhs_contracting_dimensions", 1, INT64, True, "")],
    "ConvolutionDimensions": [("kernel_output_feature_dimension", 4, INT64, False, "")],
    "StackFrameIndex": [("file_names", 1, STRING, True, ""), ("file_locations", 3, MESSAGE, True, "FileLocation"),
                        ("stack_frames", 4, MESSAGE, True, "StackFrame")],
    "FileLocation": [("file_name_id", 1, INT32, False, ""), ("line", 3, INT32, False, "")],
    "StackFrame": [("file_location_id", 1, INT32, False, ""), ("parent_frame_id", 2, INT32, False, "")],
}
NO_WORK = {"parameter", "constant", "bitcast", "broadcast", "reshape", "tuple", "get-tuple-element"}
CONTROL_FLOW = {"while", "conditional", "call"}


@dataclass(frozen=True)
class Op:
    """One op a thunk runs: its stack (innermost first, ``file:line`` joined by ``;``), its component (the
    ``op_name``'s scope), its name, and its work (the share of the thunk's time it takes)."""

    stack: str
    component: str
    op: str
    work: float


@cache
def module_class() -> type:
    """The message class of :data:`SCHEMA`'s ``Module``, wire-compatible with XLA's ``HloModuleProto``."""
    return message_class("tracelink_xla", SCHEMA, "Module")


def thunk_ops(serialized: bytes) -> tuple[str, dict[str, list[Op]]]:
    """The module's name (the profiler's ``hlo_module``) and, per instruction name (its ``hlo_op``), the
    ops its thunk runs."""
    module = module_class().FromString(serialized)
    instructions = {instruction.id: instruction for computation in module.computations for instruction in computation.instructions}
    computations = {computation.id: computation for computation in module.computations}
    index = module.stack_frame_index
    ops = {}
    for instruction in instructions.values():
        if instruction.opcode in CONTROL_FLOW:
            ops[instruction.name] = []
            continue
        inner = [op_of(member, instructions, index) for member in fused_members(instruction, computations)]
        worked = [op for op in inner if op.work > 0]
        ops[instruction.name] = worked or [op_of(instruction, instructions, index, work=1.0)]
    return module.name, ops


def fused_members(instruction: Message, computations: dict[int, Message]) -> Iterator[Message]:
    """The instructions a thunk of ``instruction`` runs: a fusion's fused ones (nested fusions opened),
    else itself."""
    if instruction.opcode != "fusion":
        yield instruction
        return
    for computation_id in instruction.called_computation_ids:
        for member in computations[computation_id].instructions:
            yield from fused_members(member, computations)


def op_of(instruction: Message, instructions: dict[int, Message], index: Message, work: float | None = None) -> Op:
    """``instruction`` as an op: its stack and scope from its metadata, its work (``work`` when given)."""
    scope, _, name = instruction.metadata.op_name.rpartition("/")
    return Op(stack_of(index, instruction.metadata.stack_frame_id), scope, name or instruction.opcode,
              work_of(instruction, instructions) if work is None else work)


def stack_of(index: Message, frame_id: int) -> str:
    """The Python stack of frame ``frame_id`` (1-based, 0 for none), innermost first, as ``file:line``
    joined by ``;``."""
    frames = []
    while 0 < frame_id <= len(index.stack_frames) and len(frames) < len(index.stack_frames):  # a malformed parent cannot loop
        frame = index.stack_frames[frame_id - 1]
        location = index.file_locations[frame.file_location_id - 1]
        frames.append(f"{index.file_names[location.file_name_id - 1]}:{location.line}")
        frame_id = frame.parent_frame_id
    return ";".join(frames)


def work_of(instruction: Message, instructions: dict[int, Message]) -> float:
    """The operations ``instruction`` does: 2·K per output element for a dot or convolution (K the
    contracted size), one per output element for any other op, none for :data:`NO_WORK`."""
    if instruction.opcode in NO_WORK:
        return 0.0
    elements = float(math.prod(instruction.shape.dimensions))
    if instruction.opcode == "dot":
        lhs = instructions[instruction.operand_ids[0]].shape.dimensions
        return 2.0 * elements * math.prod(lhs[dim] for dim in instruction.dot_dimension_numbers.lhs_contracting_dimensions)
    if instruction.opcode == "convolution":
        kernel = instructions[instruction.operand_ids[1]].shape.dimensions
        return 2.0 * elements * math.prod(kernel) / max(kernel[instruction.convolution_dimension_numbers.kernel_output_feature_dimension], 1)
    return elements
