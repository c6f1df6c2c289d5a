"""Inputs of the profiled function: read its signature, generate seeded random values, check user values.

The signature comes from the ``input`` phase, where every frontend's function takes builtin tensor
types (so torch, StableHLO and linalg inputs all look the same there).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from iree.compiler import ir

from tracelink.errors import TracelinkError, first_line
from tracelink.atomic import make_directory, write_atomic
from tracelink.ir_utils import new_context, parse_file, static_shape
from tracelink.provenance.regions import code_blocks

NUMPY_DTYPES = {
    "f16": np.float16, "f32": np.float32, "f64": np.float64,
    "i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "si8": np.int8, "si16": np.int16, "si32": np.int32, "si64": np.int64,
    "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
}


@dataclass(frozen=True)
class InputSpec:
    """One argument of the function: its shape (-1 for dynamic sizes) and MLIR element type."""

    index: int
    shape: tuple[int, ...]
    element_type: str

    def mlir_type(self) -> str:
        return "x".join([*("?" if d < 0 else str(d) for d in self.shape), self.element_type])


UNKNOWN_TYPE = "?"  # an argument the program never reads, behind an ABI wrapper that does not record its type


def read_signature(input_phase: Path, function: str) -> list[InputSpec]:
    """Every argument of ``function`` as the compiler's ``input`` phase declares it, used or not.

    After the input phase, linalg, StableHLO and TOSA functions take builtin tensors; torch functions
    already take ``!hal.buffer_view`` arguments, each imported as a tensor by a ``hal.tensor.import``
    (in the function or its ``$async`` body). An argument no op uses is still one the runtime expects.
    """
    module = parse_file(input_phase, new_context())
    blocks = dict(code_blocks(module))
    if function not in blocks:
        public = [name for name, op in blocks.items() if "sym_visibility" in op.attributes and op.attributes["sym_visibility"].value == "public" and "$" not in name]
        raise TracelinkError(f"no function '{function}' in the program (public functions: {', '.join(public) or 'none'})")
    imported = imported_types(blocks.get(function + "$async", blocks[function]))
    specs = []
    for index, arg_type in enumerate(blocks[function].attributes["function_type"].value.inputs):
        arg_type = imported.get(index, arg_type) if str(arg_type) == "!hal.buffer_view" else arg_type
        if isinstance(arg_type, ir.ShapedType):
            specs.append(InputSpec(index, static_shape(arg_type) or (), str(arg_type.element_type)))
        elif str(arg_type) == "!hal.buffer_view":
            specs.append(InputSpec(index, (), UNKNOWN_TYPE))
        else:  # a scalar argument (i32, f32, ...)
            specs.append(InputSpec(index, (), str(arg_type)))
    return specs


def imported_types(function: ir.Operation) -> dict[int, ir.Type]:
    """Argument number -> tensor type, for the ``hal.tensor.import`` ops at the top of a function body."""
    found = {}
    for op in function.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "hal.tensor.import" and isinstance(op.operands[0], ir.BlockArgument):
            found.setdefault(op.operands[0].arg_number, op.results[0].type)
    return found


def save_npy(path: Path, values: np.ndarray) -> None:
    """``values`` as ``.npy`` at ``path`` whatever its suffix (np.save appends ``.npy`` to a path's name)."""
    with path.open("wb") as file:
        np.save(file, values)


def generate_inputs(specs: list[InputSpec], directory: Path, seed: int = 0) -> list[str]:
    """Write seeded random values for every argument as ``input_<i>.npy``; return ``@path`` flags.

    ``directory`` is made inside the profile directory above its parent (``OUT/artifacts/inputs``)."""
    make_directory(directory, inside=directory.parent.parent)
    rng = np.random.default_rng(seed)
    flags = []
    for spec in specs:
        if spec.element_type == UNKNOWN_TYPE:
            raise TracelinkError(f"input {spec.index} is never used by the program and its type is not recorded: pass every input with --input")
        if any(d < 0 for d in spec.shape):
            raise TracelinkError(f"input {spec.index} has a dynamic shape ({spec.mlir_type()}): pass it with --input")
        dtype = NUMPY_DTYPES.get(spec.element_type)
        if dtype is None:
            raise TracelinkError(f"input {spec.index} has element type {spec.element_type}, which tracelink cannot generate: pass it with --input")
        if np.issubdtype(dtype, np.floating):
            values = rng.uniform(-1.0, 1.0, size=spec.shape).astype(dtype)
        elif dtype is np.bool_:
            values = rng.integers(0, 2, size=spec.shape).astype(np.bool_)
        else:  # small non-negative integers stay valid as indices (token ids, gather positions)
            values = rng.integers(0, 8, size=spec.shape).astype(dtype)
        path = directory / f"input_{spec.index}.npy"
        write_atomic(path, lambda temporary, values=values: save_npy(temporary, values))
        flags.append(f"@{path}")
    return flags


def check_inputs(values: list[str], specs: list[InputSpec]) -> None:
    """Check user ``--input`` values (iree-run-module syntax) against the signature, one clear line each."""
    if len(values) != len(specs):
        expected = ", ".join(s.mlir_type() for s in specs)
        raise TracelinkError(f"{len(values)} inputs given, the function takes {len(specs)} ({expected})")
    for value, spec in zip(values, specs):
        given = described_type(value)
        if given is not None and spec.element_type != UNKNOWN_TYPE and given != (spec.shape, spec.element_type) and not dynamic_match(given, spec):
            raise TracelinkError(f"input {spec.index}: expected {spec.mlir_type()}, got {value.split('=')[0] if '=' in value else value} ({'x'.join(map(str, [*given[0], given[1]]))})")


def described_type(value: str) -> tuple[tuple[int, ...], str] | None:
    """Shape and element type of an input value: from a ``.npy`` file or a ``AxBxT=...`` prefix."""
    if value.startswith("@") and value.endswith(".npy"):
        path = Path(value[1:])
        if not path.is_file():
            raise TracelinkError(f"{path}: input file not found")
        try:  # mapped, not read: the header and the file size are checked, the data stays on disk
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as error:
            raise TracelinkError(f"{path}: not a valid .npy file ({first_line(error)})") from None
        element = next((name for name, dtype in NUMPY_DTYPES.items() if np.dtype(dtype) == array.dtype and not name.startswith("si")), str(array.dtype))
        return tuple(array.shape), element
    if "=" in value or "x" in value:
        parts = value.split("=", 1)[0].split("x")
        try:
            return tuple(int(p) for p in parts[:-1]), parts[-1]
        except ValueError:
            return None
    return None


def dynamic_match(given: tuple[tuple[int, ...], str], spec: InputSpec) -> bool:
    """Whether a concrete shape fits a signature with dynamic sizes (signed/signless ints alike)."""
    shape, element = given
    same_element = element.removeprefix("s") == spec.element_type.removeprefix("s")
    return same_element and len(shape) == len(spec.shape) and all(d < 0 or d == g for d, g in zip(spec.shape, shape))
