"""`tracelink tune --ray` and `--ray-address` on a real Ray runtime: a local one the tune starts and
stops, and a two-node cluster (`ray start --head` and a second node, 1 CPU each and the race resource,
both on 127.0.0.1).

Ray replaces a node's loopback address by the machine's network address unless told otherwise: the
nodes here are started by a small launcher that keeps the address given (and sets Ray's own switch
for a one-machine runtime in their children), and the tune's driver, given a loopback address, sets
that switch itself (tracelink/tune/cluster.py). Token authentication is on, with a token of the test's
own in the environment of the nodes and the drivers. Every cluster started here is stopped by its pid.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import EXAMPLES, run_profile
from tracelink.profile_dir import files
from tracelink.profile_dir.profile import load_profile
from tracelink.tune.cluster import RACE_RESOURCE
from tracelink.tune.strategy import StrategySearch
from tracelink.tune.strategy_space import StrategyOptions
from tracelink.tune.tuners.loop import Budget

pytest.importorskip("ray")

TRACELINK = Path(sys.executable).parent / "tracelink"
LAUNCHER = """
import os, sys
from ray._private import services
services.resolve_ip_for_localhost = lambda host: host  # keep 127.0.0.1 as the node's address
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # the node's workers and agents: loopback too
from ray.scripts.scripts import main
sys.argv = ["ray", "start", *sys.argv[1:]]
main()
"""
# Attention alone: IREE lowers the SDPA op to one attention dispatch, which the decomposition beats by
# far. The other option, im2col, has no convolution to act on, and with two single options only the
# faster goes on: no combination, one finalist, so the winner does not hang on a close race.
ATTENTION = """
import torch


class Block(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def make():
    torch.manual_seed(0)
    return Block().eval(), tuple(torch.randn(1, 4, 512, 64) for _ in range(3))
"""
SMALL = """
[strategy]
only = [{only}]
first_rounds = {rounds}
final_rounds = {rounds}
profile_top = 0
compose = false
calls = 2
[measure]
repetitions = 3
[select]
confirm_rounds = 6
"""
QUICK = ["--trials", "1", "--top", "1", "--rounds", "0"]  # with SMALL's [measure] and [select]: the tile search as short as it goes


def config(tmp_path: Path, only: list[str], rounds: int = 2) -> Path:
    path = tmp_path / "tune.toml"
    path.write_text(SMALL.format(only=", ".join(f'"{name}"' for name in only), rounds=rounds))
    return path


def records(profile: Path, kind: str) -> list[dict]:
    lines = (profile / "tune" / "records.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["kind"] == kind]


def short_directory() -> Path:
    """A directory short enough for Ray's socket paths (a pytest tmp_path is too long)."""
    return Path(tempfile.mkdtemp(prefix="tlray-", dir="/tmp"))


@pytest.fixture(scope="module")
def cluster():
    """A head and a second node, 1 CPU each, on 127.0.0.1: (address, the environment a driver needs)."""
    root = short_directory()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16), "RAY_USAGE_STATS_ENABLED": "0",
           "TMPDIR": str(root)}  # the tasks' scratch directories, removed with the cluster
    (root / "launch.py").write_text(LAUNCHER)
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", f"--resources={json.dumps({RACE_RESOURCE: 1})}",
              "--disable-usage-stats"]
    nodes = []
    try:
        for arguments in ([f"--head", f"--port={port}", f"--temp-dir={root / 't'}", "--include-dashboard=false"],
                          [f"--address=127.0.0.1:{port}"]):
            log = root / f"node{len(nodes)}.log"
            nodes.append(subprocess.Popen([sys.executable, str(root / "launch.py"), *arguments, *common], env=env,
                                          stdout=log.open("w"), stderr=subprocess.STDOUT))
            deadline = time.monotonic() + 90
            while "Ray runtime started" not in log.read_text():
                assert nodes[-1].poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.5)
        yield f"127.0.0.1:{port}", env
    finally:
        for node in reversed(nodes):  # by pid: `ray start --block` stops its own processes on SIGTERM
            node.terminate()
            try:
                node.wait(60)
            except subprocess.TimeoutExpired:
                node.kill()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ray_mlp") / "mlp"
    run_profile(EXAMPLES / "mlp.mlir", out)
    return out


