"""Strategy search: the IREE compiler options that change how the whole program is lowered, searched
before any tile config (``tracelink tune`` runs this first, then tunes tiles on the winner's dispatches).

The space (:data:`OPTIONS`, each flag verified by compiling with IREE 3.13.0): convolutions through
im2col + matmul, channels-last convolution layout, data tiling, ukernels, data tiling extended to
convolutions, transpose propagation through convolutions, attention decomposed into matmuls and a
softmax (only where the program has attention). Each candidate is

1. compiled (the profiled build's flags, without its dumps, plus the candidate's);
2. checked: its outputs on the profiled inputs against the default build's (:func:`outputs_agree`);
3. timed against the default build in alternating rounds (``rounds.alternate`` / ``stats.summarize``:
   the geometric mean of per-round ratios with a Student's t 95 % interval).

The search is successive halving with a model of which options interact: every single option races
the default in a short race; the faster half (at most ``keep``, each faster by its point estimate)
go on. Each surviving *layout* option (what convolutions become) is combined with every set of the
*lowering* options (data tiling, ukernels: they act on the matmuls a layout option makes, so they can
help together and not alone), and the survivors with each other; these are built, checked and raced
in a short race together with the survivors. Last, the best few of that race (the best single option
among them) race again in a longer race, and the winner is the largest speedup of that race whose
interval lies above 1: never slower than the best single option set raced in the same rounds.
After the per-line table, :meth:`StrategySearch.compose` builds per-op compositions
(:mod:`tracelink.tune.compose`, :func:`composition_plans`): an im2col winner that leaves the
convolutions the table shows it slowing to the default lowering, and a profiled strategy without
im2col that takes im2col on the convolutions the table shows an im2col strategy making clearly faster.
One of them replaces the winner only when a race shows it faster than the winner.

Data contract (read by the report's advice, written atomically after every candidate, so an interrupt
keeps what was measured and ``--resume`` continues): ``PROFILE/tune/strategies.json`` =

    {"schema": 1,
     "base": {"flags": [str]},                       # the profiled build's flags (dumps left out)
     "strategies": [{"name": str, "flags": [str],     # flags added to the base to build it
                     "status": "faster" | "not faster" | "compile failed" | "wrong outputs" | "not run",
                     "reason": str,                   # why (the error, the largest output difference,
                                                      #  the speedup and interval, or the budget)
                     "ratio": float | null,           # default time / strategy time (> 1: faster)
                     "ci": [lo, hi] | null,           # 95 % interval of ratio
                     "program": str | null}],          # a per-op composition's rewritten program
     "per_line": [{"file": str, "line": int, "op_kind": str, "strategy": str,
                   "base_ns": float, "strategy_ns": float, "ratio": float}]}

``per_line`` comes from profiling each faster strategy and diffing it against the base profile by
source location (:func:`tracelink.tune.diff.diff_profiles`, which matches ops across fusion changes,
both programs run again alternately): one row per model line (library frames folded into the model
line calling them, as the summary ranks lines) and op kind that takes time in both builds; base_ns and
strategy_ns add up the medians over the rounds of the line's ops, ratio is base_ns / strategy_ns
(> 1: the strategy made the line faster).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tracelink.errors import TracelinkError, first_line
from tracelink.aggregate import user_lines
from tracelink.aggregate.advice import HELPED
from tracelink.atomic import make_directory, write_text_atomic
from tracelink.frames import LIBRARY_FRAMES
from tracelink.profile_dir import Profile
from tracelink.iree_tools import run_module_command
from tracelink.tools import run_checked
from tracelink.tune.compose import IM2COL, KEEP_DEFAULT, PER_OP_LAYOUT, Rewrite, compose, input_program, source_lines
from tracelink.tune.diff import diff_profiles, run_inputs, run_parameters
from tracelink.tune.rounds import alternate, time_program
from tracelink.tune.stats import summarize
from tracelink.tune.spec import DUMP_FLAG_PREFIXES, compile_variant

SCHEMA = 1
STATUSES = (  # the values of a strategy's "status" in strategies.json
    "faster", "not faster", "compile failed", "wrong outputs", "not run")
PREPROCESSING = "--iree-preprocessing-pass-pipeline="


@dataclass(frozen=True)
class Option:
    """One lowering choice: plain iree-compile flags and/or passes of the preprocessing pipeline (one
    flag holds the whole pipeline, so options with passes are merged into a single flag)."""

    name: str
    flags: tuple[str, ...] = ()
    passes: tuple[str, ...] = ()
    # "layout": changes what the convolutions become; "lowering": how contractions are lowered (data
    # tiling, ukernels), which matters once convolutions are matmuls; "other": extra candidates
    role: str = "other"


OPTIONS: tuple[Option, ...] = (
    # convolutions as im2col + matmul (the global-optimization flag of 3.13)
    Option("im2col", ("--iree-global-opt-use-im2col-for-convs",), role="layout"),
    # NCHW convolutions rewritten as NHWC with transposes around them
    Option("channels-last", passes=("iree-preprocessing-convert-conv-to-channels-last",), role="layout"),
    # matmuls packed into tiled layouts (mmt4d); without ukernels codegen vectorizes the tiles
    Option("data-tiling", ("--iree-opt-data-tiling",), role="lowering"),
    Option("ukernels", ("--iree-llvmcpu-enable-ukernels=all",), role="lowering"),
    # data tiling for convolutions too (the option is a list: repeated, not comma-separated), with the
    # ukernels for the mmt4d ops it makes: on real-weight squeezenet without them 0.86x, with them 5.7x
    Option("conv-data-tiling", ("--iree-opt-data-tiling", "--iree-dispatch-creation-experimental-set-data-tiling-ops=matmul",
                                "--iree-dispatch-creation-experimental-set-data-tiling-ops=convolution",
                                "--iree-llvmcpu-enable-ukernels=all"), role="layout"),
    # transposes (e.g. of channels-last) propagated through convolutions and into named ops
    Option("transposes", ("--iree-global-opt-propagate-transposes-through-conv", "--iree-opt-aggressively-propagate-transposes"),
           role="layout"),
    # attention (iree_linalg_ext.attention) as its online form decomposed into matmuls, max, exp2, sums and a
    # scale, before global optimization, so data tiling reaches its matmuls: on a ViT (384 wide, 6 layers,
    # 197 tokens) 1.8x alone, 8.9x with data tiling, where IREE's attention dispatch runs one query row
    # at a time (docs/reference/tuning.md). Searched only where the program has attention.
    Option("decompose-attention", passes=("iree-linalg-ext-convert-attention-to-online-attention", "iree-linalg-ext-decompose-attention",
                                          "canonicalize", "cse"), role="layout"),
)
# Options that act on one kind of op only: searched where a dispatch of the profile has that root op.
ROOT_OP_OF = {"decompose-attention": "iree_linalg_ext.attention"}


def combine(options: list[Option]) -> Option:
    """Several options as one build: flags in order without repeats, passes in one pipeline."""
    flags = tuple(dict.fromkeys(flag for option in options for flag in option.flags))
    passes = tuple(dict.fromkeys(p for option in options for p in option.passes))
    return Option("+".join(option.name for option in options), flags, passes)


def option_flags(option: Option) -> list[str]:
    """The iree-compile flags of an option (its passes as one preprocessing pipeline)."""
    pipeline = [f"{PREPROCESSING}builtin.module(util.func({','.join(option.passes)}))"] if option.passes else []
    return [*option.flags, *pipeline]


# The reason of a strategy an earlier, shorter race found faster and the final race did not confirm.
UNCONFIRMED = "read faster in an earlier race, not confirmed by the final race"


@dataclass
class Candidate:
    """A strategy being searched and what was measured of it (one entry of strategies.json)."""

    option: Option
    status: str = "not run"
    reason: str = ""
    ratio: float | None = None
    ci: list[float] | None = None
    vmfb: Path | None = None
    stage: int = 1
    program: Path | None = None  # a rewritten program (per-op composition); None: the profiled one

    @property
    def name(self) -> str:
        return self.option.name

    def entry(self) -> dict:
        return {"name": self.name, "flags": option_flags(self.option), "status": self.status, "reason": self.reason,
                "ratio": self.ratio, "ci": self.ci, "program": str(self.program) if self.program else None}


@dataclass
class StrategyOptions:
    """The [strategy] table of tune.toml."""

    enabled: bool = True
    only: list = field(default_factory=list)  # names of OPTIONS to search (empty: all of them)
    # outputs agree when every element differs from the default build's by at most this fraction of the
    # output's largest magnitude (see outputs_agree)
    tolerance: float = 1e-3
    first_rounds: int = 3  # alternating rounds of the races of single options and of combinations
    final_rounds: int = 6  # ... and of the final race of the best few
    keep: int = 2  # single options that go on to combinations (at most)
    finalists: int = 3  # builds of the latest stage raced again in the final race (at most)
    diff_rounds: int = 3  # alternating rounds of each faster strategy's per-line diff against the base
    profile_top: int = 2  # faster strategies profiled for the per-line table (see profile_order)
    compose: bool = True  # try the profiled strategies per convolution (tracelink.tune.compose)
    # alternating rounds of the compositions against the winner: they are 5-15 % apart (squeezenet:
    # 1.05-1.14x; resnet50: 1.02-1.07x), which 16 rounds on a busy 2-core machine did not always resolve
    compose_rounds: int = 30
    calls: int = 5  # calls of the program per timed run
    # extra candidates: name = [flags] (e.g. a numerics-changing demotion, to see it refused)
    extra: dict = field(default_factory=dict)


def outputs_agree(reference: list[np.ndarray], outputs: list[np.ndarray], tolerance: float) -> tuple[bool, str]:
    """Whether a build's outputs equal the default's up to float reassociation, with the largest difference.

    The options reorder f32 sums (im2col, packing, ukernels), which changes results by rounding only:
    relative to a dot product's magnitude, a reassociated sum of K terms moves by about sqrt(K) x 2^-24
    (~1e-5 for K = 4608, the longest reduction of resnet50) per layer, compounding over layers to a
    few 1e-4 at most; measured on real-weight squeezenet: 1e-6 of the output's largest magnitude. An
    option that computes in narrower types moves every product by 2^-9 (bf16) or 2^-12 (f16) relative,
    1e-3 to 1e-2 after a network. So the default tolerance is 1e-3 of the output's largest magnitude,
    elementwise; NaN or infinity where the default has a finite value fails."""
    if len(reference) != len(outputs):
        return False, f"{len(outputs)} outputs, the default build has {len(reference)}"
    worst = 0.0
    for index, (ref, out) in enumerate(zip(reference, outputs)):
        if ref.shape != out.shape:
            return False, f"output {index} has shape {out.shape}, the default's {ref.shape}"
        ref64, out64 = ref.astype(np.float64), out.astype(np.float64)
        finite = np.isfinite(ref64)
        if not np.array_equal(finite, np.isfinite(out64)) or not np.array_equal(ref64[~finite], out64[~finite]):
            return False, f"output {index}: NaN or infinity where the default build has none"
        scale = float(np.abs(ref64[finite]).max()) if finite.any() else 0.0
        difference = float(np.abs(ref64[finite] - out64[finite]).max()) if finite.any() else 0.0
        relative = difference / scale if scale > 0 else (0.0 if difference == 0 else math.inf)
        worst = max(worst, relative)
        if relative > tolerance:
            return False, (f"output {index} differs from the default build's by {difference:.3g} "
                           f"({relative:.2g} of its largest magnitude {scale:.3g}; tolerance {tolerance:g})")
    return True, f"outputs agree with the default build's ({worst:.2g} of the largest magnitude at most)"


def result_count(vmfb: Path, function: str, inputs: list[str], parameters: list[str], timeout: float) -> int:
    """How many results ``function`` returns: the ``result[i]`` headers of one run (elements not printed)."""
    done = _run(vmfb, function, inputs, parameters, ["--output_max_element_count=0"], timeout)
    return max(1, len(re.findall(r"^result\[\d+\]", done.stdout, flags=re.MULTILINE)))


def _run(vmfb: Path, function: str, inputs: list[str], parameters: list[str], extra: list[str],
         timeout: float) -> subprocess.CompletedProcess:
    command = run_module_command(vmfb, function, inputs, parameters, extra=extra)
    return run_checked(command, timeout, vmfb, "running the program")


def run_outputs(vmfb: Path, function: str, inputs: list[str], parameters: list[str], count: int, directory: Path,
                timeout: float) -> list[np.ndarray]:
    """The program's results on the profiled inputs, through .npy files in ``directory``."""
    make_directory(directory)
    paths = [directory / f"result{i}.npy" for i in range(count)]
    _run(vmfb, function, inputs, parameters, [f"--output=@{p}" for p in paths], timeout)
    return [np.load(p) for p in paths]


