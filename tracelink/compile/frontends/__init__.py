"""Profile a JAX function or a PyTorch module directly: load it, export it to MLIR with source locations.

A Python model is ``model.py:make`` on the command line, where ``make()`` returns ``(fn_or_module,
example_args)`` or a dict of such named entry points (each a function of one program), or the same
given to :func:`tracelink.profile`. tracelink tells the two
frameworks apart by type (a ``torch.nn.Module`` is PyTorch, any other callable is traced by JAX),
exports it with every op located at the user's Python call stack under its name scope or module path,
and saves the example arguments as the run's inputs (``artifacts/inputs/input_<i>.npy``). The exported
program is then compiled and profiled like any ``.mlir``. The frameworks are optional extras, imported
only here and only when a model of theirs is profiled.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracelink.errors import TracelinkError, first_line
from tracelink.compile.frontends.extras import EXTRAS
from tracelink.profile_dir import files

if TYPE_CHECKING:
    import numpy as np

EXPORTED_NAME = files.EXPORTED


@dataclass
class PythonModel:
    """A JAX-traceable function or a ``torch.nn.Module`` with the example arguments to export it with."""

    target: Any
    args: tuple
    origin: str  # where it came from, for the profile's summary: ``/path/model.py:make``
    source_dirs: tuple[Path, ...] = ()  # directories of the user's code, whose files the report may embed
    # several named entry points (``{"prefill": (fn, args), "decode": (fn, args)}``), each a function of one
    # program; ``target`` and ``args`` are the first's. Empty for one.
    entries: dict[str, tuple[Any, tuple]] = field(default_factory=dict)


@dataclass
class ExportedModel:
    """An exported model: the MLIR program and the ``@file`` inputs saved from its example arguments."""

    program: Path
    inputs: list[str]
    origin: str
    source_dirs: tuple[Path, ...] = field(default_factory=tuple)
    framework: str = ""  # the framework and its version: "jax 0.10.2", "torch 2.13.0+cpu"
    seconds: float = 0.0  # how long the export took
    decomposed: tuple[str, ...] = ()  # ops decomposed on request (``--decompose``)
    parameters: list[str] = field(default_factory=list)  # ``--parameters`` values of its weights' archive
    parameter_bytes: int = 0
    # ops decomposed because IREE could not lower them (:mod:`tracelink.compile.frontends.lowering`)
    decomposed_automatically: tuple[str, ...] = ()
    functions: dict[str, list[str]] = field(default_factory=dict)  # several entry points: name → its ``@file`` inputs

    def manifest_entry(self) -> dict:
        """What the manifest (and profile.json) records about the export: ``decomposed`` lists every op decomposed,
        requested or not, as ``--decompose`` takes them; ``decomposed_automatically`` those IREE could not lower."""
        return {"model": self.origin, "framework": self.framework, "seconds": round(self.seconds, 4), "inputs": len(self.inputs),
                "decomposed": [*self.decomposed, *self.decomposed_automatically],
                "decomposed_automatically": list(self.decomposed_automatically), "functions": list(self.functions),
                "parameters": self.parameters, "parameter_bytes": self.parameter_bytes}


def is_python_entry(program: Path | str) -> bool:
    """Whether ``program`` names a Python model: ``model.py:make`` (or ``model.py``, meaning ``:make``)."""
    return entry_parts(program)[0].endswith(".py")


def entry_parts(program: Path | str) -> tuple[str, str]:
    """``model.py:make`` as its file and function name (``make`` when no colon follows the file)."""
    text = str(program)
    if ":" not in Path(text).name:
        return text, "make"
    file, name = text.rsplit(":", 1)
    return file, name


def load_entry(program: Path | str) -> PythonModel:
    """Import ``model.py`` by path and call its ``make()`` (or the function named after the colon).

    This runs the user's code, as running their program would. Only the file's own directory is put
    on ``sys.path`` (for its sibling modules), and only while it is imported.
    """
    file, name = entry_parts(program)
    path = Path(file).resolve()
    if not path.is_file():
        raise TracelinkError(f"{path}: Python model file not found")
    if not name.isidentifier():
        raise TracelinkError(f"{path}: '{name}' is not a function name (expected model.py:make)")
    spec = importlib.util.spec_from_file_location(f"tracelink_model_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise TracelinkError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would: TorchDynamo looks the module up by name
    sys.path.insert(0, str(path.parent))
    try:
        with as_script(path, "importing it"):
            spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[spec.name]
        missing = error.name if isinstance(error, ModuleNotFoundError) else None
        if missing in EXTRAS:
            raise TracelinkError(f"{path}: needs {missing}: pip install 'tracelink[{EXTRAS[missing]}]'") from None
        if isinstance(error, TracelinkError):
            raise
        raise TracelinkError(f"{path}: importing it raised {type(error).__name__}: {first_line(error)}") from None
    finally:
        sys.path.remove(str(path.parent))
    make = getattr(module, name, None)
    if not callable(make):
        raise TracelinkError(f"{path}: no function '{name}' (it must return (fn_or_module, example_args))")
    try:
        with as_script(path, f"{name}()"):
            made = make()
    except TracelinkError:
        raise
    except Exception as error:
        raise TracelinkError(f"{path}: {name}() raised {type(error).__name__}: {first_line(error)}") from None
    entries = entry_points(made, f"{path}: {name}()")
    (target, args), = list(entries.values())[:1]
    return PythonModel(target, args, f"{path}:{name}", (path.parent,), entries if isinstance(made, dict) else {})


def entry_points(made: Any, where: str) -> dict[str, tuple[Any, tuple]]:
    """What ``make()`` returned as named entry points: ``(fn_or_module, example_args)`` is one (``main``), a
    dict of them names several."""
    if not isinstance(made, dict):
        return {"main": one_entry(made, where)}
    if not made:
        raise TracelinkError(f"{where} returned no entry point (an empty dict)")
    entries = {}
    for name, entry in made.items():
        if not (isinstance(name, str) and name.isidentifier()):
            raise TracelinkError(f"{where}: entry point {name!r} is not a name (it names a function of the program)")
        entries[name] = one_entry(entry, f"{where}['{name}']")
    if not all(is_torch_module(target) for target, _ in entries.values()):
        raise TracelinkError(f"{where}: entry points are exported from torch modules only (a JAX function is one entry point)")
    return entries


def one_entry(made: Any, where: str) -> tuple[Any, tuple]:
    """``(fn_or_module, example_args)``, the arguments as a tuple."""
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise TracelinkError(f"{where} must return (fn_or_module, example_args) or a dict of them, got {type(made).__name__}")
    target, args = made
    return target, tuple(args) if isinstance(args, (tuple, list)) else (args,)


@contextlib.contextmanager
def as_script(path: Path, what: str) -> Iterator[None]:
    """Run the user's file as running it would: ``sys.argv`` is its path alone (a module-level ``argparse``
    sees none of tracelink's options), its prints go to stderr, and ``sys.exit`` is an error, not
    tracelink's exit (a CI script would read status 0 with no profile as success)."""
    saved = sys.argv
    sys.argv = [str(path)]
    try:
        with stdout_to_stderr():
            yield
    except SystemExit as exit_:
        code = 0 if exit_.code is None else exit_.code
        status = f"status {code}" if isinstance(code, int) else first_line(exit_)
        raise TracelinkError(f"{path}: {what} exited ({status}) before returning a model") from None
    finally:
        sys.argv = saved


