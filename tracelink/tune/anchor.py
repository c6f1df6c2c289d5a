"""The framework's own run as tune's anchor: what the user runs today, raced against IREE's default build
and the build tune hands over, and compared with both line by line. It is reported, never handed over.

The race is the profile's reference race (:mod:`tracelink.collect.reference.race`) with one more IREE
build: the default build, the handed-over build and the reference run in alternating rounds, never at
the same time, each round giving one median per side; the ratios are the paired statistic of
:mod:`tracelink.aggregate.speedup`. The reference is the first one the profile measured (``--compare``),
loaded again from the user's model file.

Per line, IREE before is the base profile's user self time per call, IREE after the handed-over build's
profile's, and the reference the profile's per-line split of the framework's run, scaled so its lines sum
to this race's reference time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tracelink.aggregate.reference import LOSS_RATIO, iree_lines
from tracelink.aggregate.speedup import summarize
from tracelink.collect.machine import machine_cores
from tracelink.collect.reference import LABELS, IreeBuild, Subject, subject_of
from tracelink.collect.reference.race import calls_per_round, race_builds, runner_for, warm_up
from tracelink.compare.diff import run_inputs, run_parameters
from tracelink.compile.frontends import is_python_entry, is_torch_module, load_entry
from tracelink.errors import TracelinkError, first_line
from tracelink.profile_dir import files
from tracelink.profile_dir.profile import Profile

# measured: what the strategy search measured on the line ("name 1.2x; ...", its per-line speedups)
LINE_COLUMNS = ["file", "line", "before_ns", "after_ns", "reference_ns", "after_ratio", "only_in", "after_loses", "measured"]


@dataclass
class Anchor:
    """The reference's race against IREE's default and handed-over builds, and the per-line table."""

    reference: str  # the reference's name (``eager``, ``xla``, ``onnxruntime``)
    label: str
    threads: int
    rounds: dict = field(default_factory=dict)  # "default_ns", "handed_ns" (None: the default is handed over), "reference_ns"
    lines: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LINE_COLUMNS))
    error: str | None = None  # why the anchor was not raced
    after: Path | None = None  # the profile directory of the build handed over (its lines are "IREE after")

    def comparisons(self) -> dict:
        """The race's ratios: the handed build over the default, and each IREE build against the reference
        (``speedup`` > 1: IREE's build is faster than the reference), with their 95 % intervals."""
        if not self.rounds:
            return {}
        default, handed, reference = self.rounds["default_ns"], self.rounds["handed_ns"], self.rounds["reference_ns"]
        found = {"default_vs_reference": summarize(reference, default)}
        if handed is not None:
            found["handed_vs_default"] = summarize(default, handed)
            found["handed_vs_reference"] = summarize(reference, handed)
        return found

    def losing_lines(self) -> pd.DataFrame:
        """The lines where the handed-over build still takes more than :data:`LOSS_RATIO` times the reference's time."""
        return self.lines[self.lines["after_loses"].astype(bool)]

    def record(self) -> dict:
        """``tune/reference.json`` and the ``reference`` entry of ``tune --json``."""
        return {"reference": self.reference, "label": self.label, "threads": self.threads, "error": self.error,
                "rounds": self.rounds, **self.comparisons(), "loss_ratio": LOSS_RATIO,
                "after_profile": str(self.after.resolve()) if self.after else None,
                "lines": json.loads(self.lines.to_json(orient="records")),
                "losing_lines": [f"{row.file}:{row.line}" for row in self.losing_lines().itertuples()]}


def reference_subject(profile: Profile) -> tuple[str, Subject] | None:
    """The first reference the profile measured and what it runs, loaded again from the user's model
    (None: the profile has no measured reference, e.g. an MLIR program or ``--compare none``)."""
    measured = [record for record in profile.summary.get("references") or [] if record.get("status") == "measured"]
    if not measured:
        return None
    name, model = measured[0]["name"], str(profile.summary.get("model") or "")
    if is_python_entry(model):
        loaded = load_entry(model)
        framework = "torch" if is_torch_module(loaded.target) else "jax"
        subject = subject_of(loaded.target, loaded.args, framework, (name,), loaded.origin, loaded.entries)
        subject = subject.for_function(profile.summary["function"]) if subject is not None else None
    elif Path(model).is_file():
        subject = subject_of(Path(model), tuple(run_inputs(profile)), "onnx", (name,), model)
    else:
        raise TracelinkError(f"{model}: the profiled model is gone; the reference cannot be run again")
    return (name, subject) if subject is not None else None


def build_of(profile: Profile, vmfb: Path, timeout_s: float) -> IreeBuild:
    """One IREE build of ``profile``'s program, run with the profile's function, inputs and parameters."""
    return IreeBuild(vmfb, profile.summary["function"], run_inputs(profile), run_parameters(profile), timeout_s)


def race_anchor(base: Profile, handed: IreeBuild | None, rounds: int, timeout_s: float, directory: Path) -> Anchor | None:
    """The default build, the handed-over build (None: the default is what tune hands over) and the
    profile's reference in ``rounds`` alternating rounds; None when the profile has no reference. A
    reference that fails is an anchor with its error: tune's own result stands whatever happens to it."""
    try:
        found = reference_subject(base)
    except (Exception, MemoryError) as error:  # noqa: BLE001 - loading the user's model is the user's code
        return Anchor("", "the framework's reference", machine_cores(), error=f"{type(error).__name__}: {first_line(error)}")
    if found is None:
        return None
    name, subject = found
    anchor = Anchor(name, LABELS[name], machine_cores())
    default = build_of(base, base.artifacts / files.VMFB, timeout_s)
    builds = [default] if handed is None else [default, handed]
    runner = None
    try:
        runner = runner_for(name, subject, anchor.threads, directory)
        seconds = max(warm_up(runner), base_seconds_per_call(base))
        iree, reference = race_builds(runner, builds, calls_per_round(seconds), rounds)
        anchor.rounds = {"default_ns": iree[0], "handed_ns": iree[1] if handed is not None else None, "reference_ns": reference}
    except (Exception, MemoryError) as error:  # noqa: BLE001 - any failure of the user's framework is one line
        anchor.error = f"{type(error).__name__}: {first_line(error)}"
    finally:
        if runner is not None:
            runner.close()
    return anchor


def base_seconds_per_call(profile: Profile) -> float:
    """IREE's time per call in the profile's own reference race (0 when it has none)."""
    measured = [record for record in profile.summary.get("references") or [] if record.get("iree_ns_per_call")]
    return float(measured[0]["iree_ns_per_call"]) / 1e9 if measured else 0.0


def anchor_lines(before: Profile, after: Profile, reference_ns_per_call: float | None, per_line: list[dict] = ()) -> pd.DataFrame:
    """One row per line any of the three spends time on: IREE before and after (user self time per call),
    the reference (the profile's per-line split scaled to ``reference_ns_per_call``), after over the
    reference, which side alone has the line, whether the handed build still loses there, and what the
    strategy search measured on it (``per_line``: the rows of its per-line table)."""
    lines = before.reference_lines
    if lines is None or lines.empty:
        return pd.DataFrame(columns=LINE_COLUMNS)
    theirs = lines[["file", "line", "iree_ns", "reference_ns"]].rename(columns={"iree_ns": "before_ns"})
    theirs = theirs.assign(file=theirs["file"].fillna("").astype(str), line=theirs["line"].astype(int))
    scale = reference_ns_per_call / float(theirs["reference_ns"].sum()) if reference_ns_per_call and theirs["reference_ns"].sum() > 0 else 1.0
    theirs["reference_ns"] = theirs["reference_ns"] * scale
    ours = iree_lines(after.source_lines, int(after.summary["iterations"])).rename(columns={"iree_ns": "after_ns"})
    table = theirs.merge(ours, on=["file", "line"], how="outer")
    both = table["after_ns"].notna() & (table["reference_ns"].fillna(0) > 0)
    table["after_ratio"] = np.where(both, table["after_ns"] / table["reference_ns"].where(both, 1.0), np.nan)
    table["only_in"] = np.select([table["reference_ns"].isna(), table["after_ns"].isna() & table["before_ns"].isna()],
                                 ["iree", "reference"], "")
    table["after_loses"] = table["after_ratio"] > LOSS_RATIO
    table["measured"] = [measured_on(per_line, file, line) for file, line in zip(table["file"], table["line"])]
    order = table[["before_ns", "after_ns", "reference_ns"]].max(axis=1)
    return table.assign(order=order).sort_values("order", ascending=False, kind="stable")[LINE_COLUMNS].reset_index(drop=True)


def measured_on(per_line: list[dict], file: str, line: int) -> str:
    """What the strategy search measured on one line: each strategy's speedup there, fastest first
    ("" when no strategy was profiled on it)."""
    found: dict[str, float] = {}
    for row in per_line:
        if row["file"] == file and int(row["line"]) == int(line) and row.get("ratio") is not None:
            found[row["strategy"]] = max(found.get(row["strategy"], 0.0), float(row["ratio"]))
    return "; ".join(f"{name} {ratio:.2g}x" for name, ratio in sorted(found.items(), key=lambda item: -item[1]))