class Budget:
    """Wall-clock seconds for the whole of `tune`; the strategy search stops starting work past it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = time.monotonic()

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def deadline(self) -> float:
        return self.started + self.seconds


@dataclass
class SearchResult:
    """What the strategy search found: every candidate, the winner (None: keep the default build)."""

    candidates: list[Candidate]
    winner: Candidate | None
    base_flags: list[str]
    per_line: list[dict] = field(default_factory=list)
    profiles: dict[str, Path] = field(default_factory=dict)  # strategy name -> its profile directory

    def document(self) -> dict:
        return {"schema": SCHEMA, "base": {"flags": self.base_flags},
                "strategies": [c.entry() for c in self.candidates], "per_line": self.per_line}


def strategies_path(profile: Profile) -> Path:
    return profile.directory / "tune" / "strategies.json"


def write_strategies(result: SearchResult, path: Path) -> Path:
    make_directory(path.parent)
    return write_text_atomic(path, json.dumps(result.document(), indent=2, allow_nan=False))


def read_strategies(path: Path) -> dict | None:
    """An earlier search's strategies.json (None when absent); a file of another schema is an error."""
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise TracelinkError(f"{path}: corrupt strategies table ({error}); move it away to start afresh") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise TracelinkError(f"{path}: not a strategies table of this tracelink (schema differs); move it away to start afresh")
    return document