def python_model(target: Callable | dict, args: tuple) -> PythonModel:
    """A model handed over in Python (``tracelink.profile(fn, *args)``, or a dict of named entry points
    ``{"prefill": (fn, args), ...}`` without ``args``), named after where it (the first) is defined."""
    entries = entry_points(target, "tracelink.profile") if isinstance(target, dict) else {}
    if entries and args:
        raise TracelinkError("tracelink.profile: entry points carry their own example arguments; pass the dict alone")
    if entries:
        first, first_args = next(iter(entries.values()))
        return replace(python_model(first, first_args), entries=entries)
    defined = type(target) if is_torch_module(target) else target
    try:
        file = inspect.getsourcefile(defined)
    except TypeError:  # a builtin or C extension: no file
        file = None
    name = getattr(defined, "__qualname__", type(defined).__name__)
    origin = f"{Path(file).resolve()}:{name}" if file else name
    return PythonModel(target, tuple(args), origin, (Path(file).resolve().parent,) if file else ())


def is_torch_module(target: object) -> bool:
    """Whether ``target`` is a ``torch.nn.Module``, without importing torch when the user did not."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(target, torch.nn.Module)


def export_model(model: PythonModel, artifacts: Path, decompose: tuple[str, ...] = (), automatic: tuple[str, ...] = ()) -> ExportedModel:
    """Export ``model`` into ``artifacts/exported.mlir`` and save its example arguments as inputs (each entry
    point's under ``inputs/<name>/``).

    ``decompose`` names ATen ops to decompose with torch's own decompositions (PyTorch models only),
    ``automatic`` those decomposed because IREE could not lower them.
    """
    started = time.perf_counter()
    parameters: list[str] = []
    parameter_bytes = 0
    entries = model.entries or {"main": (model.target, model.args)}
    with stdout_to_stderr():
        if is_torch_module(model.target):
            from tracelink.compile.frontends.torch_export import export_torch
            from tracelink.compile.frontends.torch_parameters import SCOPE

            framework = "torch"
            exported = export_torch(entries, artifacts / EXPORTED_NAME, model.origin, (*decompose, *automatic))
            arrays, parameter_bytes = exported.arrays, exported.parameter_bytes
            parameters = [f"{SCOPE}={exported.parameters.resolve()}"] if exported.parameters else []
        else:
            if decompose:
                raise TracelinkError(f"{model.origin}: --decompose applies to PyTorch models (this is a JAX function)")
            from tracelink.compile.frontends.jax_export import export_jax

            framework = "jax"
            arrays = {"main": export_jax(model.target, model.args, artifacts / EXPORTED_NAME, model.origin)}
    functions = {name: save_inputs(arrays[name], artifacts / files.INPUTS / name) for name in model.entries}
    inputs = [] if model.entries else save_inputs(arrays["main"], artifacts / files.INPUTS)
    from importlib import metadata  # here, not at start-up (before every compile)

    return ExportedModel(
        artifacts / EXPORTED_NAME, inputs, model.origin, model.source_dirs,
        f"{framework} {metadata.version(framework)}", time.perf_counter() - started, tuple(decompose), parameters,
        parameter_bytes, tuple(automatic), functions,
    )


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what the model's code and its libraries print (Python's and C's stdout) to stderr meanwhile.

    stdout belongs to tracelink's own output (``--json``'s document, the summary's tables).
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def save_inputs(arrays: list[np.ndarray], directory: Path) -> list[str]:
    """Write each argument as ``input_<i>.npy`` (the names generated inputs take); return ``@path`` flags."""
    import numpy as np  # not at the top: `tracelink profile` imports this module before starting the compiler

    directory.mkdir(parents=True, exist_ok=True)
    flags = []
    for index, array in enumerate(arrays):
        path = directory / f"input_{index}.npy"
        np.save(path, np.asarray(array), allow_pickle=False)
        flags.append(f"@{path.resolve()}")
    return flags
