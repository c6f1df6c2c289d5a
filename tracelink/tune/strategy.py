"""Strategy search: the IREE compiler options that change how the whole program is lowered, searched
before any tile config (``tracelink tune`` runs this first, then tunes tiles on the winner's dispatches).

The space (:data:`OPTIONS`, each flag verified by compiling with IREE 3.13.0): convolutions through
im2col + matmul, channels-last convolution layout, data tiling, ukernels, data tiling extended to
convolutions, transpose propagation through convolutions, attention decomposed into matmuls and a
softmax (only where the program has attention), and rewrites of the program itself where it has their
ops (:mod:`tracelink.tune.rewrites`: 1-D convolutions as 2-D ones, patch embeddings and grouped
convolutions as matmuls). Each candidate is

1. compiled (the profiled build's flags, without its dumps, plus the candidate's; a candidate with a
   rewrite compiles the rewritten program, which is what it hands over);
2. checked: its outputs on the profiled inputs against the default build's (:func:`outputs_agree`);
3. timed against the default build in alternating rounds (``rounds.alternate`` /
   ``aggregate.speedup.summarize``: the geometric mean of per-round ratios with a Student's t 95 %
   interval).

The search is successive halving with a model of which options interact, a tuner on the interface
the tile tuners share (:mod:`tracelink.tune.tuners.halving`), driven by their loop
(:mod:`tracelink.tune.tuners.loop`): each batch is one race, which this module measures. The winner is
the largest speedup of the final race whose interval lies above 1: never slower than the best single
option set raced in the same rounds.
After the per-line table, :meth:`StrategySearch.compose` builds per-op compositions
(:mod:`tracelink.tune.compose`, :func:`composition_plans`): an im2col winner that leaves the
convolutions the table shows it slowing to the default lowering, and a profiled strategy without
im2col that takes im2col on the convolutions the table shows an im2col strategy making clearly faster.
One of them replaces the winner only when a race shows it faster than the winner.

Everything measured goes to the record log (:mod:`tracelink.profile_dir.tune_record`, which derives
``strategies.json`` from it), after every candidate and every race (a callback of the loop), so an
interrupt keeps what was measured and ``--resume`` continues; the loop stops at the budget's deadline,
and the races it left out are recorded as not run. ``per_line`` comes from profiling each faster
strategy and diffing it against the base profile (:mod:`tracelink.tune.per_line`). Every long step is
reported to the progress bar (:mod:`tracelink.tune.progress`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console

from tracelink.errors import TracelinkError, first_line
from tracelink.profile_dir.tune_record import STRATEGY_KINDS, STRATEGY_WHERE, RecordLog, resumed_strategies, strategies_document
from tracelink.atomic import make_directory
from tracelink.profile_dir.profile import Profile
from tracelink.tune.compose import PER_OP_LAYOUT, compose, composition_plans, input_program, source_lines
from tracelink.compare.diff import run_inputs, run_parameters
from tracelink.collect.outputs import outputs_agree, result_count, run_outputs
from tracelink.tune.per_line import per_line_rows
from tracelink.tune.progress import ProgressBar
from tracelink.tune.rewrites import rewrites_found, rewritten_program
from tracelink.tune.remote import BuildJob, LostError, RayWork
from tracelink.collect.rounds import alternate, time_program
from tracelink.tune.spec import DUMP_FLAG_PREFIXES, compile_variant
from tracelink.aggregate.speedup import summarize
from tracelink.tune.strategy_space import (OPTIONS, ROOT_OP_OF, Candidate, Option, StrategyOptions, directory_name, layouts,
                                           option_flags)
from tracelink.tune.tuners.halving import FINAL_STAGE, HalvingTuner, Race
from tracelink.tune.tuners.loop import DEADLINE, AfterBatch, Budget, Callback, Report, no_report, tune
from tracelink.profile_dir import files


@dataclass
class SearchResult:
    """What the strategy search found: every candidate, the winner (None: keep the default build)."""

    candidates: list[Candidate]
    winner: Candidate | None
    base_flags: list[str]
    per_line: list[dict] = field(default_factory=list)
    profiles: dict[str, Path] = field(default_factory=dict)  # strategy name -> its profile directory

    def document(self) -> dict:
        return strategies_document(self.base_flags, [c.entry() for c in self.candidates], self.per_line)


class StrategySearch:
    """The strategy search of one profile: the halving tuner (:mod:`tracelink.tune.tuners.halving`) over
    :data:`OPTIONS` (and ``extra`` candidates) proposes races, which this class measures (builds, checks
    and times) in the loop within ``budget`` (its deadline; a race's builds stop at it too); the record
    log is appended to after every measured step, and every step reported to ``report``."""

    def __init__(self, profile: Profile, options: StrategyOptions, budget: Budget, compile_timeout: float, resume: bool,
                 report: Report = no_report, work: RayWork | None = None):
        self.profile, self.options, self.budget, self.report = profile, options, budget, report
        self.timeout = compile_timeout
        self.program = Path(profile.manifest["input"])
        self.flags = list(profile.manifest.get("compiler", {}).get("flags", []))
        self.function = profile.summary["function"]
        self.inputs, self.parameters = run_inputs(profile), run_parameters(profile)
        self.workdir = profile.directory / files.TUNE / "strategies"
        self.log = RecordLog(profile.directory, STRATEGY_KINDS, resume)
        self.earlier = resumed_strategies(self.log) if resume else {}
        # on Ray: builds and races run as its tasks, and an earlier session's recorded races are not run again
        self.work, self.built = work, {}
        if work is not None:
            work.record_to(self.log, STRATEGY_WHERE)
        self.raced = {(r["stage"], frozenset(r["names"])) for r in self.log.of_kind("placement") if r["what"] == "race"}
        roots = set(profile.call_sites["root_op"].dropna()) if "root_op" in profile.call_sites else set()
        found = rewrites_found(profile.artifacts / "phases")  # a rewrite is searched where it has ops to rewrite
        chosen = [option for option in OPTIONS if (not options.only or option.name in options.only)
                  and (option.name not in ROOT_OP_OF or ROOT_OP_OF[option.name] in roots) and set(option.rewrites) <= found]
        self.rewritten: dict[tuple[str, ...], Path] = {}  # the rewritten program of each set of rewrites
        singles = [*chosen, *(Option(name, tuple(flags)) for name, flags in options.extra.items())]
        self.tuner = HalvingTuner([Candidate(option) for option in singles], options)
        self.result = SearchResult(self.tuner.candidates, None,  # one list: what the tuner proposed is the record
                                   [f for f in self.flags if not f.startswith(DUMP_FLAG_PREFIXES)])
        self.reference: list[np.ndarray] | None = None
        self.log.append([{"kind": "strategies", "base_flags": self.result.base_flags}])
        self.logged: dict[str, dict] = {}  # each candidate's entry as last recorded in this search
        self.logged_rows: list[dict] = []

    def save(self) -> None:
        """Record what changed since the last save (a candidate proposed or measured, one left out, new
        per-line rows) in the log (which writes strategies.json)."""
        entries = {candidate.name: candidate.entry() for candidate in self.result.candidates}
        records = [{"kind": "strategy", **entry} for name, entry in entries.items() if self.logged.get(name) != entry]
        records += [{"kind": "strategy", "name": name, "removed": True} for name in self.logged if name not in entries]
        rows = [row for row in self.result.per_line if row not in self.logged_rows]
        records += [{"kind": "per_line", **row} for row in rows]
        if records:
            self.log.append(records)
        self.logged, self.logged_rows = entries, self.logged_rows + rows

    def run(self, callbacks: Sequence[Callback] = ()) -> SearchResult:
        """Race the single options, then combinations of the best, then the finalists, in the loop; every
        step saved. The races the budget left out are recorded as not run."""
        self.save()
        stop = tune(self.tuner, lambda races: [self._measure(race) for race in races], self.budget, 1,
                    [AfterBatch(lambda races, results: self.save()), *callbacks])
        while stop == DEADLINE and self.tuner.has_next():  # each candidate left out says why
            for race in self.tuner.next_batch(1):
                self._measure(race)
        self.result.winner = self.tuner.best()
        self.save()
        return self.result

    def _measure(self, race: Race) -> None:
        """Build, check and time one race's candidates, as the budget allows."""
        race.build = [candidate for candidate in race.build if self._rewrite(candidate)]
        if race.stage == FINAL_STAGE:
            if self.budget.left_s() > 0:
                self._race(race.also, race.rounds, stage=race.stage)
            return
        self._stage(race.build, race.rounds, race.also, stage=race.stage)

    def _stage(self, candidates: list[Candidate], rounds: int, also: list[Candidate], stage: int) -> None:
        """Build and check ``candidates``, then race the good ones (and ``also``) against the default."""
        what = f"strategies: building and checking {'single options' if stage == 1 else 'combinations of the best'}"
        fresh = [candidate for candidate in candidates if not self._resumed(candidate)]
        if self.work is not None and fresh and self.budget.left_s() > 0:  # all at once, across the cluster
            self.built = self.work.build_all([self._job(candidate) for candidate in fresh])
        for done, candidate in enumerate(candidates):
            self.report(what, done, len(candidates))
            if candidate not in fresh:
                continue
            if self.budget.left_s() <= 0:
                candidate.status, candidate.reason = "not run", "the --budget ran out before it"
                continue
            self._build_and_check(candidate)
            self.save()
        racing = [c for c in candidates if c.vmfb is not None and c.status in ("not run", "faster", "not faster")
                  and not (c.ci is not None and self._kept(c))]
        racing += [c for c in also if c.vmfb is not None and c not in racing]
        if racing and self.budget.left_s() > 0:
            self._race(racing, rounds, stage=stage)
            self.save()
        elif racing:
            for candidate in racing:
                if candidate.ci is None:
                    candidate.status, candidate.reason = "not run", "built and checked; the --budget ran out before timing it"

    def _rewrite(self, candidate: Candidate) -> bool:
        """Give a candidate with rewrites its rewritten program (:mod:`tracelink.tune.rewrites`, made once
        per set of rewrites); False when the rewrite fails (the candidate then says why)."""
        rewrites = candidate.option.rewrites
        if not rewrites or candidate.program is not None:
            return True
        try:
            if rewrites not in self.rewritten:
                self.rewritten[rewrites] = rewritten_program(self.program, self.flags, rewrites, self.workdir / "rewrites",
                                                             self.timeout, self.profile.directory)
        except TracelinkError as error:
            candidate.status, candidate.reason = "compile failed", f"rewriting the program: {first_line(error)}"
            return False
        candidate.program = self.rewritten[rewrites]
        return True

    def _kept(self, candidate: Candidate) -> bool:
        """A candidate timed by an earlier (resumed) session is not raced again."""
        return candidate.name in self.earlier and self.earlier[candidate.name].ci is not None

    def _resumed(self, candidate: Candidate) -> bool:
        """Take an earlier session's verdict on ``candidate`` when it is final (a failure, or timed with
        its build still on disk)."""
        entry = self.earlier.get(candidate.name)
        if entry is None or list(entry.flags) != option_flags(candidate.option) or entry.status == "not run":
            return False
        vmfb = self.workdir / directory_name(candidate.name) / files.VMFB
        if entry.status in ("compile failed", "wrong outputs"):
            candidate.status, candidate.reason = entry.status, entry.reason
            return True
        if not vmfb.is_file():
            return False
        candidate.status, candidate.reason, candidate.ratio = entry.status, entry.reason, entry.ratio
        candidate.ci = list(entry.ci) if entry.ci else None
        candidate.vmfb = vmfb
        return True

    def _reference(self) -> list[np.ndarray]:
        if self.reference is None:
            base = self.profile.artifacts / files.VMFB
            count = result_count(base, self.function, self.inputs, self.parameters, 600.0)
            self.reference = run_outputs(base, self.function, self.inputs, self.parameters, count,
                                         self.workdir / "default_outputs", 600.0)
        return self.reference

    def _job(self, candidate: Candidate, directory: Path | None = None) -> BuildJob:
        return BuildJob(candidate.name, candidate.program or self.program, self.flags, option_flags(candidate.option),
                        directory or self.workdir / directory_name(candidate.name), self.timeout)

    def _compile(self, candidate: Candidate, directory: Path | None) -> Path:
        """The candidate's build: compiled here, or on Ray (built with its stage, or now)."""
        job = self._job(candidate, directory)
        if self.work is None:
            return compile_variant(job.program, job.flags, job.extra, job.directory, job.timeout, job.name)
        built = self.built.pop(job.name, None) or self.work.build_all([job])[job.name]
        if isinstance(built, TracelinkError):
            raise built
        return built

    def _build_and_check(self, candidate: Candidate, directory: Path | None = None) -> None:
        directory = directory or self.workdir / directory_name(candidate.name)
        try:
            vmfb = self._compile(candidate, directory)
        except LostError as error:
            candidate.status, candidate.reason = "not run", first_line(error)
            return
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

    def _race(self, racing: list[Candidate], rounds: int, stage: int) -> list[list[float]] | None:
        """Time the default build and ``racing`` alternately; each gets its speedup, interval and status.
        Returns the per-round times of the default, then of each of ``racing`` (None: not raced, an
        earlier session's race kept, or lost on Ray)."""
        calls = self.options.calls
        builds = [self.profile.artifacts / files.VMFB, *(c.vmfb for c in racing)]
        race = "final race" if stage == FINAL_STAGE else "race"
        what, rounds = f"strategies: {race} of {len(racing)} build(s) against the default", max(2, rounds)
        if self.work is None:
            runs = [lambda _, v=v: time_program(v, self.function, self.inputs, self.parameters, calls, 600.0) for v in builds]
            return self._settle_race(racing, alternate(runs, rounds, lambda number: self.report(what, number, rounds)), stage)
        names = [c.name for c in racing]
        if (stage, frozenset(names)) in self.raced and all(c.ci is not None for c in racing):
            for candidate in racing:  # what the earlier session's race measured stands
                candidate.stage = stage
            return None
        self.report(what, 0, 1)
        try:
            return self.work.race(builds, self.function, self.inputs, self.parameters, calls, rounds, names, stage,
                                  lambda times: self._settle_race(racing, times, stage))
        except LostError as error:
            for candidate in racing:
                if candidate.ci is None:
                    candidate.status, candidate.reason = "not run", first_line(error)
            return None

    def _settle_race(self, racing: list[Candidate], times: list[list[float]], stage: int) -> list[list[float]]:
        """Each of ``racing`` gets its speedup over the default (``times[0]``), interval and status; saved."""
        for candidate, own in zip(racing, times[1:]):
            check = summarize(times[0], own)
            candidate.ratio, candidate.ci, candidate.stage = check["speedup"], [check["ci_low"], check["ci_high"]], stage
            candidate.status = "faster" if check["ci_low"] > 1 else "not faster"
            candidate.reason = (f"{check['speedup']:.2f}x the default build (95% CI {check['ci_low']:.2f}-"
                                f"{check['ci_high']:.2f}, {check['rounds']} alternating rounds with "
                                f"{len(racing)} build(s))")
        self.save()
        return times

    def compose(self) -> list[Candidate]:
        """Per-op compositions (:mod:`tracelink.tune.compose`) as :func:`composition_plans` lays them
        out: each program rewritten per convolution, built with its host strategy's flags, checked, then
        raced against the default and the winner together. The fastest that is significantly faster
        than the winner becomes the winner. Returns the compositions built."""
        winner = self.result.winner
        plans = composition_plans(winner, self.result.candidates, self.result.per_line) if winner is not None else []
        if not plans or self.budget.left_s() <= 0:
            return []
        candidates = [Candidate(Option(f"per-op {host.name}", host.option.flags, host.option.passes), stage=4)
                      for host, _, _ in plans]
        self.result.candidates += candidates
        built = self._build_compositions(candidates, plans)
        if built:
            self._race_compositions(winner, built)
        return [c for c in candidates if c in self.result.candidates]

    def _build_compositions(self, candidates: list[Candidate], plans: list) -> list[tuple[Candidate, str]]:
        """Rewrite, build and check each planned composition while the budget lasts; those built, each
        with what it rewrote. A composition that rewrote nothing is dropped (it is its host's program)."""
        directory = self.workdir / "per-op"
        try:
            make_directory(directory, self.profile.directory)  # no link on the way: the compiler writes below it
            source = input_program(self.program, self.flags, directory / "input", self.timeout)
        except TracelinkError as error:
            for candidate in candidates:
                candidate.status, candidate.reason = "compile failed", first_line(error)
            self.save()
            return []
        built: list[tuple[Candidate, str]] = []
        for done, (candidate, (host, rewrite, lines)) in enumerate(zip(candidates, plans)):
            self.report("strategies: composing per op, building and checking", done, len(plans))
            if self.budget.left_s() <= 0:
                candidate.reason = "the --budget ran out before it"
                continue
            own = directory / directory_name(host.name)
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
        return built

    def _race_compositions(self, winner: Candidate, built: list[tuple[Candidate, str]]) -> None:
        """Race the compositions ``built`` against the default and ``winner``; the fastest proven faster
        than the winner takes its place."""
        stand_in = Candidate(winner.option, vmfb=winner.vmfb)  # the winner keeps what the final race measured
        times = self._race([stand_in, *(c for c, _ in built)], self.options.compose_rounds, stage=4)
        if times is None:
            return
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


ProfileBuild = Callable[[list[str], Path, Path | None], Path]  # (extra flags, directory, program) -> the directory


def search_strategies(profile: Profile, options: StrategyOptions, budget: Budget, console: Console,
                      compile_timeout: float, resume: bool, profile_build: ProfileBuild | None,
                      work: RayWork | None = None) -> SearchResult:
    """The whole strategy search, then the per-line table of the faster strategies (profiled with
    ``profile_build`` while the budget lasts; None: no per-line table), then the per-op compositions,
    the one that wins profiled too; a progress bar with an ETA shows every step."""
    with ProgressBar(console, "strategies: races", total=FINAL_STAGE) as bar:
        search = StrategySearch(profile, options, budget, compile_timeout, resume, bar.report, work)
        if work is not None:
            work.status = bar.status
        result = search.run([bar])
        for candidate in profile_order(result)[: max(1, options.profile_top)] if profile_build else []:
            _profile_strategy(search, candidate, profile_build, console)
        if options.compose and profile_build and result.winner is not None and result.winner.name in result.profiles:
            search.compose()
            if result.winner.program is not None:  # a composition won
                _profile_strategy(search, result.winner, profile_build, console)
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


def _profile_strategy(search: StrategySearch, candidate: Candidate, profile_build: ProfileBuild, console: Console) -> None:
    """Profile the program built with ``candidate`` and add its per-line rows (while the budget lasts)."""
    profile, result, options = search.profile, search.result, search.options
    if search.budget.left_s() <= 0:
        return
    directory = profile.directory / files.TUNE / "strategies" / directory_name(candidate.name) / "profile"
    try:
        search.report(f"strategies: profiling the program built with {candidate.name} and diffing it line by line", 0, 1)
        profile_build(option_flags(candidate.option), directory, candidate.program)
        result.per_line += per_line_rows(profile, directory, candidate.name, options.diff_rounds)
    except TracelinkError as error:  # one strategy's profile failing leaves it out of the table, the rest go on
        console.print(f"no per-line table for {candidate.name}: {first_line(error)}", markup=False)
        return
    result.profiles[candidate.name] = directory
    search.save()
