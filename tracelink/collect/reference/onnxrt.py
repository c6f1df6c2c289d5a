"""An ``.onnx`` model as its user runs it: onnxruntime's CPU provider on IREE's inputs and thread count,
and once more with onnxruntime's node profile.

Each node of the session is renamed to a token with its place in the model's node order before the
session is made (the model's computation is untouched), so a node's time lands on the place tracelink's
ONNX import gives the node as its location's line (:mod:`tracelink.compile.onnx_import`): the same key
as IREE's dispatches. The profiled session runs one optimization level below the timed one (extended:
fusions, no NCHWc layout pass, which renames every node it rewrites); its split is scaled to the timed
call. A node onnxruntime makes itself keeps its own name and is listed as the reference's alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pandas as pd

from tracelink.atomic import make_directory
from tracelink.errors import TracelinkError

NODE_TOKEN = "tracelink_node_{}"
NODE_TOKEN_AT = re.compile(r"tracelink_node_(\d+)")
KERNEL_SUFFIX = "_kernel_time"


class OnnxRuntimeRunner:
    """A CPU session of the model at ``path`` on ``threads`` intra-op threads, fed IREE's ``.npy`` inputs."""

    def __init__(self, path: Path, inputs: tuple[str, ...], threads: int, directory: Path) -> None:
        self.path, self.threads, self.directory = Path(path).resolve(), threads, directory
        self.model = onnx.load(str(self.path))
        self.kinds = [node.op_type for node in self.model.graph.node]
        for index, node in enumerate(self.model.graph.node):
            node.name = NODE_TOKEN.format(index)
        self.session = self.session_of(profiled=False)
        self.feeds = feeds_of(self.session, inputs, self.path)

    def session_of(self, profiled: bool) -> onnxruntime.InferenceSession:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = self.threads, 1
        # onnxruntime logs to the terminal itself, naming the model's initializers and nodes as they are (an
        # escape sequence in a name would reach it); its errors come back as exceptions, printed escaped
        options.log_severity_level = 4
        if profiled:
            make_directory(self.directory, inside=self.directory.parent.parent)
            options.enable_profiling = True
            # the layout pass (NCHWc) of the default level renames the nodes it rewrites, losing their place
            # in the model: the split is profiled one level below, and scaled to the default level's call
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
            options.profile_file_prefix = str(self.directory / "onnxruntime_profile")
        return onnxruntime.InferenceSession(self.model.SerializeToString(), options, providers=["CPUExecutionProvider"])

    def call(self) -> object:
        return self.session.run(None, self.feeds)

    def outputs(self) -> list[np.ndarray]:
        return [np.asarray(value) for value in self.call()]

    def profile(self, calls: int) -> tuple[pd.DataFrame, float]:
        """Samples per node (per call) of ``calls`` profiled runs, after one unprofiled warm-up run."""
        session = self.session_of(profiled=True)
        session.run(None, self.feeds)
        events = []
        try:
            for _ in range(calls):
                session.run(None, self.feeds)
        finally:
            events = json.loads(Path(session.end_profiling()).read_text())
        runs = [event for event in events if event.get("cat") == "Session" and event.get("name") == "model_run"]
        counted = runs[-calls:]
        start = min((event["ts"] for event in counted), default=0)
        nodes = [event for event in events if event.get("cat") == "Node" and str(event.get("name", "")).endswith(KERNEL_SUFFIX)
                 and event["ts"] >= start]
        rows = [self.sample(event) for event in nodes]
        frame = pd.DataFrame(rows, columns=["stack", "component", "op", "self_ns"])
        frame = frame.groupby(["stack", "component", "op"], as_index=False, sort=False)["self_ns"].sum()
        frame["self_ns"] /= calls
        return frame, sum(event["dur"] * 1e3 for event in counted) / max(len(counted), 1)

    def sample(self, event: dict) -> tuple[str, str, str, float]:
        """A node's time at its place in the model (``model.onnx:<1-based index>``), or under its own name."""
        name = str(event["name"]).removesuffix(KERNEL_SUFFIX)
        kind = str(event.get("args", {}).get("op_name", ""))
        token = NODE_TOKEN_AT.search(name)
        if token is None:
            return "", "", f"onnxruntime.{kind}:{name}", float(event["dur"]) * 1e3
        index = int(token.group(1))
        return f"{self.path}:{index + 1}", "", f"onnx.{self.kinds[index]}", float(event["dur"]) * 1e3

    def close(self) -> None:
        pass


def feeds_of(session: onnxruntime.InferenceSession, inputs: tuple[str, ...], path: Path) -> dict[str, np.ndarray]:
    """The session's inputs from IREE's ``@file.npy`` input values, in the graph's input order."""
    names = [value.name for value in session.get_inputs()]
    files = [value[1:] for value in inputs if value.startswith("@") and value.endswith(".npy")]
    if len(files) != len(names) or len(files) != len(inputs):
        raise TracelinkError(f"{path}: onnxruntime needs each of the {len(names)} inputs as an .npy file (--input=@file.npy)")
    return {name: np.load(file) for name, file in zip(names, files)}
