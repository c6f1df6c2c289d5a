"""Tuning (``tracelink tune``): lowering strategies, then tile configs of hot dispatches; and profile
comparison (``tracelink diff``).

``strategy`` searches IREE's whole-program lowering options (compile, check outputs, race against the
default; writes strategies.json), ``session`` runs it and then the tile search on the winner's profile.
The tile search's modules follow the data flow:
``dispatch`` reads a dispatch's benchmark dump → ``space`` enumerates its tile configs →
``candidates`` + ``harness`` write candidate programs → ``measure`` compiles, verifies and times them →
``model`` + ``tuners`` choose what to measure next, ``schedule`` which dispatch gets the next trials →
``spec`` writes the merged tuning spec;
``run`` ties these together for a profile directory, ``config`` reads tune.toml, ``diff`` compares two
profiles by source location, ``command`` is the CLI.

Python API: ``session.tune_session`` (the whole command), ``strategy.search_strategies``, ``run.tune_profile`` (the tile search), ``diff.diff_profiles(base, tuned) -> DataFrame``,
and the pieces: ``dispatch.load_dispatch``, ``space.TileSpace``, ``tuners.make_tuner`` / ``tuners.search``,
``measure.Measurer``, ``spec.write_spec``. Submodules are imported on use (the CLI starts fast).
"""
