"""Profiling a JAX function or a PyTorch module directly: the user's Python lines, callers and module paths.

The models are written here: a Flax MLP profiled from its file (`model.py:make`, as the command line
does), a small torch CNN through `tracelink.profile(module, x)`, and a torchvision-style ResNet-18
(random weights) through the real `tracelink` command. Marker comments (`# FC1`) name the lines the
checks expect. The framework's own run is off here (`compare=("none",)`): tests/test_reference.py covers it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from rich.console import Console

import tracelink
from tests.conftest import run_profile
from tests.test_bad_input import error_line, run_cli
from tracelink.errors import TracelinkError
from tracelink.compile.frontends import load_entry
from tracelink.compile.frontends.torch_export import exported_program, python_frames
from tracelink.compile.frontends.extras import EXTRAS, require
from tracelink.profile_dir.profile import Profile, load_profile
from tracelink.compare.diff import run_parameters

# tracelink's own files (not the checkout's folder, which may be named tracelink too)
PACKAGE = str(Path(tracelink.__file__).resolve().parent) + "/"

JAX_MODEL = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    import flax.linen as nn


    def mix(x, kernel):
        return x + jnp.tanh(x @ kernel)  # HELPER


    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(384, name="fc1")(x))  # FC1
            x = nn.relu(nn.Dense(384, name="fc2")(x))  # FC2
            return nn.Dense(16, name="head")(x)  # HEAD


    def forward(params, kernel, x, scale):
        h = MLP().apply(params, x)  # APPLY
        h = mix(h, kernel)  # MIX1
        return mix(h, kernel) * scale  # MIX2


    def make():
        x = jax.random.normal(jax.random.PRNGKey(0), (64, 256))
        params = MLP().init(jax.random.PRNGKey(1), x)
        kernel = jax.random.normal(jax.random.PRNGKey(2), (16, 16)) * 0.1
        return forward, (params, kernel, x, 0.5)  # a Python float: a 0-d f32 input
''')


def marked_lines(path: Path) -> dict[str, int]:
    """Marker comment (``# FC1``) -> its 1-based line in ``path``."""
    return {
        line.rsplit("# ", 1)[1].strip(): number
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "  # " in line and line.rsplit("# ", 1)[1].strip().isupper()
    }


def user_lines(profile: Profile, path: Path) -> pd.DataFrame:
    """The profile's lines of ``path``, by user self time (hottest first)."""
    lines = profile.source_lines
    return lines[lines["file"] == str(path)].sort_values("user_self_ns", ascending=False).set_index("line")


def components(profile: Profile) -> pd.Series:
    """Self time per component (the contract: a source op's name without its last '/' segment)."""
    ops = profile.source_ops.dropna(subset=["name"])
    scope = ops["name"].str.rpartition("/")[0].replace("", "(no scope)")
    return ops.groupby(scope)["total_ns"].sum().sort_values(ascending=False)


def iree_outputs(profile: Profile) -> list[np.ndarray]:
    """The compiled program run with IREE's Python runtime on the inputs and parameter archives the profile ran with."""
    import iree.runtime as rt

    inputs = [np.load(flag.removeprefix("@")) for flag in profile.summary["inputs"]]
    config = rt.Config("local-task")
    parameters = []
    for value in run_parameters(profile):
        scope, path = value.split("=", 1)
        index = rt.ParameterIndex()
        index.load(path)
        parameters.append(rt.create_io_parameters_module(config.vm_instance, index.create_provider(scope=scope)))
    program = rt.VmModule.mmap(config.vm_instance, str(profile.artifacts / "app.vmfb"))
    modules = rt.load_vm_modules(*parameters, rt.create_hal_module(config.vm_instance, config.device), program, config=config)
    results = getattr(modules[-1], profile.summary["function"])(*inputs)
    results = results if isinstance(results, (tuple, list)) else [results]
    return [np.asarray(result.to_host() if hasattr(result, "to_host") else result) for result in results]


def check_separate_callers(lines: pd.DataFrame, helper: int, first: int, second: int) -> None:
    """Two calls of one helper: each calling line has inclusive time from its own call sites only."""
    assert lines.loc[helper, "user_self_ns"] > 0
    for caller in (first, second):
        assert lines.loc[caller, "inclusive_ns"] > lines.loc[caller, "user_self_ns"]  # the helper's time is inside
    sites = [set(str(lines.loc[caller, "call_site_ids"]).split(";")) for caller in (first, second)]
    assert sites[0] and sites[1] and not sites[0] & sites[1]
    assert set(str(lines.loc[helper, "call_site_ids"]).split(";")) >= sites[0] | sites[1]


@pytest.fixture(scope="module")
def jax_profile(tmp_path_factory) -> tuple[Profile, Path]:
    base = tmp_path_factory.mktemp("jax_mlp")
    model = base / "mlp_model.py"
    model.write_text(JAX_MODEL)
    return run_profile(Path(f"{model}:make"), base / "out", repetitions=5), model


def test_jax_hottest_lines_are_the_layer_calls(jax_profile):
    profile, model = jax_profile
    marks = marked_lines(model)
    lines = user_lines(profile, model)
    assert set(lines.index[:2]) == {marks["FC1"], marks["FC2"]}
    assert lines.loc[marks["HEAD"], "user_self_ns"] > 0
    assert profile.summary["coverage"]["dispatch_time_attributed_share"] == 1.0
    # Flax's own lines are library code: they hold self time, never user self time.
    library = profile.source_lines[profile.source_lines["library"]]
    assert library["file"].str.contains("/flax/").any() and (library["user_self_ns"] == 0).all()
    # The apply line is an outer caller of every layer; nothing above forward() (the export) is recorded.
    layers = lines.loc[[marks["FC1"], marks["FC2"], marks["HEAD"]], "user_self_ns"].sum()
    assert lines.loc[marks["APPLY"], "inclusive_ns"] >= layers * (1 - 1e-9)
    assert not profile.source_lines["file"].str.startswith(PACKAGE).any()


def test_jax_helper_calls_are_separate_callers(jax_profile):
    profile, model = jax_profile
    marks = marked_lines(model)
    check_separate_callers(user_lines(profile, model), marks["HELPER"], marks["MIX1"], marks["MIX2"])


def test_jax_name_scopes_group_the_time(jax_profile):
    profile, _ = jax_profile
    names = {data.get("name") for _, data in profile.graph.nodes(data=True)}
    assert {"jit(forward)/MLP/fc1/dot_general", "jit(forward)/MLP/fc2/dot_general"} <= names
    by_component = components(profile)
    assert set(by_component.index[:2]) == {"jit(forward)/MLP/fc1", "jit(forward)/MLP/fc2"}
    assert by_component.iloc[:2].sum() > 0.8 * by_component.sum()


def test_jax_outputs_equal_the_iree_run(jax_profile):
    profile, model = jax_profile
    loaded = load_entry(f"{model}:make")
    saved = sorted((profile.artifacts / "inputs").glob("input_*.npy"))
    assert [f"@{path.resolve()}" for path in saved] == profile.summary["inputs"] and len(saved) == 9
    scale = np.load(saved[-1])
    assert scale.shape == () and scale.dtype == np.float32 and scale == 0.5
    expected = np.asarray(loaded.target(*loaded.args))
    (actual,) = iree_outputs(profile)
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


def test_jax_profile_reloads_from_its_directory(jax_profile):
    profile, model = jax_profile
    reloaded = load_profile(profile.directory)
    assert reloaded.summary["model"] == f"{model}:make"
    export = reloaded.manifest["export"]
    assert export["model"] == f"{model}:make" and export["framework"].startswith("jax 0.10") and export["inputs"] == 9
    assert reloaded.manifest["input"] == str((profile.artifacts / "exported.mlir").resolve())
    assert str(model.parent.resolve()) in reloaded.summary["allowed_roots"]


# ---- PyTorch: a small CNN given to tracelink.profile ----

nn = torch.nn


class Block(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))  # BLOCK_CONV


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 24, 3, padding=1)
        self.layers = nn.ModuleList([Block(24), Block(24)])
        self.shared = Block(24)
        self.head = nn.Linear(24, 10)

    def forward(self, x):
        x = self.stem(x)  # STEM
        for layer in self.layers:
            x = layer(x)  # LAYERS
        x = self.shared(x)  # SHARED1
        x = self.shared(x)  # SHARED2
        return self.head(x.mean((2, 3)))  # HEAD