class StrategySearch:
    """Successive halving over :data:`OPTIONS` (and ``extra`` candidates) for one profile."""

    def __init__(self, profile: Profile, options: StrategyOptions, budget: Budget, console: Console,
                 compile_timeout: float, resume: bool):
        self.profile, self.options, self.budget, self.console = profile, options, budget, console
        self.timeout = compile_timeout
        self.program = Path(profile.manifest["input"])
        self.flags = list(profile.manifest.get("compiler", {}).get("flags", []))
        self.function = profile.summary["function"]
        self.inputs, self.parameters = run_inputs(profile), run_parameters(profile)
        self.workdir = profile.directory / "tune" / "strategies"
        self.path = strategies_path(profile)
        earlier = read_strategies(self.path) if resume else None
        self.earlier = {entry["name"]: entry for entry in (earlier or {}).get("strategies", [])}
        roots = set(profile.call_sites["root_op"].dropna()) if "root_op" in profile.call_sites else set()
        chosen = [option for option in OPTIONS if (not options.only or option.name in options.only)
                  and (option.name not in ROOT_OP_OF or ROOT_OP_OF[option.name] in roots)]
        singles = [*chosen, *(Option(name, tuple(flags)) for name, flags in options.extra.items())]
        self.result = SearchResult([Candidate(option) for option in singles], None,
                                   [f for f in self.flags if not f.startswith(DUMP_FLAG_PREFIXES)])
        self.reference: list[np.ndarray] | None = None

    def save(self) -> None:
        write_strategies(self.result, self.path)

    def run(self) -> SearchResult:
        """Race the single options, then combinations of the best, then the finalists; every step saved."""
        self.save()
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("ETA"), TimeRemainingColumn(), console=self.console, transient=True) as progress:
            singles = list(self.result.candidates)
            task = progress.add_task("strategies: single options", total=len(singles) + 1)
            self._stage(singles, self.options.first_rounds, progress, task, [], stage=1)
            survivors = _best_half(singles, self.options.keep)
            combos = [Candidate(option, stage=2) for option in combinations(survivors, singles)]
            known = {frozenset(option_flags(c.option)) for c in self.result.candidates}  # same flags: same build
            combos = [c for c in combos if frozenset(option_flags(c.option)) not in known]
            self.result.candidates += combos
            self.save()
            if combos:
                progress.update(task, description="strategies: combinations of the best", completed=0,
                                total=len(combos) + 1)
                self._stage(combos, self.options.first_rounds, progress, task, survivors, stage=2)
            # the last race: the best few of the latest stage (the best single option among them), more rounds
            latest = max((c.stage for c in self.result.candidates if c.ci is not None), default=0)
            finalists = _best_half([c for c in self.result.candidates if c.ci is not None and c.stage == latest],
                                   self.options.finalists)
            if survivors and survivors[0] not in finalists and survivors[0].vmfb is not None:
                finalists.append(survivors[0])
            finalists = [c for c in finalists if c.vmfb is not None]
            if finalists and self.budget.left() > 0:
                progress.update(task, description=f"strategies: final race of {len(finalists)}, "
                                f"{self.options.final_rounds} rounds", completed=0, total=1)
                self._race(finalists, self.options.final_rounds, stage=3)
                self.save()
        self.result.winner = settle(self.result.candidates)
        self.save()
        return self.result

    def _stage(self, candidates: list[Candidate], rounds: int, progress: Progress, task, also: list[Candidate],
               stage: int) -> None:
        """Build and check ``candidates``, then race the good ones (and ``also``) against the default."""
        for candidate in candidates:
            if self._resumed(candidate):
                progress.advance(task)
                continue
            if self.budget.left() <= 0:
                candidate.status, candidate.reason = "not run", "the --budget ran out before it"
                progress.advance(task)
                continue
            progress.update(task, description=f"strategies: building {candidate.name}")
            self._build_and_check(candidate)
            self.save()
            progress.advance(task)
        racing = [c for c in candidates if c.vmfb is not None and c.status in ("not run", "faster", "not faster")
                  and not (c.ci is not None and self._kept(c))]
        racing += [c for c in also if c.vmfb is not None and c not in racing]
        if racing and self.budget.left() > 0:
            progress.update(task, description=f"strategies: racing {len(racing)} build(s) against the default, "
                            f"{rounds} rounds")
            self._race(racing, rounds, stage=stage)
            self.save()
        elif racing:
            for candidate in racing:
                if candidate.ci is None:
                    candidate.status, candidate.reason = "not run", "built and checked; the --budget ran out before timing it"
        progress.advance(task)

    def _kept(self, candidate: Candidate) -> bool:
        """A candidate timed by an earlier (resumed) session is not raced again."""
        return candidate.name in self.earlier and self.earlier[candidate.name].get("ci") is not None

    def _resumed(self, candidate: Candidate) -> bool:
        """Take an earlier session's verdict on ``candidate`` when it is final (a failure, or timed with
        its build still on disk)."""
        entry = self.earlier.get(candidate.name)
        if entry is None or entry.get("flags") != option_flags(candidate.option) or entry.get("status") == "not run":
            return False
        vmfb = self.workdir / _directory_name(candidate.name) / "app.vmfb"
        if entry["status"] in ("compile failed", "wrong outputs"):
            candidate.status, candidate.reason = entry["status"], entry["reason"]
            return True
        if not vmfb.is_file():
            return False
        candidate.status, candidate.reason, candidate.ratio, candidate.ci = (entry["status"], entry["reason"],
                                                                             entry["ratio"], entry["ci"])
        candidate.vmfb = vmfb
        return True

    def _reference(self) -> list[np.ndarray]:
        if self.reference is None:
            base = self.profile.artifacts / "app.vmfb"
            count = result_count(base, self.function, self.inputs, self.parameters, 600.0)
            self.reference = run_outputs(base, self.function, self.inputs, self.parameters, count,
                                         self.workdir / "default_outputs", 600.0)
        return self.reference

    def _build_and_check(self, candidate: Candidate, directory: Path | None = None) -> None:
        directory = directory or self.workdir / _directory_name(candidate.name)
        try:
            vmfb = compile_variant(candidate.program or self.program, self.flags, option_flags(candidate.option),
                                   directory, self.timeout, candidate.name)
        except TracelinkError as error:
            candidate.status, candidate.reason = "compile failed", first_line(error)
            return
        reference = self._reference()
        try:
            outputs = run_outputs(vmfb, self.function, self.inputs, self.parameters, len(reference),
                                  directory / "outputs", 600.0)
        except TracelinkError as error:
            candidate.status, candidate.reason = "wrong outputs", f"the build does not run: {first_line(error)}"
            return
        agree, why = outputs_agree(reference, outputs, self.options.tolerance)
        candidate.reason = why
        if not agree:
            candidate.status = "wrong outputs"
            return
        candidate.vmfb = vmfb

    def _race(self, racing: list[Candidate], rounds: int, stage: int) -> list[list[float]]:
        """Time the default build and ``racing`` alternately; each gets its speedup, interval and status.
        Returns the per-round times of the default, then of each of ``racing``."""
        calls = self.options.calls
        builds = [self.profile.artifacts / "app.vmfb", *(c.vmfb for c in racing)]
        runs = [lambda _, v=v: time_program(v, self.function, self.inputs, self.parameters, calls, 600.0) for v in builds]
        times = alternate(runs, max(2, rounds))
        for candidate, own in zip(racing, times[1:]):
            check = summarize(times[0], own)
            candidate.ratio, candidate.ci, candidate.stage = check["speedup"], [check["ci_low"], check["ci_high"]], stage
            candidate.status = "faster" if check["ci_low"] > 1 else "not faster"
            candidate.reason = (f"{check['speedup']:.2f}x the default build (95% CI {check['ci_low']:.2f}-"
                                f"{check['ci_high']:.2f}, {check['rounds']} alternating rounds with "
                                f"{len(racing)} build(s))")
        return times

    def compose(self) -> list[Candidate]:
        """Per-op compositions (:mod:`tracelink.tune.compose`) as :func:`composition_plans` lays them
        out: each program rewritten per convolution, built with its host strategy's flags, checked, then
        raced against the default and the winner together. The fastest that is significantly faster
        than the winner becomes the winner. Returns the compositions built."""
        winner = self.result.winner
        plans = composition_plans(winner, self.result.candidates, self.result.per_line) if winner is not None else []
        if not plans or self.budget.left() <= 0:
            return []
        directory = self.workdir / "per-op"
        candidates = [Candidate(Option(f"per-op {host.name}", host.option.flags, host.option.passes), stage=4)
                      for host, _, _ in plans]
        self.result.candidates += candidates
        try:
            make_directory(directory, self.profile.directory)  # no link on the way: the compiler writes below it
            source = input_program(self.program, self.flags, directory / "input", self.timeout)
        except TracelinkError as error:
            for candidate in candidates:
                candidate.status, candidate.reason = "compile failed", first_line(error)
            self.save()
            return candidates
        built: list[tuple[Candidate, str]] = []
        for candidate, (host, rewrite, lines) in zip(candidates, plans):
            if self.budget.left() <= 0:
                candidate.reason = "the --budget ran out before it"
                continue
            own = directory / _directory_name(host.name)
            try:
                composition = compose(source, own / "program.mlir", lambda op: bool(source_lines(op) & lines), rewrite,
                                      self.profile.directory)
            except TracelinkError as error:
                candidate.status, candidate.reason = "compile failed", first_line(error)
                continue
            if not composition.rewritten:  # no convolution on those lines: the host's own program
                self.result.candidates.remove(candidate)
                continue
            candidate.program = composition.program
            what = (f"{rewrite.name} for {composition.rewritten} of {composition.convolutions} convolutions, "
                    f"the {host.name} build's for the others")
            self._build_and_check(candidate, own / "build")
            if candidate.vmfb is None:
                candidate.reason = f"{what}: {candidate.reason}"
            else:
                built.append((candidate, what))
            self.save()
        if not built:
            return [c for c in candidates if c in self.result.candidates]
        stand_in = Candidate(winner.option, vmfb=winner.vmfb)  # the winner keeps what the final race measured
        times = self._race([stand_in, *(c for c, _ in built)], self.options.compose_rounds, stage=4)
        proven: list[tuple[float, Candidate]] = []
        for (candidate, what), own_times in zip(built, times[2:]):
            against = summarize(times[1], own_times)
            candidate.reason = (f"{what}; {candidate.reason}; {against['speedup']:.2f}x the {winner.name} build "
                                f"(95% CI {against['ci_low']:.2f}-{against['ci_high']:.2f})")
            if candidate.status == "faster" and against["ci_low"] > 1:
                proven.append((against["speedup"], candidate))
        if proven:
            self.result.winner = max(proven, key=lambda pair: pair[0])[1]
        self.save()
        return [c for c in candidates if c in self.result.candidates]


