"""Every file of a profile directory, declared once: its name, and what it holds.

Every module that reads or writes a profile directory names its files through these constants; none
spells a name of its own (tests/test_architecture.py checks it). A table's columns are declared by its
writer's schema where it has one (the events' ``EVENT_SCHEMA``, ``REQUIRED_COLUMNS`` of the profile's
tables, the tune record's kinds), and the directory's format version by ``claim.FORMAT_VERSION``.
"""

from __future__ import annotations

from pathlib import PurePosixPath

MARKER = ".tracelink"  # the directory is tracelink's (its format version inside)
LOCK = ".tracelink.lock"  # held while a command writes into it

SUMMARY = "profile.json"  # the run: program, function, inputs, parameters, target, timings, coverage, memory
EVENTS = "events.parquet"  # one row per dispatch execution (collect.events.EVENT_SCHEMA)
TABLES = ("call_sites", "exports", "source_ops", "source_lines")  # <name>.csv, always written
MEMORY_TABLES = ("memory_lines", "memory_components")  # <name>.csv, one call's memory
REFERENCE_TABLES = ("reference_lines", "reference_components")  # <name>.csv, the framework's run beside IREE's
OPTIONAL_FRAMES = ("workgroups", "zones")  # <name>.parquet: the hook's workgroups, a Tracy capture's zones
GRAPH = "provenance.json"  # the provenance graph, node-link JSON (what tracelink reads back)
GRAPHML = "provenance.graphml"  # the same graph for graph tools
REPORT = "report.html"
TRACE = "trace.json"  # Chrome/Perfetto trace
PPROF = "profile.pb.gz"
DIFF_TABLE, DIFF_SUMMARY, DIFF_ROUNDS = "diff.csv", "diff.json", "diff_rounds"  # `tracelink diff -o`
ARTIFACTS = "artifacts"  # the compiler's outputs, the inputs, the run's logs and bundles
MANIFEST = "manifest.json"  # in ARTIFACTS: how it was compiled
VMFB = "app.vmfb"  # in ARTIFACTS: the compiled program
RUN_LOG = "run.log"  # in ARTIFACTS: the timed run's command line and output
EXPORTED = "exported.mlir"  # in ARTIFACTS: a Python model's exported program
INPUTS = "inputs"  # in ARTIFACTS: the run's generated inputs; a swept run's files carried to its node, in numbered folders
REPRO = "repro"  # `tracelink repro`'s folders
FUNCTIONS = "functions"  # one profile directory per function of a several-function profile
TUNE = "tune"  # `tracelink tune`'s records and what is derived from them:
TUNE_RECORDS = PurePosixPath(TUNE, "records.jsonl")
TUNE_STRATEGIES = PurePosixPath(TUNE, "strategies.json")
TUNE_TRIALS = PurePosixPath(TUNE, "trials.csv")
TUNE_SCHEDULE = PurePosixPath(TUNE, "schedule.csv")
TUNE_SUMMARY = PurePosixPath(TUNE, "summary.csv")
TUNE_CHECK = PurePosixPath(TUNE, "program_check.json")
TUNE_REFERENCE = PurePosixPath(TUNE, "reference.json")  # the framework's reference raced against the default and handed builds
TUNE_REFERENCE_LINES = PurePosixPath(TUNE, "reference_lines.csv")  # per line: IREE before, IREE after, the reference
TUNE_REFERENCE_DIR = PurePosixPath(TUNE, "reference")  # the reference's run files, and repros of the lines it still wins
TUNE_HANDED = PurePosixPath(TUNE, "handed")  # the profile of the build handed over: a strategy with a tuning added, or one left unprofiled


def csv(table: str) -> str:
    """The file of a table named in :data:`TABLES`, :data:`MEMORY_TABLES` or :data:`REFERENCE_TABLES`."""
    return f"{table}.csv"


def parquet(frame: str) -> str:
    """The file of a frame named in :data:`OPTIONAL_FRAMES`."""
    return f"{frame}.parquet"


# Everything a profile run (and tune / diff / report on it) writes at the top of the directory: what a
# new run takes away first, and what a forced run refuses to replace when tracelink did not write it.
OWNED = (
    ARTIFACTS, TUNE, SUMMARY, EVENTS, *map(csv, (*TABLES, *MEMORY_TABLES, *REFERENCE_TABLES)), GRAPHML, GRAPH, REPORT, TRACE,
    PPROF, *map(parquet, OPTIONAL_FRAMES), DIFF_TABLE, DIFF_SUMMARY, REPRO, DIFF_ROUNDS, FUNCTIONS,
)
