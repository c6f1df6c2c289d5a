"""Tuning (``tracelink tune``): lowering strategies, then tile configs of hot dispatches; and profile
comparison (``tracelink diff``).

Both searches run their tuners in the one loop of ``tuners.loop``, which owns the budget (trials and/or
the deadline of the whole command) and calls back after every measured batch: the record log
(``tracelink.profile_dir.tune_record``, where every kind of record and the files derived from it are
defined) and the progress bar (``progress``). ``strategy`` searches IREE's whole-program lowering options
(``strategy_space``: the options, their combinations and candidates; ``tuners.halving``: which to race
next; ``outputs``: whether a build computes what the default does; ``per_line``: what a faster strategy
did to each source line; ``compose``: per-op compositions; on Ray, ``cluster`` the runtime and
``remote`` the builds and races as its tasks). ``session`` runs it and then the tile search
on the winner's profile. The tile search's modules follow the data flow: ``targets`` picks the hot
tunable dispatches → ``dispatch`` reads a dispatch's benchmark dump → ``space`` enumerates its tile
configs → ``candidates`` + ``harness`` write candidate programs → ``measure`` compiles, verifies and
times them (``trial_log``: their records) → ``model`` + ``tuners`` (one module per tuner) choose what to
measure next, ``schedule`` which dispatch gets the next trials (``tile_search`` runs them in the loop) →
``spec`` writes the merged tuning spec → ``program_check`` checks it inside the whole program; ``run``
ties these together for a profile directory, ``config`` reads tune.toml. ``diff`` compares two profiles
by source location; ``tracelink.aggregate.speedup`` computes every speedup tracelink prints (``rounds``
runs builds alternately to give it paired rounds).

Python API: ``session.tune_session`` (the whole command), ``strategy.search_strategies``,
``run.tune_profile`` (the tile search), ``diff.diff_profiles(base, tuned) -> DataFrame``, and the pieces:
``dispatch.load_dispatch``, ``space.TileSpace``, ``tuners.make_tuner`` / ``tuners.search``,
``measure.Measurer``, ``spec.write_spec``. Submodules are imported on use
(the CLI starts fast).
"""
