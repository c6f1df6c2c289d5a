"""The framework's own run beside IREE's: what the user runs today, timed on the same inputs and threads.

A reference is one way the framework runs the model: ``eager`` and ``inductor`` (``torch.compile``) for a
``torch.nn.Module``, ``xla`` (``jax.jit`` on CPU) for a JAX function, ``onnxruntime`` (its CPU provider)
for an ``.onnx`` model. Each is timed whole in a race against IREE's build (:mod:`.race`), its outputs
are compared with IREE's, and where the framework says which op ran on which line (torch's profiler,
onnxruntime's node profile, XLA's trace of its thunks) its time per op is kept as samples the aggregate
stage folds into lines.

This module is light to import (``tracelink profile`` checks ``--compare`` before the compiler starts);
the frameworks load only when a reference runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracelink.errors import TracelinkError

if TYPE_CHECKING:
    import pandas as pd

FRAMEWORK_OF = {"eager": "torch", "inductor": "torch", "xla": "jax", "onnxruntime": "onnx"}
LABELS = {"eager": "PyTorch eager", "inductor": "torch.compile (Inductor)", "xla": "JAX jit (XLA)", "onnxruntime": "onnxruntime"}
DEFAULTS = {"torch": ("eager",), "jax": ("xla",), "onnx": ("onnxruntime",)}
FRAMEWORK_NAMES = {"torch": "a PyTorch model", "jax": "a JAX function", "onnx": "an .onnx model"}
DEFAULT, NONE = "default", "none"


def parse_compare(text: str) -> tuple[str, ...]:
    """``--compare``'s value: ``none``, or a comma-separated list of :data:`FRAMEWORK_OF`'s names."""
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if names == (NONE,) or names == (DEFAULT,):
        return names
    unknown = [name for name in names if name not in FRAMEWORK_OF]
    if unknown or not names:
        raise TracelinkError(f"--compare {text}: unknown reference '{(unknown or [text])[0]}' "
                             f"(choose none, or from {', '.join(FRAMEWORK_OF)})")
    return names


def chosen_references(compare: tuple[str, ...], framework: str | None, origin: str) -> tuple[str, ...]:
    """The references to run for a model of ``framework`` (None: an MLIR program, which has none):
    the framework's own runtime by default; an explicit choice must fit the framework."""
    if compare == (NONE,):
        return ()
    if compare == (DEFAULT,):
        return DEFAULTS.get(framework or "", ())
    for name in compare:
        if FRAMEWORK_OF[name] != framework:
            has = FRAMEWORK_NAMES.get(framework or "", "an MLIR program, which has no framework to compare with")
            raise TracelinkError(f"{origin}: --compare {name} applies to {FRAMEWORK_NAMES[FRAMEWORK_OF[name]]}; this is {has}")
    return compare


@dataclass
class Subject:
    """What a reference runs: the framework's model (a module, a function or the ``.onnx`` path), its
    example arguments (an ``.onnx`` model takes IREE's input files) and the references chosen."""

    framework: str
    target: Any
    args: tuple
    references: tuple[str, ...]
    entries: dict[str, tuple[Any, tuple]] = field(default_factory=dict)  # several entry points: each function's own

    def for_function(self, function: str) -> Subject | None:
        """What the references run for one function of the program: the entry point of that name when the
        model has several (None for a function it does not name), else the model."""
        if not self.entries:
            return self
        return replace(self, target=self.entries[function][0], args=self.entries[function][1]) if function in self.entries else None


@dataclass(frozen=True)
class IreeBuild:
    """IREE's side of the race and of the output comparison."""

    vmfb: Path
    function: str
    inputs: list[str]
    parameters: list[str]
    timeout_s: float
    seconds_per_call: float = 0.0  # from the profiled run: sizes the race's rounds with the reference's own time


@dataclass
class ReferenceResult:
    """One reference's run: its time per call from the race, its outputs against IREE's, and its samples
    (per op: ``stack``, ``component``, ``op``, ``self_ns`` per call) where the framework names lines."""

    name: str
    threads: int
    status: str = "measured"  # or "failed"
    error: str | None = None
    rounds: dict = field(default_factory=dict)  # the race: "iree_ns" and "reference_ns" per round, "calls_per_round"
    outputs: dict = field(default_factory=dict)  # {"agree": bool, "detail": str}
    profiled_ns_per_call: float | None = None  # the profiled call(s), profiler overhead included
    per_line: str = "none"  # "ops" when samples name lines or nodes, else why not
    samples: pd.DataFrame | None = None



def subject_of(target: Any, args: tuple, framework: str | None, compare: tuple[str, ...], origin: str,
               entries: dict[str, tuple[Any, tuple]] | None = None) -> Subject | None:
    """What the chosen references run (None when none is chosen); a choice that does not fit the
    framework is an error here, before anything is written."""
    references = chosen_references(compare, framework, origin)
    return Subject(framework or "", target, args, references, dict(entries or {})) if references else None