@pytest.fixture(scope="module")
def torch_profile(tmp_path_factory) -> tuple[Profile, nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    module, x = SmallCNN().eval(), torch.randn(1, 3, 48, 48)
    out = tmp_path_factory.mktemp("torch_cnn")
    return tracelink.profile(module, x, out=out, repetitions=5, compare=("none",), console=Console(quiet=True)), module, x


def test_a_bare_torch_layer_profiles_and_loads_again(tmp_path):
    """A module with no forward of the user's (every frame is torch's) has no line to show, and its empty
    tables keep every column, so the directory loads again."""
    torch.manual_seed(0)
    profile = tracelink.profile(nn.Linear(16, 8).eval(), torch.randn(4, 16), out=tmp_path, repetitions=2, compare=("none",),
                                console=Console(quiet=True))
    again = load_profile(tmp_path)
    assert again.source_lines.empty and {"gflops_s", "next_step", "user_self_ns"} <= set(again.source_lines.columns)
    assert list(again.source_lines.columns) == list(profile.source_lines.columns)
    assert again.call_sites["total_ns"].sum() > 0


def test_torch_hottest_lines_are_the_layer_calls(torch_profile):
    profile, _, _ = torch_profile
    here = Path(__file__).resolve()
    marks = marked_lines(here)
    lines = user_lines(profile, here)
    assert lines.index[0] == marks["BLOCK_CONV"]
    assert set(lines.index[:2]) == {marks["BLOCK_CONV"], marks["STEM"]}
    assert profile.summary["coverage"]["dispatch_time_attributed_share"] == 1.0
    assert profile.summary["model"].endswith("test_frameworks.py:SmallCNN")
    # Every op's stack starts at the module's forward: no frame of torch's export machinery or tracelink.
    files = profile.source_lines["file"]
    assert not (files.str.contains("/torch/_dynamo/") | files.str.startswith(PACKAGE)).any()


def test_torch_helper_calls_are_separate_callers(torch_profile):
    profile, _, _ = torch_profile
    here = Path(__file__).resolve()
    marks = marked_lines(here)
    check_separate_callers(user_lines(profile, here), marks["BLOCK_CONV"], marks["SHARED1"], marks["SHARED2"])


def test_torch_module_paths_group_the_time(torch_profile):
    profile, _, _ = torch_profile
    names = set(profile.source_ops["name"].dropna())
    assert {"stem/conv2d", "layers.0/conv/conv2d", "layers.1/conv/conv2d", "shared/conv/conv2d", "head/linear"} <= names
    by_component = components(profile)
    assert set(by_component.index[:3]) == {"layers.0/conv", "layers.1/conv", "shared/conv"}
    assert by_component["shared/conv"] > by_component["layers.0/conv"]  # called twice


def test_torch_outputs_equal_the_iree_run(torch_profile):
    profile, module, x = torch_profile
    (saved,) = profile.summary["inputs"]
    np.testing.assert_array_equal(np.load(saved.removeprefix("@")), x.numpy())
    # profile.json records the weights' archive the run was given, as the run's command line has it
    (archive,) = profile.summary["parameters"]
    assert archive.startswith("model=") and f"--parameters={archive}" in (profile.artifacts / "run.log").read_text().split("\n", 1)[0]
    with torch.no_grad():
        expected = module(x).numpy()
    (actual,) = iree_outputs(profile)
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


class GraphBreak(nn.Module):
    """A module strict export refuses (a graph break inside forward), so the non-strict export takes it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        torch._dynamo.graph_break()
        return torch.tanh(self.fc(x))  # FC_TANH


def test_torch_module_dynamo_cannot_capture_is_exported_non_strict(tmp_path):
    torch.manual_seed(0)
    module, x = GraphBreak().eval(), torch.randn(8, 32)
    with pytest.raises(Exception):
        torch.export.export(module, (x,), strict=True)
    profile = tracelink.profile(module, x, out=tmp_path / "out", repetitions=2, compare=("none",), console=Console(quiet=True))
    assert profile.summary["coverage"]["dispatch_time_attributed_share"] == 1.0
    assert "fc/linear" in set(profile.source_ops["name"])
    here = Path(__file__).resolve()
    lines = user_lines(profile, here)
    assert lines.index[0] == marked_lines(here)["FC_TANH"]
    # The non-strict stacks go through torch's module files: library lines, credited to the user's line.
    library = profile.source_lines[profile.source_lines["library"]]
    assert library["file"].str.endswith("torch/nn/modules/linear.py").any()
    with torch.no_grad():
        expected = module(x).numpy()
    np.testing.assert_allclose(iree_outputs(profile)[0], expected, rtol=1e-4, atol=1e-5)


def test_torch_export_leaves_no_reference_to_the_weights(tmp_path):
    """A strict export's compiled graph, which Dynamo keeps as a global of its own module (torch 2.13),
    is dropped: once the module is gone, its weights are freed, and no compiled-graph global is left."""
    import gc
    import sys
    import weakref

    from tracelink.compile.frontends import export_model, python_model
    from tracelink.compile.frontends.torch_export import COMPILED_FUNCTION_PREFIX

    def compiled_globals() -> set[str]:
        return {f"{module}.{name}" for module, value in list(sys.modules.items()) for name in list(getattr(value, "__dict__", {}) or {})
                if isinstance(name, str) and name.startswith(COMPILED_FUNCTION_PREFIX)}

    before = compiled_globals()
    module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).eval()
    weight = weakref.ref(module[0].weight)
    export_model(python_model(module, (torch.randn(4, 64),)), tmp_path / "artifacts")
    assert (tmp_path / "artifacts" / "exported.mlir").is_file()
    assert compiled_globals() == before
    del module
    gc.collect()
    assert weight() is None


# ---- A torchvision-style ResNet-18 through the `tracelink` command ----

RESNET18 = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class BasicBlock(nn.Module):
        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            return self.relu(out + identity)


    class ResNet18(nn.Module):
        def __init__(self, num_classes=1000):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = self._make_layer(64, 1)
            self.layer2 = self._make_layer(128, 2)
            self.layer3 = self._make_layer(256, 2)
            self.layer4 = self._make_layer(512, 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, num_classes)

        def _make_layer(self, planes, stride):
            downsample = None
            if stride != 1 or self.inplanes != planes:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
            layers = [BasicBlock(self.inplanes, planes, stride, downsample), BasicBlock(planes, planes)]
            self.inplanes = planes
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))


    def make():
        torch.manual_seed(0)
        return ResNet18().eval(), (torch.randn(1, 3, 64, 64),)
''')


def test_resnet18_profiles_end_to_end_with_module_paths(tmp_path):
    model = tmp_path / "resnet.py"
    model.write_text(RESNET18)
    done = run_cli("profile", f"{model}:make", "-o", str(tmp_path / "out"), "--repetitions", "3", "--compare", "none")
    assert done.returncode == 0, done.stderr
    profile = load_profile(tmp_path / "out")
    assert profile.summary["coverage"]["dispatch_time_attributed_share"] == 1.0
    timed = profile.source_ops[profile.source_ops["total_ns"] > 0]
    convs = set(timed["name"][timed["op_kinds"].str.contains("conv2d")])
    expected = {"conv1/conv2d", "layer2.0/downsample.0/conv2d"} | {
        f"layer{layer}.{block}/conv{conv}/conv2d" for layer in range(1, 5) for block in (0, 1) for conv in (1, 2)
    }
    assert expected <= convs and len(convs) == 20
    assert "fc/linear" in set(profile.source_ops["name"])
    assert set(components(profile).index) >= {f"layer{layer}.{block}/conv1" for layer in range(1, 5) for block in (0, 1)}
    marks = {line: number for number, line in enumerate(RESNET18.splitlines(), 1)}
    lines = user_lines(profile, model.resolve())
    block_lines = {marks["        out = self.relu(self.bn1(self.conv1(x)))"], marks["        out = self.bn2(self.conv2(out))"]}
    assert lines.index[0] in block_lines
    assert lines.loc[sorted(block_lines), "user_self_ns"].sum() > 0.5 * lines["user_self_ns"].sum()
    loaded = load_entry(f"{model}:make")
    with torch.no_grad():
        expected_out = loaded.target(*loaded.args).numpy()
    np.testing.assert_allclose(iree_outputs(profile)[0], expected_out, rtol=1e-3, atol=1e-4)


def test_python_model_errors_are_one_line(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def make():\n    raise ValueError('no weights here')\n")
    line = error_line(run_cli("profile", f"{broken}:make", "-o", str(tmp_path / "out")))
    assert "broken.py" in line and "make() raised ValueError: no weights here" in line
    assert not (tmp_path / "out").exists()  # nothing written before the model loads
    line = error_line(run_cli("profile", f"{broken}:build", "-o", str(tmp_path / "out")))
    assert "no function 'build'" in line
    unknown = tmp_path / "unknown.py"
    unknown.write_text("import no_such_module_here\n")
    line = error_line(run_cli("profile", str(unknown), "-o", str(tmp_path / "out")))  # model.py alone means :make
    assert "unknown.py: importing it raised ModuleNotFoundError: No module named 'no_such_module_here'" in line
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def make():\n    return 42\n")
    line = error_line(run_cli("profile", f"{wrong}:make", "-o", str(tmp_path / "out")))
    assert "make() must return (fn_or_module, example_args)" in line


UNEXPORTABLE = """
import torch


class Routed(torch.nn.Module):
    def forward(self, x):
        total = x
        for row in torch.nonzero(x > 0):  # ROUTED
            total = total + row.sum()
        return total


class Masked(torch.nn.Module):
    def forward(self, x):
        mask = torch.ones_like(x).bool()
        rows, columns = zip(*torch.tensor([[0, 1], [1, 2]]))
        mask[rows, columns] = False  # MASKED
        return x * mask


def routed():
    return Routed(), (torch.ones(2, 3),)


def masked():
    return Masked(), (torch.ones(2, 3),)
"""


def test_an_export_failure_names_the_model_line(tmp_path):
    """torch.export's failure names the model's line it failed at: the line a data-dependent guard names, with what
    to do, or else the innermost frame of the model's own code (UDOP's index by a tuple of 0-d tensors)."""
    model = tmp_path / "unexportable.py"
    model.write_text(UNEXPORTABLE)
    marks = marked_lines(model)
    line = error_line(run_cli("profile", f"{model}:routed", "-o", str(tmp_path / "routed")))
    assert "torch.export failed (GuardOnDataDependentSymNode" in line
    assert f"at {model}:{marks['ROUTED']} (for row in torch.nonzero(x > 0):" in line and "torch._check()" in line
    line = error_line(run_cli("profile", f"{model}:masked", "-o", str(tmp_path / "masked")))
    assert "torch.export failed (RuntimeError" in line and f"at {model}:{marks['MASKED']} (mask[rows, columns] = False" in line
    assert "torch._check" not in line


NO_GRAD = """
import torch