def settle(candidates: list[Candidate]) -> Candidate | None:
    """The winner: the fastest of the significantly faster candidates of the last race (the longest).

    When the last race found none faster, a candidate an earlier, shorter race found faster becomes
    "not faster" (:data:`UNCONFIRMED`): the advice and the summary then agree that nothing was."""
    timed = [c for c in candidates if c.ci is not None]
    last = max((c.stage for c in timed), default=0)
    winners = [c for c in timed if c.stage == last and c.status == "faster"]
    if not winners:
        for candidate in timed:
            if candidate.status == "faster":
                candidate.status, candidate.reason = "not faster", f"{UNCONFIRMED}: {candidate.reason}"
    return max(winners, key=lambda c: c.ratio or 0.0) if winners else None


def layouts(name: str) -> list[str] | None:
    """The layout options of a strategy named by :func:`combine`; None: not a combination of
    :data:`OPTIONS` (an ``extra`` candidate, a composition)."""
    known = {option.name: option for option in OPTIONS}
    parts = [known.get(part) for part in name.split("+")]
    return None if None in parts else [option.name for option in parts if option.role == "layout"]


def composition_plans(winner: Candidate, candidates: list[Candidate],
                      per_line: list[dict]) -> list[tuple[Candidate, Rewrite, set[tuple[str, int]]]]:
    """The per-op compositions the per-line table calls for (:mod:`tracelink.tune.compose`): each a
    host strategy whose flags build it, the rewrite, and the source lines whose convolutions get it.

    - ``winner``, when its layout is im2col alone, keeps the default lowering where the table shows it
      clearly slower than the default;
    - ``winner`` and each other faster profiled strategy without im2col (conv data tiling,
      channels-last) take im2col where the table shows a strategy with im2col clearly faster than
      that host (both diffed against the same default build: their ratios compare).

    "Clearly" is as the advice calls a line helped (``HELPED``): a clear change, not the scatter of one
    diff. A host with im2col among other layouts composes neither way (channels-last and conv data
    tiling cannot be kept off single convolutions in IREE 3.13)."""
    ratios: dict[str, dict[tuple[str, int, str], float]] = {}
    for row in per_line:
        ratios.setdefault(row["strategy"], {})[row["file"], int(row["line"]), row["op_kind"]] = row["ratio"]
    plans = []
    if layouts(winner.name) == [PER_OP_LAYOUT]:
        slowed = {(file, line) for (file, line, _), ratio in ratios.get(winner.name, {}).items() if ratio * HELPED <= 1}
        if slowed:
            plans.append((winner, KEEP_DEFAULT, slowed))
    with_im2col = [name for name in ratios if PER_OP_LAYOUT in (layouts(name) or [])]
    hosts = [winner, *(c for c in candidates if c is not winner and c.status == "faster" and c.name in ratios)]
    for host in hosts:
        own = layouts(host.name)
        if own is None or PER_OP_LAYOUT in own or host.name not in ratios:
            continue
        faster = {(file, line) for name in with_im2col for (file, line, kind), ratio in ratios[name].items()
                  if ratio >= HELPED * ratios[host.name].get((file, line, kind), math.inf)}
        if faster:
            plans.append((host, IM2COL, faster))
    return plans


