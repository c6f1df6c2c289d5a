"""The strategy search's tuner: successive halving over whole-program lowering options, on the tuner
interface of :mod:`.loop`. Each batch is one race (:class:`Race`) of one stage:

1. every single option (and ``extra`` candidate) is built, checked and raced against the default;
2. the faster half of them (at most ``keep``, each faster by its point estimate) go on: each surviving
   *layout* option is combined with every set of the *lowering* options, and the survivors with each
   other (:func:`~tracelink.tune.strategy_space.combinations`); the new builds race together with the
   survivors;
3. the best few of the latest stage (``finalists``, the best single option among them) race again, for
   more rounds; the winner is the fastest of that race whose interval lies above 1 (:meth:`best`).

Measuring a race (building, checking and timing its candidates) is the caller's; a candidate measured
by a resumed session carries its earlier result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracelink.tune.strategy_space import Candidate, StrategyOptions, best_half, build_key, combinations, settle

FINAL_STAGE = 3


@dataclass
class Race:
    """One stage's batch: ``build`` to build, check and race against the default, together with ``also``
    (built already), for ``rounds`` alternating rounds."""

    stage: int
    rounds: int
    build: list[Candidate]
    also: list[Candidate] = field(default_factory=list)


class HalvingTuner:
    """Proposes the races of :mod:`successive halving <.halving>`; ``candidates`` is its state (every
    candidate proposed so far, with what was measured of it)."""

    name = "halving"

    def __init__(self, singles: list[Candidate], options: StrategyOptions):
        self.options = options
        self.singles = singles
        self.candidates: list[Candidate] = list(singles)
        self.survivors: list[Candidate] = []
        self.stage = 0  # the last stage proposed

    def has_next(self) -> bool:
        return self.stage < FINAL_STAGE

    def next_batch(self, size: int) -> list[Race]:
        """The next stage's race (a stage is one race, whatever ``size``); [] when a stage has nothing to
        race (no combination left to build, no finalist built)."""
        self.stage += 1
        if self.stage == 1:
            return [Race(1, self.options.first_rounds, list(self.singles))]
        if self.stage == 2:
            self.survivors = best_half(self.singles, self.options.keep)
            known = {build_key(c.option) for c in self.candidates}
            combos = [Candidate(option, stage=2) for option in combinations(self.survivors, self.singles)
                      if build_key(option) not in known]
            self.candidates += combos
            if combos:
                return [Race(2, self.options.first_rounds, combos, self.survivors)]
            self.stage += 1
        return self._final()

    def _final(self) -> list[Race]:
        """The last race: the best few of the latest stage timed, and the best single option."""
        latest = max((c.stage for c in self.candidates if c.ci is not None), default=0)
        finalists = best_half([c for c in self.candidates if c.ci is not None and c.stage == latest],
                              self.options.finalists)
        if self.survivors and self.survivors[0] not in finalists and self.survivors[0].vmfb is not None:
            finalists.append(self.survivors[0])
        finalists = [c for c in finalists if c.vmfb is not None]
        return [Race(FINAL_STAGE, self.options.final_rounds, [], finalists)] if finalists else []

    def update(self, batch: list[Race], results: list[object]) -> None:
        """Nothing to learn beyond what the race wrote on its candidates (their status and speedup)."""

    def best(self) -> Candidate | None:
        """The winner (:func:`~tracelink.tune.strategy_space.settle`)."""
        return settle(self.candidates)
