"""The tile search of `tracelink tune`, end to end: pick the hot tunable dispatches of a profile, search
each one's tile configs (:mod:`.tile_search`), check the winners inside the whole program and write
one tuning spec.

Everything measured goes to the record log (``<profile>/tune/records.jsonl``, :mod:`.trial_log`) as it
is measured, so an interrupted run keeps its trials and ``resume=True`` continues from them; what each
dispatch found (``summary.csv``'s rows) and the whole-program check (``program_check.json``) go there
too. The spec goes to ``<profile>/tune/spec.mlir`` unless another path is given.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from tracelink.atomic import make_directory, write_text_atomic
from tracelink.errors import TracelinkError
from tracelink.profile_dir.profile import Profile
from tracelink.tune.config import TuneConfig
from tracelink.tune.program_check import (baselines_alone, best_baseline, build_baselines, check_in_program,
                                          compare_with_flags, validate_in_program)
from tracelink.tune.progress import ProgressBar
from tracelink.tune.remote import RayWork
from tracelink.tune.space import TileSpace
from tracelink.tune.spec import Choice, Tuning, check_applied, signature, write_tuning
from tracelink.tune.targets import Outcome, Target, select_targets
from tracelink.tune.tile_search import search_tiles
from tracelink.tune.trial_log import TrialLog
from tracelink.tune.tuners.loop import Budget, Report
from tracelink.profile_dir import files


def shared_choices(choices: list[Choice], tunable: list[Target]) -> list[Choice]:
    """Each tuned config again for the other dispatches with the same root op (same signature) in an
    executable of their own: IREE keeps executables apart when their fused ops differ (a residual add
    after one of a network's identical convolutions), and a configured executable is substituted by
    name. A spec matcher already reaches every such op, so this is for configured executables only."""
    taken = {id(c.dispatch) for c in choices}
    shared = []
    for choice in sorted(choices, key=lambda c: -c.speedup):
        if choice.dispatch.delivery != "configuration":
            continue
        key = signature(choice.dispatch)
        for target in tunable:
            if id(target.dispatch) not in taken and target.dispatch.delivery == "configuration" and signature(target.dispatch) == key:
                taken.add(id(target.dispatch))
                shared.append(Choice(target.dispatch, choice.fields, choice.speedup, owner=choice.dispatch))
    return shared



def tune_profile(profile: Profile, config: TuneConfig, dispatch_name: str | None, resume: bool,
                 spec_path: Path | None, console: Console, budget: Budget = Budget(),
                 work: RayWork | None = None) -> tuple[list[Outcome], Tuning | None, dict | None]:
    """Tune the profile's hottest tunable dispatches (no search round starts after ``budget``'s deadline;
    with ``work``, their candidates are built and timed on Ray, the checks inside the program made here).

    Returns the outcomes, the tuning handed over (None: no gain) and the in-program check (None: not run;
    when no config was kept, the flag baselines alone, see :func:`baselines_alone`), each dispatch's
    outcome and the check recorded in the log."""
    targets, tunable = announce_targets(profile, config, dispatch_name, console)
    workdir = profile.directory / files.TUNE
    log = TrialLog(profile.directory, resume)
    outcomes = search_tiles(targets, config, workdir, log, console, budget, work)
    try:
        with ProgressBar(console) as bar:
            outcomes, tuning, check = select_tuning(profile, outcomes, tunable, config, workdir, spec_path, bar.report)
        if check is not None:
            log.program_check(check)
        return outcomes, tuning, check
    finally:  # one record per dispatch, as far as the checks got (an error or an interrupt included)
        log.outcomes(outcomes)


def announce_targets(profile: Profile, config: TuneConfig, dispatch_name: str | None,
                     console: Console) -> tuple[list[Target], list[Target]]:
    """The dispatches to tune and every tunable one, with what is skipped and why printed; a ``[space]``
    key that matches no loop of them is an error (a typo would otherwise search the default range)."""
    targets, tunable, skipped, tunable_share = select_targets(profile.exports, profile.call_sites, profile.artifacts,
                                                              config.select.top, dispatch_name)
    for target in skipped:
        console.print(f"[dim]skipped {escape(target.export)} ({target.share:.1%}): {escape(target.reason)}[/]", soft_wrap=True)
    console.print(f"tunable: {tunable_share:.1%} of the timed dispatch time; tuning {len(targets)} dispatch(es) "
                  f"with {sum(t.share for t in targets):.1%}; skipped {len(skipped)} with "
                  f"{sum(t.share for t in skipped):.1%}", soft_wrap=True)
    used = set()
    for target in targets:
        used |= set(TileSpace.knob_names_of(target.dispatch))
    unused = sorted(set(config.space.values) - used)
    if unused:
        raise TracelinkError(f"{config.source}: [space] key(s) {', '.join(unused)} match no loop of the tuned dispatches")
    return targets, tunable


def select_tuning(profile: Profile, outcomes: list[Outcome], tunable: list[Target], config: TuneConfig, workdir: Path,
                  spec_path: Path | None, report: Report) -> tuple[list[Outcome], Tuning | None, dict | None]:
    """The tuning handed over: the selected configs (and the dispatches sharing them) that apply when
    the program is compiled, hold up inside it and make the whole program faster (:func:`tune_profile`);
    each long step reported to ``report``."""
    choices = chosen_configs(outcomes, tunable, workdir)
    if not choices:
        return outcomes, None, baselines_alone(profile, workdir, config, report)
    output = Path(spec_path) if spec_path else None  # the user's -o is written only once the spec is final
    tuning = write_tuning(choices, workdir)
    if not (config.select.check_spec and profile.manifest.get("input")):
        return outcomes, deliver(tuning, output), None
    kept, tuning, vmfb = applied_in_program(profile, choices, outcomes, tuning, config, workdir, report)
    if not kept:
        return outcomes, None, baselines_alone(profile, workdir, config, report)
    if config.select.program_rounds < 2:
        return outcomes, deliver(tuning, output), None
    handed, check = whole_program_check(profile, tuning, kept, vmfb, config, workdir, report)
    return outcomes, deliver(handed, output) if handed else None, check


def chosen_configs(outcomes: list[Outcome], tunable: list[Target], workdir: Path) -> list[Choice]:
    """The selected configs, each also for the other dispatches with its root op (:func:`shared_choices`);
    an error when no dispatch found a working config at all."""
    if not any(o.configuration for o in outcomes):
        notes = "; ".join(o.note if o.note.startswith(o.export) else f"{o.export}: {o.note}" for o in outcomes)
        if any(o.trials for o in outcomes):
            raise TracelinkError(f"{workdir.parent / files.TUNE_TRIALS}: every candidate failed ({notes})")
        raise TracelinkError(notes)
    choices = [Choice(o.dispatch, o.fields, o.speedup) for o in outcomes if o.selected]
    for choice in shared_choices(choices, tunable) if choices else []:
        choices.append(choice)
        owner = next(o for o in outcomes if o.dispatch is choice.owner)
        owner.shared_with = ";".join(filter(None, [owner.shared_with, choice.dispatch.export]))
    return choices


def applied_in_program(profile: Profile, choices: list[Choice], outcomes: list[Outcome], tuning: Tuning,
                       config: TuneConfig, workdir: Path, report: Report) -> tuple[list[Choice], Tuning, Path]:
    """The choices that apply when the program is compiled with the tuning and (with ``validate_rounds``)
    are faster inside it, the tuning rebuilt with them alone and the program's build with it; no
    choices (the tuning removed) when none is left. The outcomes of the others get a note."""
    program, flags = Path(profile.manifest["input"]), profile.manifest.get("compiler", {}).get("flags", [])
    timeout = config.measure.compile_timeout_seconds
    report("compiling the program with the tuning", 0, 1)
    missed, vmfb = check_applied(program, flags, tuning, choices, workdir / "spec_check", timeout)
    for choice in missed:
        for outcome in outcomes:
            if outcome.dispatch is choice.dispatch:
                outcome.selected = False
                outcome.note = "the tuned config did not apply to this dispatch when compiling the program"
            elif outcome.dispatch is choice.owner:
                outcome.shared_with = ";".join(e for e in outcome.shared_with.split(";") if e != choice.dispatch.export)
    unapplied = {id(c.dispatch) for c in missed}  # a config that missed its tuned dispatch is not shared either
    kept = [c for c in choices if id(c.dispatch) not in unapplied and id(c.owner) not in unapplied]
    rebuild = bool(missed)
    if kept and config.select.validate_rounds >= 2:
        validated = validate_in_program(profile, kept, outcomes, workdir, config, report, vmfb)
        rebuild = rebuild or len(validated) < len(kept)
        kept = validated
    if not kept:
        tuning.remove()
        return [], tuning, vmfb
    if rebuild:
        tuning = write_tuning(kept, workdir)
        report("compiling the program with the configs kept", 0, 1)
        _, vmfb = check_applied(program, flags, tuning, kept, workdir / "spec_check", timeout)
    return kept, tuning, vmfb


def whole_program_check(profile: Profile, tuning: Tuning, kept: list[Choice], vmfb: Path, config: TuneConfig,
                        workdir: Path, report: Report) -> tuple[Tuning | None, dict]:
    """The program built with the tuning against the profiled build and IREE's flag baselines, in
    alternating rounds (the ``program_check`` record); the tuning to hand over (with the best baseline's
    flags when it is faster with them) or None (removed) when it does not make the program faster."""
    timeout = config.measure.compile_timeout_seconds
    baselines = build_baselines(profile, workdir / "baselines", timeout, report) if config.select.baselines else {}
    checks = check_in_program(profile, {"tuned": vmfb, **baselines}, config.select.program_rounds, report)
    check = {**checks.pop("tuned"), "tuned": True, "baselines": checks, "flags": None}
    best = best_baseline(checks)
    composed: Tuning | None = None
    if check["ci_low"] > 1 and best is not None:
        check["flags"], composed = compare_with_flags(profile, tuning, kept, vmfb, best, baselines[best], workdir, config, report)
    verdict = check["flags"]["verdict"] if check["flags"] else "tuning"
    if check["ci_low"] > 1 and verdict != "flags":
        if verdict == "tuning+flags":  # handed over with the flags it was checked with
            if composed is not tuning:  # only part of the tuning composes with the flags: hand over that part
                tuning.remove()
            tuning = Tuning(composed.spec, composed.configurations, check["flags"]["flags"])
        return tuning, check
    tuning.remove()  # a tuning that does not speed the whole program up is not handed to the user
    return None, check


def deliver(tuning: Tuning, output: Path | None) -> Tuning:
    """The final tuning, its spec copied (atomically) to the user's ``-o`` path when one was given."""
    if output is None or tuning.spec is None:
        return tuning
    make_directory(output.parent)
    write_text_atomic(output, tuning.spec.read_text())
    return Tuning(output, tuning.configurations, tuning.extra_flags)