def _best_half(candidates: list[Candidate], most: int) -> list[Candidate]:
    """The faster half (by point estimate, faster than the default) of timed candidates, at most ``most``."""
    hopeful = sorted((c for c in candidates if c.ratio is not None and c.ratio > 1 and c.vmfb is not None),
                     key=lambda c: -c.ratio)
    return hopeful[: max(1, min(most, (len(hopeful) + 1) // 2))] if hopeful else []


def combinations(survivors: list[Candidate], singles: list[Candidate]) -> list[Option]:
    """What stage 2 builds: each surviving layout option with every non-empty set of the contraction
    lowering options (data tiling and ukernels act on the matmuls that im2col or channels-last make, so
    they can help together and not alone: measured on squeezenet, data tiling alone 1.0x, im2col 6.4x,
    both 6.5x; channels-last 2.3x, with data tiling 3.5x), then the survivors together; the
    most promising first, so a short budget reaches them. Duplicates (same flags) are left out."""
    lowering = [c.option for c in singles if c.option.role == "lowering"]
    built: list[Option] = []
    for survivor in survivors:
        if survivor.option.role != "layout":
            continue
        for size in range(len(lowering), 0, -1):
            built += [combine([survivor.option, *group]) for group in itertools.combinations(lowering, size)]
    built += [combine([c.option for c in group]) for size in range(2, len(survivors) + 1)
              for group in itertools.combinations(survivors, size)]
    unique: dict[frozenset, Option] = {}
    for option in built:
        unique.setdefault(frozenset(option_flags(option)), option)
    return list(unique.values())


def _directory_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name)


def per_line_rows(base: Profile, strategy_dir: Path, name: str, rounds: int) -> list[dict]:
    """The per-line rows of one strategy: its profile diffed against the base by source op, one row per
    model line (the line the summary ranks an op's time under: library frames fold into the model line
    calling them) and op kind that takes time in both builds. The ops of one line (a 6-layer model's six
    attention ops, all called from one line) add up; the row's ratio is their base time over their time
    in the strategy's build, each a median over the alternating rounds."""
    frame = diff_profiles(base.directory, strategy_dir, rounds=rounds)
    ops = base.source_ops.drop_duplicates(["label"]).set_index("label")
    kinds = ops["op_kinds"] if "op_kinds" in ops.columns else None
    line_of = model_lines(base)
    totals: dict[tuple[str, int, str], list[float]] = {}
    for row in frame.itertuples():
        if not isinstance(row.file, str) or not row.file or pd.isna(row.line):
            continue
        if not (row.base_ns > 0 and row.tuned_ns > 0):
            continue
        kind = kinds.get(row.label, "") if kinds is not None else ""
        op = ops["op"].get(row.label) if "op" in ops.columns else None
        file, line = line_of.get(op, (row.file, int(row.line)))
        pair = totals.setdefault((file, line, str(kind) if isinstance(kind, str) else ""), [0.0, 0.0])
        pair[0] += float(row.base_ns)
        pair[1] += float(row.tuned_ns)
    return [{"file": file, "line": line, "op_kind": kind, "strategy": name, "base_ns": base_ns, "strategy_ns": tuned_ns,
             "ratio": base_ns / tuned_ns} for (file, line, kind), (base_ns, tuned_ns) in totals.items()]


def model_lines(profile: Profile) -> dict[str, tuple[str, int]]:
    """Each source op's model line under the profile's own frame rules (:func:`user_lines`)."""
    return user_lines(profile.graph, tuple(profile.summary.get("library_frames") or LIBRARY_FRAMES))


ProfileBuild = Callable[[list[str], Path, Path | None], Path]  # (extra flags, directory, program) -> the directory


def search_strategies(profile: Profile, options: StrategyOptions, budget: Budget, console: Console,
                      compile_timeout: float, resume: bool, profile_build: ProfileBuild | None) -> SearchResult:
    """The whole strategy search, then the per-line table of the faster strategies (profiled with
    ``profile_build`` while the budget lasts; None: no per-line table), then the per-op compositions,
    the one that wins profiled too."""
    search = StrategySearch(profile, options, budget, console, compile_timeout, resume)
    result = search.run()
    for candidate in profile_order(result)[: max(1, options.profile_top)] if profile_build else []:
        _profile_strategy(profile, result, candidate, options, budget, console, profile_build)
    if options.compose and profile_build and result.winner is not None and result.winner.name in result.profiles:
        with console.status("composing strategies per op: building and racing the compositions"):
            search.compose()
        if result.winner.program is not None:  # a composition won
            _profile_strategy(profile, result, result.winner, options, budget, console, profile_build)
    return result


def profile_order(result: SearchResult) -> list[Candidate]:
    """The faster strategies in the order they are profiled for the per-line table: the winner first
    (the tile search runs on its profile), then the fastest on the other side of im2col (with it when the
    winner has none, without it when the winner has it: the table then shows what both ways of lowering
    a convolution do to each line, and :func:`composition_plans` can mix them), then the rest, fastest
    first."""
    faster = sorted((c for c in result.candidates if c.status == "faster"), key=lambda c: -(c.ratio or 0))
    if result.winner is not None:
        faster = [result.winner, *(c for c in faster if c is not result.winner)]
    first: dict[bool, Candidate] = {}
    for candidate in faster:
        first.setdefault(PER_OP_LAYOUT in (layouts(candidate.name) or []), candidate)
    return [*first.values(), *(c for c in faster if c not in first.values())]


def _profile_strategy(profile: Profile, result: SearchResult, candidate: Candidate, options: StrategyOptions,
                      budget: Budget, console: Console, profile_build: ProfileBuild) -> None:
    """Profile the program built with ``candidate`` and add its per-line rows (while the budget lasts)."""
    if budget.left() <= 0:
        return
    directory = profile.directory / "tune" / "strategies" / _directory_name(candidate.name) / "profile"
    try:
        with console.status(f"profiling the program built with {candidate.name} and diffing it line by line"):
            profile_build(option_flags(candidate.option), directory, candidate.program)
            result.per_line += per_line_rows(profile, directory, candidate.name, options.diff_rounds)
    except TracelinkError as error:  # one strategy's profile failing leaves it out of the table, the rest go on
        console.print(f"no per-line table for {candidate.name}: {first_line(error)}", markup=False)
        return
    result.profiles[candidate.name] = directory
    write_strategies(result, strategies_path(profile))
