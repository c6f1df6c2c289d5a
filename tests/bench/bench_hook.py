"""Benchmark: the perf hook's added cost per workgroup call. Prints results; not a test.

1. Program level. One program with many small workgroups (a transpose tiled into 1024
   workgroups of 16x32 elements, ~1 us each) under iree-benchmark-module on the local-sync
   device, so all workgroups run serially on one thread. Three configurations, interleaved
   round by round to share the machine's drift: unhooked, hooked (timing only), hooked with one
   software counter (task-clock). Cost per call = (median hooked - median unhooked) / 1024,
   from the process CPU time (robust to other load on a shared machine: waiting while
   preempted does not count) and from wall time (noisier).
2. Per call. A tiny C program exporting a fake v0.6 executable library with a trivial export
   (a few ns) is queried through the preloaded hook's dlsym, and the hooked export pointer is
   called in a tight loop: the best of 7 trials of (hooked - direct) ns per call.

Targets: <= 100 ns per call timing only, <= 1.5 us with one software counter.

Usage: .venv/bin/python tests/bench/bench_hook.py [--rounds 5] [--iterations 200]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tracelink.collect.hook import hook_library_path
from tracelink.collect.hook_records import read_hook_file

BIN = Path(sys.executable).parent
NATIVE = Path(__file__).resolve().parents[2] / "native"
WORKGROUPS_PER_ITERATION = 1024
PROGRAM = """
func.func @main(%a: tensor<256x2048xf32>) -> tensor<2048x256xf32> {
  %e = tensor.empty() : tensor<2048x256xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(i, j) -> (j, i)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<256x2048xf32>) outs(%e : tensor<2048x256xf32>)
      attrs = {compilation_info = #iree_codegen.compilation_info<
        lowering_config = #iree_codegen.lowering_config<tile_sizes = [[16, 32], [1, 16]]>,
        translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>} {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  } -> tensor<2048x256xf32>
  return %t : tensor<2048x256xf32>
}
"""
# A fake executable library in the program itself, queried through dlsym like IREE does.
MICRO = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "hook_abi.h"
static volatile unsigned sink;
static int work(const void* e, const tl_abi_dispatch_state_t* d, const tl_abi_workgroup_state_t* w) {
  sink += w->workgroup_id_x;
  return 0;
}
static const tl_abi_dispatch_fn_t ptrs[1] = {work};
static const char* const names[1] = {"micro_dispatch_0"};
static const tl_abi_header_t header = {6, "micro", 0, 0};
static const tl_abi_library_t library = {.header = &header, .exports = {.count = 1, .ptrs = ptrs, .names = names}};
const tl_abi_header_t** iree_hal_executable_library_query(uint32_t version, const void* env) {
  return (const tl_abi_header_t**)&library;
}
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
int main(int argc, char** argv) {
  long n = atol(argv[1]);
  tl_abi_query_fn_t query = (tl_abi_query_fn_t)dlsym(dlopen(NULL, RTLD_NOW), "iree_hal_executable_library_query");
  tl_abi_dispatch_fn_t fn = ((const tl_abi_library_t*)query(6, NULL))->exports.ptrs[0];
  void* bindings[1] = {0};
  tl_abi_dispatch_state_t state = {.workgroup_count_x = 1u << 30, .workgroup_count_y = 1,
                                   .workgroup_count_z = 1, .binding_ptrs = bindings};
  tl_abi_workgroup_state_t workgroup = {0};
  double best_hooked = 1e30, best_direct = 1e30;
  for (int trial = 0; trial < 7; ++trial) {
    double t0 = now();
    for (long i = 0; i < n; ++i) { workgroup.workgroup_id_x = (uint32_t)i; fn(NULL, &state, &workgroup); }
    double t1 = now();
    for (long i = 0; i < n; ++i) { workgroup.workgroup_id_x = (uint32_t)i; work(NULL, &state, &workgroup); }
    double t2 = now();
    if ((t1 - t0) / n < best_hooked) best_hooked = (t1 - t0) / n;
    if ((t2 - t1) / n < best_direct) best_direct = (t2 - t1) / n;
  }
  printf("hooked=%d hooked_ns=%.1f direct_ns=%.1f\n", fn != work, best_hooked, best_direct);
  return 0;
}
"""
CONFIGS: dict[str, list[str] | None] = {"unhooked": None, "timing only": [], "task-clock": ["task-clock"]}
TARGET_NS = {"timing only": 100.0, "task-clock": 1500.0}


def hooked_env(events: list[str], records_dir: Path) -> dict[str, str]:
    """The environment of a hooked run (what run_hooked sets up)."""
    return dict(
        os.environ,
        LD_PRELOAD=str(hook_library_path()),
        TRACELINK_HOOK_OUTPUT=str(records_dir),
        IREE_HOOK_PERF_EVENT_TYPES=",".join(events),
    )


