"""A ``torch.nn.Module`` as its user runs it: eager (or ``torch.compile``), under ``torch.inference_mode()``,
on the threads IREE's run has, and once more under ``torch.profiler`` with Python stacks.

The profiler's event tree (``experimental_event_tree``) gives every op and Python call its parent; a
Python call's ``caller`` is the calling frame at the calling line, so walking an op's parents gives its
stack innermost first, as the exported program's locations do. A module's ``forward`` call names the
module, whose path (``encoder.layer.0``) is the component the export gives its ops. Each event's self
time (its time less its children's) is one sample: the aggregate stage folds samples into lines by the
same library-frame rules as IREE's dispatches.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

from tracelink.collect.reference.samples import per_call_medians
from tracelink.compile.frontends.torch_export import scoped_name
from tracelink.atomic import make_directory
from tracelink.errors import TracelinkError

C_COMPILERS = ("g++", "c++", "clang++")


class TorchRunner:
    """The module in eager mode (``compiled``: through ``torch.compile``), on ``threads`` intra-op threads."""

    def __init__(self, module: torch.nn.Module, args: tuple, threads: int, compiled: bool = False, log: Path | None = None) -> None:
        if compiled and not (os.environ.get("CXX") or any(shutil.which(name) for name in C_COMPILERS)):
            raise TracelinkError("torch.compile (Inductor) needs a C++ compiler on PATH (g++ or clang++), and none was found")
        self._saved_threads = torch.get_num_threads()
        torch.set_num_threads(threads)
        self.module, self.args = module, args
        self.callable = torch.compile(module) if compiled else module
        self.compiled = compiled
        self.log = log  # where the profiler's own lines go (its C++ side prints each start and stop on stderr)

    def call(self) -> object:
        with torch.inference_mode():
            return self.callable(*self.args)

    def outputs(self) -> list[np.ndarray]:
        """The call's tensors in pytree order (a ``ModelOutput``'s fields, a tuple's items)."""
        leaves = torch.utils._pytree.tree_leaves(self.call())
        return [leaf.detach().cpu().numpy() for leaf in leaves if isinstance(leaf, torch.Tensor)]

    def profile(self, calls: int) -> tuple[pd.DataFrame, float] | None:
        """Samples per call of ``calls`` profiled calls, and the profiled call's mean ns; None for Inductor,
        whose generated kernels have no line of the model."""
        if self.compiled:
            return None
        with stderr_to(self.log), torch.inference_mode(), profile(activities=[ProfilerActivity.CPU], with_stack=True,
                                                                 record_shapes=True) as profiler:
            for _ in range(calls):
                self.module(*self.args)
        # each call is the module's own call event: what runs under it is the model's, and the frames above it are tracelink's
        roots = [event for event in walk(profiler.profiler.kineto_results.experimental_event_tree())
                 if getattr(getattr(event.extra_fields, "module", None), "self_ptr", None) == id(self.module)]
        paths = {id(module): path for path, module in self.module.named_modules()}
        return per_call_medians([list(samples(root, paths)) for root in roots]), float(np.median([root.duration_time_ns for root in roots]))

    def close(self) -> None:
        torch.set_num_threads(self._saved_threads)


@contextlib.contextmanager
def stderr_to(path: Path | None) -> Iterator[None]:
    """Send what is written to file descriptor 2 meanwhile to ``path`` (kept as it is without one)."""
    if path is None:
        yield
        return
    make_directory(path.parent, inside=path.parent.parent.parent)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with path.open("ab") as log:
            os.dup2(log.fileno(), 2)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def walk(events: list) -> Iterator:
    """Every event of the tree, depth first."""
    pending = list(reversed(events))
    while pending:
        event = pending.pop()
        yield event
        pending.extend(reversed(event.children))


def samples(root: object, paths: dict[int, str]) -> Iterator[tuple[str, str, str, float]]:
    """(stack, component, op, self ns) of each event under ``root``: the stack innermost first as
    ``file:line`` joined by ``;``, the component the innermost module's path."""
    pending = [(root, (), "")]
    while pending:
        event, stack, module = pending.pop()
        fields = event.extra_fields
        caller = getattr(fields, "caller", None)
        if caller is not None and caller.line_number > 0 and event is not root:
            stack = (f"{source_file(caller.file_name)}:{caller.line_number}", *stack)
        info = getattr(fields, "module", None)
        if info is not None and info.self_ptr in paths:
            module = paths[info.self_ptr]
        self_ns = event.duration_time_ns - sum(child.duration_time_ns for child in event.children)
        if self_ns > 0:
            component = scoped_name({"": (module, None)}, "op").rpartition("/")[0]  # the export's component of an op there
            yield ";".join(stack), component, event.name, float(self_ns)
        pending.extend((child, stack, module) for child in event.children)


@functools.lru_cache(maxsize=4096)
def source_file(name: str) -> str:
    """The absolute path of a file the profiler names: it cuts the longest ``sys.path`` or site-packages
    prefix (``transformers/models/bert/modeling_bert.py``), so the first of those prefixes, longest
    first, under which the file exists gives it back; else the name as given."""
    if os.path.isabs(name):
        return name
    from torch.profiler.python_tracer import _prefix_regex  # the prefixes the profiler cuts, in its own order

    return next((prefix + name for prefix in _prefix_regex() if os.path.isfile(prefix + name)), name)
