"""`tracelink tune` as a whole: the strategy search first (``strategy``), then the tile search
(``run.tune_profile``) on the dispatches of the winning strategy's profile, within one time budget (the
deadline of the loop's :class:`~tracelink.tune.tuners.loop.Budget`, which both searches' loops stop at).

When a strategy wins, the tile search tunes the profile of the program built with it, so its
in-program checks and its final whole-program check compare against the winning strategy alone; the
flag baselines of the tile search are left out then (the strategy search raced those options already).
What is handed over is the winner's flags plus the tuning found on top of them (none: the flags alone).

Last, where the profile measured the framework's own run (``--compare``), that reference is raced against
IREE's default build and the handed-over build, and compared with both per line (:mod:`.anchor`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console

from tracelink.atomic import make_directory, write_text_atomic
from tracelink.errors import TracelinkError
from tracelink.profile_dir.profile import Profile, load_profile
from tracelink.tune.anchor import Anchor, anchor_lines, build_of, race_anchor
from tracelink.tune.config import TuneConfig
from tracelink.tune.remote import RayWork
from tracelink.tune.run import tune_profile
from tracelink.tune.targets import Outcome, one_line
from tracelink.tune.spec import Tuning
from tracelink.tune.strategy import ProfileBuild, SearchResult, search_strategies
from tracelink.tune.strategy_space import option_flags
from tracelink.tune.tuners.loop import Budget
from tracelink.profile_dir import files


@dataclass
class Session:
    """Everything one `tune` found."""

    strategies: SearchResult | None  # None: the strategy search did not run
    tuned_profile: Profile  # the profile the tile search ran on (the winner's, or the one given)
    outcomes: list[Outcome] = field(default_factory=list)
    tuning: Tuning | None = None
    check: dict | None = None
    tile_note: str = ""  # why the tile search did not run or found nothing, when it did not
    anchor: Anchor | None = None  # the framework's reference raced against the default and handed-over builds

    def strategy_flags(self) -> list[str]:
        """The winning strategy's flags ([]: the default build won)."""
        winner = self.strategies.winner if self.strategies else None
        return option_flags(winner.option) if winner else []

    def strategy_program(self) -> Path | None:
        """The rewritten program the winning strategy compiles (a per-op composition); None: the user's."""
        winner = self.strategies.winner if self.strategies else None
        return winner.program if winner else None

    def apply_flags(self) -> list[str]:
        """Every iree-compile flag of the build handed over: the strategy's, then the tuning's."""
        return [*self.strategy_flags(), *(self.tuning.flags() if self.tuning else [])]

    def handed_build(self) -> Path | None:
        """The compiled program handed over (None: the default build is best): the winning strategy's own build,
        raced in the search, profiled or not, or that build with the tuning on top."""
        if self.tuning is not None:
            return self.tuned_profile.directory / files.TUNE / "spec_check" / files.VMFB
        winner = self.strategies.winner if self.strategies else None
        return winner.vmfb if winner else None

    def winner_profiled(self) -> bool:
        """Whether the winning strategy has its own profile (the budget can run out before it is made)."""
        return bool(self.strategies and self.strategies.winner and self.strategies.winner.name in self.strategies.profiles)


def tune_session(profile: Profile, config: TuneConfig, dispatch_name: str | None, resume: bool, spec_path: Path | None,
                 console: Console, profile_build: ProfileBuild | None, work: RayWork | None = None) -> Session:
    """Search strategies (unless one dispatch was named or the search is off), then tiles; with ``work``
    the strategy search's builds and races and the tile search's candidate builds and timings run on
    Ray. Then the anchor race against the framework's reference (``[select] reference_rounds``; 0 or 1:
    not raced)."""
    session = search(profile, config, dispatch_name, resume, spec_path, console, profile_build, work)
    if config.select.reference_rounds >= 2:
        session.anchor = anchor_against_reference(profile, session, config, profile_build, console)
    return session


def search(profile: Profile, config: TuneConfig, dispatch_name: str | None, resume: bool, spec_path: Path | None,
           console: Console, profile_build: ProfileBuild | None, work: RayWork | None) -> Session:
    """The strategy search, then the tile search, within the budget."""
    budget = Budget.of_seconds(config.budget_s)
    strategies = None
    target = profile
    if config.strategy.enabled and dispatch_name is None and profile.manifest.get("input"):
        strategies = search_strategies(profile, config.strategy, budget, console,
                                       config.measure.compile_timeout_seconds, resume, profile_build, work)
        winner = strategies.winner
        if winner is not None and winner.name in strategies.profiles:
            target = load_profile(strategies.profiles[winner.name])
            config = replace(config, select=replace(config.select, baselines=False))
    session = Session(strategies, target)
    if strategies is not None and strategies.winner is not None and target is profile:
        session.tile_note = "the winning strategy was not profiled (the budget ran out); no tile search on it"
        return session
    if budget.left_s() <= 0:
        session.tile_note = "the --budget ran out before the tile search"
        return session
    try:
        session.outcomes, session.tuning, session.check = tune_profile(
            target, config, dispatch_name, resume, spec_path, console, budget, work)
    except TracelinkError as error:
        if strategies is None or strategies.winner is None:
            raise
        session.tile_note = f"tile search on {strategies.winner.name}: {one_line(error)}"
    return session



def anchor_against_reference(profile: Profile, session: Session, config: TuneConfig, profile_build: ProfileBuild | None,
                             console: Console) -> Anchor | None:
    """The profile's framework reference raced against IREE's default build and the handed-over build, and
    its per-line table against the handed-over build's profile (``tune/reference.json`` and
    ``tune/reference_lines.csv``); None when the profile has no reference."""
    timeout = config.measure.compile_timeout_seconds
    handed = session.handed_build()
    directory = make_directory(profile.directory / files.TUNE_REFERENCE_DIR, inside=profile.directory)
    with console.status("racing the framework's reference against IREE's default and the handed-over build"):
        anchor = race_anchor(profile, build_of(session.tuned_profile, handed, timeout) if handed else None,
                             config.select.reference_rounds, timeout, directory)
    if anchor is None:
        return None
    if anchor.error is None:
        after = handed_profile(profile, session, profile_build, console)
        reference_ns = anchor.comparisons()["default_vs_reference"]["base_ns"]
        per_line = session.strategies.per_line if session.strategies else []
        anchor.lines, anchor.after = anchor_lines(profile, after, reference_ns, per_line), after.directory
        write_text_atomic(profile.directory / files.TUNE_REFERENCE_LINES, anchor.lines.to_csv(index=False))
    write_text_atomic(profile.directory / files.TUNE_REFERENCE, json.dumps(anchor.record(), indent=1))
    return anchor


def handed_profile(profile: Profile, session: Session, profile_build: ProfileBuild | None, console: Console) -> Profile:
    """The profile of the build handed over: the base's when the default is best, the winning strategy's
    when no tuning was added to it, else the handed-over build profiled now (the tuned or unprofiled winner;
    the profile tuned on when it cannot be)."""
    if session.handed_build() is None:
        return profile
    if (session.tuning is None and session.winner_profiled()) or profile_build is None:
        return session.tuned_profile
    try:
        with console.status("profiling the build handed over, for its lines against the reference"):
            return load_profile(profile_build(session.apply_flags(), profile.directory / files.TUNE_HANDED,
                                              session.strategy_program()))
    except TracelinkError as error:
        console.print(f"the build handed over could not be profiled ({one_line(error)}); its lines are the strategy's",
                      markup=False, soft_wrap=True)
        return session.tuned_profile
