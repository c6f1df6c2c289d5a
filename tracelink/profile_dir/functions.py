"""A profile of several functions of one program (``--function A ... --function B ...``): one compile, one directory.

Each function's profile is a complete profile directory of its own, ``functions/<name>/`` (its run's
artifacts beside a copy of the compile's), so ``report``, ``tune``, ``diff`` and ``repro`` work on it as
on any profile. The top of the directory holds the compile's artifacts, every function's tables with a
``function`` column first, ``profile.json`` naming the functions with each one's figures, and a
``report.html`` that sets them side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from tracelink.aggregate.functions import function_figures, lines_across_functions
from tracelink.atomic import copy_atomic, make_directory, write_atomic, write_text_atomic
from tracelink.compile import CompileResult
from tracelink.errors import TracelinkError
from tracelink.profile_dir.claim import write_marker
from tracelink.profile_dir.profile import Profile
from tracelink.profile_dir import files

FUNCTIONS = "functions"
# The compile's outputs each function's directory holds a copy of (its own run writes the rest).
COMPILE_FILES = (files.VMFB, files.MANIFEST, "compile.log")
COMPILE_FOLDERS = ("phases", "executables")
LINES_KEPT = 20  # profile.json's side-by-side lines


@dataclass
class FunctionProfiles:
    """The profiles of several functions compiled together, and what sets them side by side."""

    directory: Path
    profiles: dict[str, Profile]  # in the order the functions were given
    summary: dict
    lines: pd.DataFrame  # source lines by self time per call in each function (:func:`lines_across_functions`)


def function_directory(out: Path, name: str) -> Path:
    """``out/functions/<name>``; a name that is not one folder name is refused."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise TracelinkError(f"--function {name!r}: not usable as a folder name under {out / FUNCTIONS}")
    return out / FUNCTIONS / name


def copy_compile_outputs(compiled: CompileResult, directory: Path) -> CompileResult:
    """Make ``directory`` a profile directory holding a copy of the compile's outputs; their new places."""
    artifacts = directory / files.ARTIFACTS
    make_directory(artifacts, inside=directory.parent.parent)
    write_marker(directory)
    for name in COMPILE_FILES:
        if (compiled.artifacts / name).is_file():
            copy_atomic(compiled.artifacts / name, artifacts / name)
    for folder in COMPILE_FOLDERS:
        make_directory(artifacts / folder, inside=directory)
        for path in sorted((compiled.artifacts / folder).rglob("*")):
            target = artifacts / path.relative_to(compiled.artifacts)
            if path.is_dir():
                make_directory(target, inside=directory)
            elif path.is_file():
                copy_atomic(path, target)
    return replace(compiled, artifacts=artifacts, vmfb=artifacts / files.VMFB, phases=artifacts / "phases",
                   executables=artifacts / "executables")


def assemble_function_profiles(out: Path, profiles: dict[str, Profile], run_info: dict) -> FunctionProfiles:
    """The summary and side-by-side lines of ``profiles`` (by function name) written under ``out``."""
    lines = lines_across_functions({name: (p.source_lines, int(p.summary["iterations"])) for name, p in profiles.items()})
    summary = run_info | {
        "functions": [function_figures(name, profile.summary) | {"directory": f"{FUNCTIONS}/{name}"} for name, profile in profiles.items()],
        "lines": json.loads(lines.head(LINES_KEPT).to_json(orient="records")),
    }
    return FunctionProfiles(out, profiles, summary, lines)


def write_function_profiles(result: FunctionProfiles) -> None:
    """Write the top of the directory: every function's tables with a ``function`` column, and profile.json."""
    for table in files.TABLES:
        frames = [getattr(profile, table).assign(function=name) for name, profile in result.profiles.items()]
        joined = pd.concat(frames, ignore_index=True)
        joined = joined[["function", *(column for column in joined.columns if column != "function")]]
        write_atomic(result.directory / f"{table}.csv", lambda path, frame=joined: frame.to_csv(path, index=False))
    write_text_atomic(result.directory / files.SUMMARY, json.dumps(result.summary, indent=2, default=str))