def compile_program(directory: Path) -> Path:
    """Compile the benchmark program as a system library; check its grid."""
    source, module = directory / "bench.mlir", directory / "bench.vmfb"
    source.write_text(PROGRAM)
    flags = [
        "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=host",
        "--iree-llvmcpu-link-embedded=false",
    ]
    subprocess.run([str(BIN / "iree-compile"), str(source), *flags, "-o", str(module)], check=True)
    hal = subprocess.run(
        [str(BIN / "iree-compile"), str(source), *flags, "--compile-to=hal"], check=True, capture_output=True, text=True
    ).stdout
    assert f"workgroups([%c{WORKGROUPS_PER_ITERATION}, %c1, %c1])" in hal, "unexpected grid"
    return module


def run_program(module: Path, events: list[str] | None, iterations: int, records_dir: Path) -> list[tuple[float, float]]:
    """One iree-benchmark-module run: (cpu ns, wall ns) per iteration for each repetition."""
    env = dict(os.environ) if events is None else hooked_env(events, records_dir)
    command = [
        str(BIN / "iree-benchmark-module"),
        f"--module={module}",
        "--function=main",
        "--device=local-sync",
        "--input=256x2048xf32=1",
        f"--benchmark_min_time={iterations}x",
        "--benchmark_repetitions=3",
        "--benchmark_format=json",
    ]
    result = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    runs = [b for b in json.loads(result.stdout)["benchmarks"] if b.get("run_type") == "iteration"]
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    recorded = 0
    for path in records_dir.glob("hook-*.tlhk"):
        records = read_hook_file(path).records
        recorded += 0 if records is None else len(records)
        path.unlink()
    if events is not None:
        expected = 3 * iterations * WORKGROUPS_PER_ITERATION
        assert recorded >= expected, f"only {recorded} workgroup records, expected >= {expected}"
    return [(run["cpu_time"] * scale[run["time_unit"]], run["real_time"] * scale[run["time_unit"]]) for run in runs]


def program_level(directory: Path, rounds: int, iterations: int) -> None:
    """Print the program-level comparison."""
    module = compile_program(directory)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in CONFIGS}
    names = list(CONFIGS)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].extend(run_program(module, CONFIGS[name], iterations, directory))
    print(f"1. Program level: {WORKGROUPS_PER_ITERATION} workgroup calls per iteration, local-sync (one thread),")
    print(f"   {len(samples['unhooked'])} samples per configuration ({rounds} rounds x 3 repetitions of {iterations} iterations)")
    print(f"   {'configuration':<14} {'cpu us/iter':>12} {'wall us/iter':>13} {'cpu ns/call':>12} {'wall ns/call':>13} {'target':>7}")
    base_cpu = statistics.median(cpu for cpu, _ in samples["unhooked"])
    base_wall = statistics.median(wall for _, wall in samples["unhooked"])
    for name in names:
        cpu = statistics.median(c for c, _ in samples[name])
        wall = statistics.median(w for _, w in samples[name])
        line = f"   {name:<14} {cpu / 1e3:>12.1f} {wall / 1e3:>13.1f}"
        if name in TARGET_NS:
            per_cpu = (cpu - base_cpu) / WORKGROUPS_PER_ITERATION
            per_wall = (wall - base_wall) / WORKGROUPS_PER_ITERATION
            verdict = "ok" if per_cpu <= TARGET_NS[name] else "OVER"
            line += f" {per_cpu:>12.0f} {per_wall:>13.0f} {TARGET_NS[name]:>7.0f}  {verdict}"
        print(line)
    noise = statistics.pstdev(w for _, w in samples["unhooked"]) / WORKGROUPS_PER_ITERATION
    print(f"   noise: stdev of the unhooked wall time per iteration / calls = {noise:.0f} ns per call")


def per_call(directory: Path) -> None:
    """Print the tight-loop measurement through the real trampoline path."""
    source, binary = directory / "micro.c", directory / "micro"
    source.write_text(MICRO)
    subprocess.run(["gcc", "-O2", f"-I{NATIVE}", str(source), "-o", str(binary), "-ldl", "-rdynamic"], check=True)
    print("2. Per call (tight loop, best of 7 trials):")
    for name, events, calls in (("timing only", [], 1_000_000), ("task-clock", ["task-clock"], 200_000)):
        output = subprocess.run(
            [str(binary), str(calls)], env=hooked_env(events, directory), check=True, capture_output=True, text=True
        ).stdout
        for path in directory.glob("hook-*.tlhk"):
            path.unlink()
        fields = dict(re.findall(r"(\w+)=([\d.]+)", output))
        assert fields["hooked"] == "1", "the hook did not wrap the fake library"
        added = float(fields["hooked_ns"]) - float(fields["direct_ns"])
        verdict = "ok" if added <= TARGET_NS[name] else "OVER"
        print(f"   {name:<14} {added:>8.1f} ns/call added  (target {TARGET_NS[name]:.0f})  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        program_level(Path(temp), args.rounds, args.iterations)
        per_call(Path(temp))


if __name__ == "__main__":
    main()