class Smoothed(torch.nn.Module):
    def forward(self, x):
        with torch.no_grad():
            smooth = torch.nn.functional.softplus(x)  # SMOOTH
        return smooth * 2  # DOUBLE


def make():
    return Smoothed(), (torch.randn(4, 6),)


class Picked(torch.nn.Module):
    def forward(self, x):
        picked = x[:, x.sum(0) > 0]  # PICKED
        return picked.topk(min(2, picked.shape[1]), dim=1).values


def picked():
    return Picked(), (torch.randn(4, 6),)
"""


def test_ops_decomposed_inside_a_no_grad_region_keep_the_model_line(tmp_path):
    """torch's decomposition gives the ops it makes from a ``torch.no_grad()`` region (a higher-order op's body) the
    body's generated code as their stack; the export gives them back the model's line they came from."""
    model = tmp_path / "smoothed.py"
    model.write_text(NO_GRAD)
    marks = marked_lines(model)
    loaded = load_entry(f"{model}:make")
    program = exported_program(loaded.target, loaded.args, "smoothed")
    lines = {node.name: [line for file, line, _, _ in python_frames(node.meta.get("stack_trace") or "", Path(torch.__file__).parent)
                         if file == str(model)]
             for node in program.graph.nodes if node.op == "call_function"}
    assert {"exp", "log1p", "where"} <= set(lines)  # softplus, decomposed
    assert all(found == [marks["SMOOTH"]] for name, found in lines.items() if name != "mul") and lines["mul"] == [marks["DOUBLE"]]


def test_an_importer_limit_names_the_model_line(tmp_path):
    """An op IREE's FX importer cannot import (``sym_min`` of a data-dependent size) is named with the model's line."""
    model = tmp_path / "picked.py"
    model.write_text(NO_GRAD)
    line = error_line(run_cli("profile", f"{model}:picked", "-o", str(tmp_path / "out")))
    assert "IREE's FX importer failed (NotImplementedError" in line and "sym_min" in line
    assert line.endswith(f"at {model}:{marked_lines(model)['PICKED']} (picked = x[:, x.sum(0) > 0]  # PICKED)")


def test_missing_framework_names_the_extra(monkeypatch):
    monkeypatch.setitem(EXTRAS, "no_such_framework", "nsf")  # a framework that is really not installed
    with pytest.raises(TracelinkError, match=r"needs no_such_framework: pip install 'tracelink\[nsf\]'"):
        require("no_such_framework")
