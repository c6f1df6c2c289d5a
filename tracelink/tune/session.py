"""`tracelink tune` as a whole: the strategy search first (``strategy``), then the tile search
(``run.tune_profile``) on the dispatches of the winning strategy's profile, within one time budget (the
deadline of the loop's :class:`~tracelink.tune.tuners.loop.Budget`, which both searches' loops stop at).

When a strategy wins, the tile search tunes the profile of the program built with it, so its
in-program checks and its final whole-program check compare against the winning strategy alone; the
flag baselines of the tile search are left out then (the strategy search raced those options already).
What is handed over is the winner's flags plus the tuning found on top of them (none: the flags alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console

from tracelink.errors import TracelinkError
from tracelink.profile_dir.profile import Profile, load_profile
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
        """The compiled program handed over (None: the default build is best)."""
        if self.tuning is not None:
            return self.tuned_profile.directory / files.TUNE / "spec_check" / files.VMFB
        if self.strategy_flags():
            return self.tuned_profile.artifacts / files.VMFB
        return None


def tune_session(profile: Profile, config: TuneConfig, dispatch_name: str | None, resume: bool, spec_path: Path | None,
                 console: Console, profile_build: ProfileBuild | None, work: RayWork | None = None) -> Session:
    """Search strategies (unless one dispatch was named or the search is off), then tiles; with ``work``
    the strategy search's builds and races run on Ray."""
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
            target, config, dispatch_name, resume, spec_path, console, budget)
    except TracelinkError as error:
        if strategies is None or strategies.winner is None:
            raise
        session.tile_note = f"tile search on {strategies.winner.name}: {one_line(error)}"
    return session