def tune(profile: Path, *arguments: str, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([str(TRACELINK), "tune", str(profile), *arguments], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **popen)


def ray_processes(since: float) -> list[psutil.Process]:
    """This user's Ray processes started after ``since``."""
    found = []
    for process in psutil.process_iter(["name", "cmdline", "create_time", "username"]):
        text = " ".join(process.info["cmdline"] or []) + " " + (process.info["name"] or "")
        if process.info["create_time"] >= since and any(key in text for key in ("raylet", "gcs_server", "ray::", "ray/dashboard")):
            found.append(process)
    return found


def test_local_runtime_starts_and_stops(mlp, tmp_path):
    """--ray alone: a runtime on loopback, its files where asked, and no Ray process once the tune ends."""
    started, temp = time.time(), short_directory()
    try:
        run = tune(mlp, "--ray", "--ray-cpus", "1", "--ray-temp-dir", str(temp), "--config",
                   str(config(tmp_path, ["data-tiling"])), *QUICK)
        output, _ = run.communicate(timeout=400)
        assert run.returncode == 0, output[-3000:]
        placements = records(mlp, "placement")
        assert {p["what"] for p in placements} == {"build", "race"} and {p["address"] for p in placements} == {"127.0.0.1"}
        assert any(path.name.startswith("session_") for path in temp.iterdir())  # Ray's files went where asked
        deadline = time.monotonic() + 20
        while (left := ray_processes(started)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, [process.info["cmdline"] for process in left]
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_cluster_hands_over_the_in_process_strategy(cluster, tmp_path):
    """On an attention block, the cluster's tune picks what the in-process search picks, built on both nodes."""
    address, env = cluster
    model = tmp_path / "block.py"
    model.write_text(ATTENTION)
    base = tmp_path / "base"
    run_profile(Path(f"{model}:make"), base)
    only = ["decompose-attention", "im2col"]
    options = StrategyOptions(only=only, compose=False, first_rounds=3, final_rounds=3, calls=2)
    search = StrategySearch(load_profile(base), options, Budget.of_seconds(600.0), 600.0, resume=False)
    in_process = search.run().winner
    assert in_process is not None and in_process.name == "decompose-attention", search.result.candidates
    run = tune(base, "--ray-address", address, "--config", str(config(tmp_path, only, rounds=3)), *QUICK, env=env)
    output, _ = run.communicate(timeout=600)
    assert run.returncode == 0, output[-3000:]
    assert f"winning strategy: {in_process.name}," in output, output[-3000:]
    placements = records(base, "placement")
    builds = [p for p in placements if p["what"] == "build"]
    assert len({p["node"] for p in builds}) == 2, builds  # the two single options built at once, one per node
    assert all(p["address"] == "127.0.0.1" and p["node"] for p in placements)
    raced = {name for p in placements if p["what"] == "race" for name in p["names"]}
    strategies = json.loads((base / "tune" / "strategies.json").read_text())["strategies"]
    assert {s["name"] for s in strategies if s["ci"]} <= raced  # every timing names the node it ran on


def _wait_for(what, process: subprocess.Popen, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while (found := what()) is None:
        assert process.poll() is None and time.monotonic() < deadline, (process.stdout.read() or "")[-3000:]
        time.sleep(0.1)
    return found


def _build_worker() -> psutil.Process | None:
    """A Ray worker running a build task (Ray names the worker's process after the task it runs)."""
    for process in psutil.process_iter(["cmdline"]):
        if (process.info["cmdline"] or [""])[0].startswith("ray::build_task"):
            return process
    return None


def test_worker_killed_mid_tune_finishes_with_a_lost_record(cluster, mlp, tmp_path):
    address, env = cluster
    run = tune(mlp, "--ray-address", address, "--config", str(config(tmp_path, ["data-tiling", "ukernels"])), *QUICK, env=env)
    _wait_for(_build_worker, run).kill()
    output, _ = run.communicate(timeout=600)
    assert run.returncode == 0, output[-3000:]
    lost = records(mlp, "lost")
    assert lost and lost[0]["what"] == "build" and lost[0]["retried"], lost
    strategies = json.loads((mlp / "tune" / "strategies.json").read_text())["strategies"]
    assert {s["name"] for s in strategies} == {"data-tiling", "ukernels"} and all(s["status"] != "not run" for s in strategies)


def test_resume_after_the_driver_is_killed_measures_nothing_twice(cluster, mlp, tmp_path):
    address, env = cluster
    arguments = ["--ray-address", address, "--config", str(config(tmp_path, ["data-tiling", "ukernels"])), *QUICK]
    run = tune(mlp, *arguments, env=env, start_new_session=True)
    raced = lambda: next((r for r in records(mlp, "placement") if r["what"] == "race"), None)  # noqa: E731
    _wait_for(lambda: raced() if (mlp / "tune" / "records.jsonl").is_file() else None, run)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    first = records(mlp, "placement")
    again = tune(mlp, *arguments, "--resume", env=env)
    output, _ = again.communicate(timeout=600)
    assert again.returncode == 0, output[-3000:]
    placements = records(mlp, "placement")
    assert placements[: len(first)] == first  # the first session's record is kept, and continued
    strategies = json.loads((mlp / "tune" / "strategies.json").read_text())["strategies"]
    assert all(s["status"] != "not run" for s in strategies), strategies
    builds = [name for p in placements if p["what"] == "build" for name in p["names"]]
    races = [(p["stage"], tuple(sorted(p["names"]))) for p in placements if p["what"] == "race"]
    assert len(builds) == len(set(builds)) and len(races) == len(set(races)), placements


def test_sweep_writes_each_profile_where_the_driver_asks(tmp_path):
    """A batch of `tracelink profile` runs as Ray tasks on a local runtime; each directory lands at its `out`."""
    from tracelink.pipeline.sweep import ProfileJob, profile_all
    from tracelink.tune.cluster import RayOptions

    temp = short_directory()
    try:
        jobs = [ProfileJob(EXAMPLES / f"{name}.mlir", ("--repetitions=2",), tmp_path / "sweep" / name) for name in ("mlp", "convnet")]
        runs = profile_all(jobs, RayOptions(temp_dir=temp, cpus=2))
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert [run.returncode for run in runs] == [0, 0], [run.output for run in runs]
    for job in jobs:
        assert load_profile(job.out).summary["function"]  # a whole profile, readable where it was asked for


def _race(work, profile, rounds: int):
    """A race task of the profiled build alone on ``work``'s runtime (its result: times, node, started, seconds)."""
    from tracelink.compare.diff import run_inputs, run_parameters
    from tracelink.tune.payload import run_files
    from tracelink.tune.remote import Job, race_job

    vmfb, inputs, parameters = profile.artifacts / files.VMFB, run_inputs(profile), run_parameters(profile)
    arguments = ([str(vmfb)], profile.summary["function"], inputs, parameters, 2, rounds, 600.0)
    return work.submit(Job("race", ("profiled",), race_job, arguments, (vmfb, *run_files(inputs, parameters))))


def _overlap(one: dict, other: dict) -> bool:
    return one["started"] < other["started"] + other["seconds"] and other["started"] < one["started"] + one["seconds"]


def test_a_race_holds_its_node_alone(mlp):
    """On one node of 2 CPUs, a build, a race and another build submitted at once: no build runs while
    the race times (by CPUs alone, the race would start beside the first build)."""
    import ray

    from tracelink.tune.cluster import Cluster, RayOptions
    from tracelink.tune.remote import Job, RayWork, compile_job

    profile, temp = load_profile(mlp), short_directory()
    program = Path(profile.manifest["input"])
    flags = list(profile.manifest["compiler"]["flags"])
    try:
        with Cluster(RayOptions(temp_dir=temp, cpus=2), temp) as runtime:
            work = RayWork(runtime)
            build = lambda name: work.submit(Job("build", (name,), compile_job,  # noqa: E731
                                                 (str(program), flags, [], 600.0, name, "build"), (program,)))
            first = build("first")  # the race is asked for while it builds, then another build
            raced, *built = ray.get([_race(work, profile, rounds=30), first, build("second")])
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert all("vmfb" in build for build in built), [build.get("error") for build in built]
    assert not [build for build in built if _overlap(build, raced)], (raced, built)


def test_races_run_on_different_nodes_at_once(cluster, mlp, tmp_path, monkeypatch):
    import ray

    from tracelink.tune.cluster import Cluster, RayOptions
    from tracelink.tune.remote import RayWork

    address, env = cluster
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
        monkeypatch.setenv(key, env[key])
    profile = load_profile(mlp)
    with Cluster(RayOptions(address=address), tmp_path) as runtime:
        work = RayWork(runtime)
        assert len(work.nodes) == 2
        first, second = ray.get([_race(work, profile, rounds=60) for _ in range(2)])
    assert first["node"] != second["node"] and _overlap(first, second), (first, second)


def runtime_processes(temp: Path) -> list[psutil.Process]:
    """The processes of the Ray runtime with its files under ``temp`` (their command lines name it), and
    everything they started (workers, the tools of their tasks)."""
    found: dict[int, psutil.Process] = {}
    for process in psutil.process_iter(["cmdline"]):
        if str(temp) in " ".join(process.info["cmdline"] or []):
            try:
                found.update({p.pid: p for p in [process, *process.children(recursive=True)]})
            except psutil.NoSuchProcess:
                pass
    return list(found.values())


@pytest.mark.parametrize("when", ["starting", "building"])
def test_ctrl_c_stops_the_local_runtime_and_keeps_the_records(mlp, tmp_path, when):
    """Ctrl-C while the local runtime starts (to tune alone), or once a build is recorded (to the whole
    process group, as a terminal sends it): tune exits as interrupted, no process of its runtime is
    left, and what was recorded is kept."""
    profile, temp = tmp_path / "mlp", short_directory()
    shutil.copytree(mlp, profile, ignore=shutil.ignore_patterns("tune"))
    placed = lambda: records(profile, "placement") if (profile / "tune" / "records.jsonl").is_file() else []  # noqa: E731
    try:
        run = tune(profile, "--ray", "--ray-cpus", "1", "--ray-temp-dir", str(temp), "--config",
                   str(config(tmp_path, ["data-tiling", "ukernels"])), *QUICK, start_new_session=True)
        if when == "starting":
            _wait_for(lambda: next((p for p in runtime_processes(temp) if "raylet" in p.name()), None), run)
        else:
            _wait_for(lambda: placed() or None, run)
        started, kept = runtime_processes(temp), placed()
        os.kill(run.pid, signal.SIGINT) if when == "starting" else os.killpg(run.pid, signal.SIGINT)
        output, _ = run.communicate(timeout=120)
        assert run.returncode == 128 + signal.SIGINT and "interrupted" in output, output[-3000:]
        _, alive = psutil.wait_procs(started, timeout=15)
        assert not alive and not runtime_processes(temp), [p.cmdline() for p in alive]
        assert placed()[: len(kept)] == kept
    finally:
        shutil.rmtree(temp, ignore_errors=True)


PARAMETERED = """
util.global private @w = #flow.parameter.named<"model"::"w"> : tensor<4xf32>
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %w = util.global.load @w : tensor<4xf32>
  %y = arith.addf %x, %w : tensor<4xf32>
  return %y : tensor<4xf32>
}
"""
LINEAR = """
import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4).eval(), (torch.randn(2, 8),)
"""


def test_sweep_on_the_cluster_carries_every_file(cluster, tmp_path, monkeypatch):
    """A sweep's profiles on the two nodes: the programs (one a `model.py:make`), the input and the
    parameter archive reach each node as bytes, come back inside the profiles, which record them where
    the driver has them: a swept profile is diffed (run again) on the driver afterwards."""
    import numpy as np
    import iree.runtime as rt

    from tracelink.pipeline.sweep import ProfileJob, profile_all
    from tracelink.report.sources import SIGNED_KEYS
    from tracelink.tune.cluster import RayOptions

    address, env = cluster
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
        monkeypatch.setenv(key, env[key])
    program, weights, values, model = (tmp_path / name for name in ("add.mlir", "w.irpa", "x.npy", "linear.py"))
    program.write_text(PARAMETERED)
    model.write_text(LINEAR)
    index = rt.ParameterIndex()
    index.add_buffer("w", np.full(4, 0.5, dtype=np.float32).tobytes())
    index.create_archive_file(str(weights))
    np.save(values, np.ones(4, dtype=np.float32))
    jobs = [ProfileJob(program, (f"--input=@{values}", "--parameters", f"model={weights}", "--repetitions=2"), tmp_path / "add"),
            ProfileJob(Path(f"{model}:make"), ("--repetitions=2", "--compare=none"), tmp_path / "linear")]
    runs = profile_all(jobs, RayOptions(address=address))
    assert [run.returncode for run in runs] == [0, 0], [run.output for run in runs]
    assert len({run.node for run in runs}) == 2  # one profile per node (1 CPU each), both at once
    add, linear = (load_profile(job.out) for job in jobs)
    (parameters,), (value,) = add.summary["parameters"], add.summary["inputs"]
    recorded = {jobs[0].out: [parameters.partition("=")[2], value.removeprefix("@"), add.manifest["input"]],
                jobs[1].out: [linear.summary["model"].rpartition(":")[0], linear.manifest["input"]]}
    assert [Path(path).name for path in recorded[jobs[0].out]] == ["w.irpa", "x.npy", "add.mlir"], recorded
    assert Path(recorded[jobs[1].out][0]).name == "linear.py", recorded
    for out, paths in recorded.items():  # the files the profile ran with, kept inside it
        assert all(Path(path).is_file() and Path(path).is_relative_to(out) for path in paths), paths
    for job in jobs:  # no path of the node's left, but in the source policy as the node signed it
        summary = {key: value for key, value in json.loads((job.out / files.SUMMARY).read_text()).items() if key not in SIGNED_KEYS}
        written = [json.dumps(summary), (job.out / files.ARTIFACTS / files.MANIFEST).read_text()]
        assert not [text for text in written if "tracelink-program-" in text or "tracelink-sweep-" in text], written
    diff = subprocess.run([str(TRACELINK), "diff", str(jobs[0].out), str(jobs[0].out), "--rounds", "2", "-o",
                           str(tmp_path / "diff.csv")], capture_output=True, text=True, timeout=300)
    assert diff.returncode == 0 and (tmp_path / "diff.csv").is_file(), diff.stderr[-3000:]


SWEPT = """
def write(item, directory):
    directory.mkdir()
    (directory / "item").write_text(item)
    return __file__
"""


def test_sweep_carries_the_code_it_runs(cluster, tmp_path, monkeypatch):
    """map_directories with a working_dir (as the zoo bench runs): the nodes run the function from
    Ray's copy of code they do not have."""
    from tracelink.pipeline.sweep import map_directories
    from tracelink.tune.cluster import RayOptions

    address, env = cluster
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
        monkeypatch.setenv(key, env[key])
    code = tmp_path / "code"
    code.mkdir()
    (code / "swept_here.py").write_text(SWEPT)
    monkeypatch.syspath_prepend(str(code))
    import swept_here

    items = [(name, tmp_path / "out" / name) for name in ("a", "b")]
    ran = map_directories(swept_here.write, items, RayOptions(address=address, working_dir=code))
    assert [(directory / "item").read_text() for _, directory in items] == ["a", "b"]
    assert not [file for file in ran if file.startswith(str(code))], ran  # the nodes' copy, not the driver's


def test_tile_search_builds_across_the_cluster_and_times_on_one_node(cluster, tmp_path):
    """The tile search on the cluster (a matmul built with a poor tile config, so its candidates win):
    the candidates built on both nodes, the default and every candidate timed on one node, every trial
    in the driver's record, and the tuning handed over applies in the program."""
    import numpy as np
    import iree.runtime as rt

    from tests.test_tune import LAYER, POOR, SMALL_SPACE, dumped_benchmark
    from tracelink.compile import CompileOptions
    from tracelink.tune.dispatch import load_dispatch
    from tracelink.tune.spec import Choice, write_spec

    address, env = cluster
    program, config_file, base = tmp_path / "layer.mlir", tmp_path / "tune.toml", tmp_path / "base"
    program.write_text(LAYER)
    config_file.write_text(SMALL_SPACE)
    dispatch = load_dispatch(dumped_benchmark(program, tmp_path / "dump"))
    run_profile(program, base, compile=CompileOptions(tuning_spec=write_spec([Choice(dispatch, POOR)], tmp_path / "poor.mlir")))
    arguments = ["--ray-address", address, "--no-strategies", "--top", "1", "--trials", "2", "--rounds", "0", "--config",
                 str(config_file)]
    run = tune(base, *arguments, env=env)
    output, _ = run.communicate(timeout=300)
    assert run.returncode == 0, output[-3000:]
    placed = records(base, "tile_placement")
    builds, timings = ([p for p in placed if p["what"] == what] for what in ("build", "time"))
    assert len(builds) == 3 and len({p["node"] for p in builds}) == 2, placed  # the two candidates at once
    assert len({p["node"] for p in timings}) == 1 and all(p["address"] == "127.0.0.1" for p in placed), placed
    trials = records(base, "tile")
    assert len(trials) == 3 and all(t["verification"] == "ok" for t in trials), trials
    timed = {name for p in timings for name in p["names"]}
    assert {f"{t['dispatch']}#{t['trial']}" for t in trials} <= timed, (trials, timings)
    outcome = records(base, "dispatch")[-1]
    assert outcome["selected"] and (base / "tune" / "spec.mlir").is_file(), outcome  # kept once found applied
    inputs = [np.load(path) for path in sorted((base / files.ARTIFACTS / files.INPUTS).glob("input_*.npy"))]
    outputs = [rt.load_vm_flatbuffer_file(str(vmfb), driver="local-task").main(*inputs).to_host()
               for vmfb in (base / files.ARTIFACTS / files.VMFB, base / "tune" / "spec_check" / files.VMFB)]
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-4, atol=1e-5)
    again = tune(base, *arguments, "--resume", env=env)  # the trials are spent: nothing is built or measured again
    output, _ = again.communicate(timeout=300)
    assert again.returncode == 0, output[-3000:]
    assert records(base, "tile") == trials and [p for p in records(base, "tile_placement") if p["what"] == "build"] == builds
