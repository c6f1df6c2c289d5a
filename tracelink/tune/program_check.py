"""The whole-program checks of the tile search: each tuned config inside the program (under the HAL
profiler), the program with the tuning against the profiled build, and IREE's flag baselines timed in
the same alternating rounds (what a user would try first). Each long step (a build, every round) is
reported to the caller's ``report`` (the progress bar); the caller records the checks in the log."""

from __future__ import annotations

from pathlib import Path

from tracelink.errors import TracelinkError
from tracelink.profile_dir.profile import Profile
from tracelink.tune.config import TuneConfig
from tracelink.compare.diff import rerun, run_inputs, run_parameters
from tracelink.collect.rounds import alternate, time_program
from tracelink.tune.spec import Choice, Tuning, check_applied, compile_variant, write_tuning
from tracelink.aggregate.speedup import summarize
from tracelink.tune.targets import Outcome, one_line
from tracelink.tune.tuners.loop import Report, no_report
from tracelink.profile_dir import files


# What a user would try first: IREE's whole-program options, timed next to the tuned build.
FLAG_BASELINES = {
    "ukernels": ["--iree-llvmcpu-enable-ukernels=all"],
    "data-tiling": ["--iree-opt-data-tiling"],
    "ukernels+data-tiling": ["--iree-llvmcpu-enable-ukernels=all", "--iree-opt-data-tiling"],
}


def build_baselines(profile: Profile, workdir: Path, timeout: float, report: Report = no_report) -> dict[str, Path]:
    """The program compiled with each flag baseline; one that does not compile is left out."""
    program, flags = Path(profile.manifest["input"]), profile.manifest.get("compiler", {}).get("flags", [])
    builds = {}
    for number, (name, extra) in enumerate(FLAG_BASELINES.items()):
        report("compiling the program with IREE's flag baselines", number, len(FLAG_BASELINES))
        try:
            builds[name] = compile_variant(program, flags, extra, workdir / name, timeout, " ".join(extra))
        except TracelinkError:
            continue
    return builds


def check_in_program(profile: Profile, builds: dict[str, Path], rounds: int, report: Report,
                     base: Path | None = None) -> dict[str, dict]:
    """Each build of the whole program against ``base`` (default: the profiled build), all timed
    alternately for ``rounds`` rounds."""
    function, inputs, parameters = profile.summary["function"], run_inputs(profile), run_parameters(profile)
    calls = max(5, int(profile.summary.get("repetitions", 10)))
    runs = [lambda _, v=v: time_program(v, function, inputs, parameters, calls, 600.0)
            for v in (base or profile.artifacts / files.VMFB, *builds.values())]
    what = f"timing the program's builds ({', '.join(builds)}) against the {base.parent.name if base else 'profiled'} one"
    base, *others = alternate(runs, rounds, lambda number: report(what, number, rounds))
    return {name: summarize(base, times) for name, times in zip(builds, others)}


def best_baseline(baselines: dict[str, dict]) -> str | None:
    """The flag baseline with the largest speedup over the profiled build among those whose 95 % interval
    lies above 1; None when no baseline is significantly faster."""
    faster = {name: check for name, check in baselines.items() if check["ci_low"] > 1}
    return max(faster, key=lambda name: faster[name]["speedup"]) if faster else None


def composable_with(choices: list[Choice], flags: list[str]) -> list[Choice]:
    """The choices that can apply together with ``flags``. Data tiling turns contractions into ``mmt4d``
    ops after the tuning matched them, so a config tuned for the matmul would land on an op of another
    shape (IREE 3.13 then fails to build the dispatch's pass pipeline); those are left to the flags."""
    if "--iree-opt-data-tiling" not in flags:
        return choices
    return [choice for choice in choices if choice.dispatch.kind != "contraction"]


def compare_with_flags(profile: Profile, tuning: Tuning, choices: list[Choice], tuned: Path, name: str,
                       flags_build: Path, workdir: Path, config: TuneConfig, report: Report) -> tuple[dict, Tuning | None]:
    """The tuning against the flag baseline ``name``, which beat the profiled build: the program with
    the tuning and the flags, and with the tuning alone, each timed against the flags alone in
    alternating rounds. The verdict is the faster of the two when its 95 % interval over the flags
    lies above 1 (``tuning+flags`` or ``tuning``), else ``flags``: the flags are the better choice.

    With data tiling, the tuned contractions are left out of the composition (:func:`composable_with`);
    ``composed`` says how many configs went in, ``applied`` how many of those applied. Returns the
    comparison and the tuning that was composed with the flags (None: no composition was built)."""
    program, flags = Path(profile.manifest["input"]), profile.manifest.get("compiler", {}).get("flags", [])
    extra = FLAG_BASELINES[name]
    builds = {"tuning": tuned}
    composable = composable_with(choices, extra)
    notes = [f"{len(choices) - len(composable)} tuned contraction(s) left to data tiling"] if len(composable) < len(choices) else []
    applied, composed_tuning = 0, None
    if composable:
        try:
            composed_tuning = tuning if len(composable) == len(choices) else write_tuning(composable, workdir / "composed_tuning")
            report(f"compiling the program with the tuning and {name}", 0, 1)
            missed, composed = check_applied(program, [*flags, *extra], composed_tuning, composable, workdir / "composed",
                                             config.measure.compile_timeout_seconds)
            builds["tuning+flags"] = composed
            applied = len(composable) - len(missed)
        except TracelinkError as error:  # the tuning cannot be built with these flags: only the tuning alone competes
            notes.append(one_line(error))
            composed_tuning = None
    checks = check_in_program(profile, builds, config.select.program_rounds, report, base=flags_build)
    winners = {build: check for build, check in checks.items() if check["ci_low"] > 1}
    verdict = max(winners, key=lambda build: winners[build]["speedup"]) if winners else "flags"
    comparison = {"baseline": name, "flags": extra, "composed": len(composable), "applied": applied, "configs": len(choices),
                  "note": "; ".join(notes), "tuning+flags": checks.get("tuning+flags"), "tuning": checks["tuning"], "verdict": verdict}
    return comparison, composed_tuning


