"""The tune configuration: a TOML file with [space], [search], [measure], [select] and [strategy] tables.

Every key is optional; command-line options override the file. See examples/tune.toml.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tracelink.errors import TracelinkError
from tracelink.tune.measure import MeasureOptions
from tracelink.tune.space import SpaceOptions
from tracelink.tune.strategy_space import OPTIONS, StrategyOptions
from tracelink.tune.tuners import TUNERS


@dataclass
class SearchOptions:
    tuner: str = "xgb"
    n_trial: int = 32  # trials per target on average (allocated by expected gain), the default config not counted
    early_stopping: int = 16  # stop a dispatch after this many trials without a new best (0: never)
    batch_size: int = 8  # candidates compiled in parallel, and the cost model's re-fit interval
    seed: int = 0
    # xgb: start each dispatch from a model of the trials of earlier dispatches on this machine, kept
    # across runs in ~/.cache/tracelink/models/ (false: every dispatch starts from random trials)
    transfer: bool = True


@dataclass
class SelectOptions:
    top: int = 3  # hottest tunable dispatches to tune
    min_speedup: float = 1.03  # a config enters the spec only if at least this much faster ...
    confidence: float = 0.95  # ... and the lower bound of this confidence interval is above 1
    confirm_top: int = 2  # best candidates re-timed against the default before choosing
    confirm_rounds: int = 16  # interleaved re-timing rounds (paired samples; at least 6 for a 95% interval)
    check_spec: bool = True  # compile the program with the spec and check every config applied
    # then time the whole program with and without the spec in this many alternating rounds and keep
    # the spec only when the 95 % interval of its end-to-end speedup lies above 1 (0: do not time)
    program_rounds: int = 10
    baselines: bool = True  # time the flag baselines (ukernels, data tiling) in the same rounds
    # before that, each config alone: the program built with it and the profiled build run alternately
    # under the HAL profiler for this many rounds, and the config is kept only when the 95 % interval
    # of its dispatch's in-program speedup lies above 1 (0: no per-config check)
    validate_rounds: int = 5
    # last, the profile's framework reference (--compare) raced against IREE's default build and the build
    # handed over in this many alternating rounds, and compared per line (0: not raced)
    reference_rounds: int = 5


@dataclass
class TuneConfig:
    space: SpaceOptions = field(default_factory=SpaceOptions)
    search: SearchOptions = field(default_factory=SearchOptions)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    select: SelectOptions = field(default_factory=SelectOptions)
    strategy: StrategyOptions = field(default_factory=StrategyOptions)
    budget_s: float = 1200.0  # wall-clock seconds for the strategy search and the tile search together
    source: Path | None = None


def _fill(options, table: dict, name: str, where: str) -> None:
    for key, value in table.items():
        if not hasattr(options, key):
            raise TracelinkError(f"{where}: unknown key '{key}' in [{name}] (expected one of: {', '.join(vars(options))})")
        expected = type(getattr(options, key))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or (isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0):
            raise TracelinkError(f"{where}: [{name}] {key} must be a non-negative {expected.__name__}, got {value!r}")
        setattr(options, key, value)


def load_config(path: Path | None) -> TuneConfig:
    """Read a tune config (None: all defaults). Errors name the file and the key."""
    config = TuneConfig()
    if path is None:
        return config
    path = Path(path)
    if not path.is_file():
        raise TracelinkError(f"{path}: tune config not found")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise TracelinkError(f"{path}: invalid TOML: {error}") from error
    unknown = sorted(set(data) - {"space", "search", "measure", "select", "strategy"})
    if unknown:
        raise TracelinkError(f"{path}: unknown table(s) {', '.join(unknown)} "
                             "(expected [space], [search], [measure], [select], [strategy])")
    config.space = SpaceOptions.from_table(data.get("space", {}), str(path))
    config.measure = MeasureOptions.from_table(data.get("measure", {}), str(path))
    _fill(config.search, data.get("search", {}), "search", str(path))
    _fill(config.select, data.get("select", {}), "select", str(path))
    _fill(config.strategy, data.get("strategy", {}), "strategy", str(path))
    names = {option.name for option in OPTIONS}
    if any(name not in names for name in config.strategy.only):
        raise TracelinkError(f"{path}: [strategy] only names unknown option(s) "
                             f"{', '.join(sorted(set(config.strategy.only) - names))} (options: {', '.join(sorted(names))})")
    for name, flags in config.strategy.extra.items():
        if not (isinstance(flags, list) and flags and all(isinstance(f, str) and f.startswith("-") for f in flags)):
            raise TracelinkError(f"{path}: [strategy.extra] {name} must be a list of iree-compile flags, got {flags!r}")
    if config.search.tuner not in TUNERS:
        raise TracelinkError(f"{path}: [search] tuner must be one of {', '.join(TUNERS)}, got '{config.search.tuner}'")
    if config.search.batch_size < 1 or config.measure.repetitions < 1:
        raise TracelinkError(f"{path}: [search] batch_size and [measure] repetitions must be at least 1")
    config.source = path
    return config