def dispatch_median(profile: Profile, exports: set[str]) -> float:
    """Median over iterations of the time (ns) the dispatches ``exports`` take in one call of the program."""
    events = profile.events.dropna(subset=["iteration"])
    times = events[events["export"].isin(exports)].groupby("iteration")["duration_ns"].sum()
    if times.empty:
        raise TracelinkError(f"{profile.directory}: the rerun recorded no dispatch of {', '.join(sorted(exports))}")
    return float(times.median())


def in_program_speedup(profile: Profile, vmfb: Path, exports: set[str], rounds: int, directory: Path,
                       report: Report) -> dict:
    """How much faster the dispatches ``exports`` run inside the program built as ``vmfb`` than in the
    profiled build: both run alternately under the HAL profiler (other dispatches around them, the
    program's device and threads), each round giving one median per build (see
    ``aggregate.speedup.summarize``); each round reported to ``report``."""
    calls = max(5, int(profile.summary.get("repetitions", 10)))
    runs = [lambda number, v=v, n=n: dispatch_median(rerun(profile, directory / f"{n}_{number}", calls, 600.0, vmfb=v), exports)
            for v, n in ((None, "base"), (vmfb, "tuned"))]
    what = f"timing {', '.join(sorted(exports))} inside the program"
    base, tuned = alternate(runs, rounds, lambda number: report(what, number, rounds))
    return summarize(base, tuned)


def validate_in_program(profile: Profile, choices: list[Choice], outcomes: list[Outcome], workdir: Path,
                        config: TuneConfig, report: Report, merged: Path) -> list[Choice]:
    """The choices whose dispatches are significantly faster inside the whole program; the others are
    dropped with a note. Each tuned config is built alone with the dispatches sharing it (the merged
    build ``merged`` serves when there is only one), so a config that wins in isolation but loses
    among the program's other dispatches is caught."""
    program, flags = Path(profile.manifest["input"]), profile.manifest.get("compiler", {}).get("flags", [])
    groups: dict[int, list[Choice]] = {}
    for choice in choices:
        groups.setdefault(id(choice.owner or choice.dispatch), []).append(choice)
    kept = []
    for group in groups.values():
        tuned = group[0].owner or group[0].dispatch
        outcome = next(o for o in outcomes if o.dispatch is tuned)
        where = workdir / "validate" / tuned.export
        vmfb = merged
        if len(groups) > 1:
            report(f"compiling the program with {tuned.export}'s config alone", 0, 1)
            _, vmfb = check_applied(program, flags, write_tuning(group, where), group, where / "build",
                                    config.measure.compile_timeout_seconds)
        exports = {c.dispatch.export for c in group}
        check = in_program_speedup(profile, vmfb, exports, config.select.validate_rounds, where / "rounds", report)
        outcome.program_speedup, outcome.program_ci_low, outcome.program_ci_high = check["speedup"], check["ci_low"], check["ci_high"]
        if check["ci_low"] > 1:
            kept += group
        else:
            outcome.selected = False
            outcome.note = (f"{outcome.speedup:.2f}x alone, but {check['speedup']:.2f}x inside the program "
                            f"(95% CI {check['ci_low']:.2f}-{check['ci_high']:.2f}, {check['rounds']} rounds): not kept")
    return kept


def baselines_alone(profile: Profile, workdir: Path, config: TuneConfig, report: Report) -> dict | None:
    """When no config was kept: IREE's flag baselines timed against the profiled build, so that `tune` can
    say when a whole-program option does what tile configs could not (``best``: the fastest baseline whose
    95 % interval lies above 1, else None). None when the whole-program check or the baselines are off."""
    if config.select.program_rounds < 2 or not config.select.baselines or not profile.manifest.get("input"):
        return None
    baselines = build_baselines(profile, workdir / "baselines", config.measure.compile_timeout_seconds, report)
    if not baselines:
        return None
    checks = check_in_program(profile, baselines, config.select.program_rounds, report)
    best = best_baseline(checks)
    return {"tuned": False, "baselines": checks, "best": best, "best_flags": FLAG_BASELINES[best] if best else None}
