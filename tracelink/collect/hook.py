"""The perf hook collector: per-workgroup timing and perf counters from an LD_PRELOAD library.

How it works. ``libtracelink_hook.so`` (built from ``native/`` by ``pip install``) is preloaded
into the command. It interposes ``dlsym`` and, when the IREE runtime looks up
``iree_hal_executable_library_query`` in a system-library executable, wraps the library so
that every workgroup call goes through a trampoline that times it and reads the requested
perf counters around it (about 50 ns per call for timing alone, ~1 us per software counter
read pair: see tests/bench/bench_hook.py). Only executables compiled with
``--iree-llvmcpu-link-embedded=false`` are loaded through ``dlsym``; the default embedded-ELF
format is invisible to the hook. Only the executable-library ABI v0.6 (IREE 3.13) is hooked.

Environment (same names and meaning as IREE's hal_executable_library_call hook):

- ``IREE_HOOK_FILTER_NAME``: fnmatch glob of export names to hook (default: all).
- ``IREE_HOOK_SKIP_START_MS``: dispatches starting earlier than this after the hook loaded
  are left out (whole dispatches: the warm-up).
- ``IREE_HOOK_PERF_EVENT_TYPES``: comma-separated perf events, e.g. ``task-clock,page-faults``
  (``IREE_HOOK_LIST_EVENT_TYPES=1`` lists them). Unknown names are an error; events the
  machine cannot count (hardware events on most VMs) are dropped with a warning. Counter
  values are deltas over the call (task-clock/cpu-clock in ns); each clock event is read
  alone and all others as one group, so one read() per group per sample.
- ``IREE_HOOK_OUTPUT_CSV``: directory where :func:`run_hooked` writes
  ``tracelink_hook_workgroups.csv``, the per-workgroup table with columns
  ``WORKGROUP_COLUMNS`` then one column per counter (named after the event).
- ``IREE_HOOK_BUCKET_COUNT``, ``IREE_HOOK_NO_PROBABILITY_TABLE``, ``IREE_HOOK_GAMMA``: shape of
  the statistics, see :mod:`tracelink.collect.hook_stats`.
- ``TRACELINK_HOOK_OUTPUT`` (set by :func:`run_hooked`): directory of the record files.

The C library only records; statistics are computed here from the records and printed by
``tracelink hook -- CMD`` after the command ends. This module runs a command under the hook;
:mod:`tracelink.collect.hook_records` reads the record files (one ``hook-<pid>.tlhk`` per hooked
process) and :mod:`tracelink.collect.hook_tables` turns them into tables (workgroups, dispatches
and their push constants).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tracelink.atomic import make_directory, open_for_writing
from tracelink.collect.hook_records import RECORD_FILE_GLOB, SUPPORTED_ABI_VERSION, HookFile, Notice, read_hook_file
from tracelink.collect.hook_tables import WORKGROUP_COLUMNS, dispatch_constants, dispatch_events, workgroups_of, write_workgroups_csv
from tracelink.errors import Crashed, TracelinkError
from tracelink.tools import kill_group, reap, reap_within, signal_name, start_process

HOOK_LIBRARY_NAME = "libtracelink_hook.so"
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class HookRun:
    """A command run under the hook and what it recorded."""

    command: list[str]
    output_dir: Path
    record_files: list[Path]
    returncode: int
    elapsed_s: float
    event_names: list[str]  # counters actually recorded (after dropping unavailable ones)
    workgroups: pd.DataFrame  # WORKGROUP_COLUMNS + one column per counter
    events: pd.DataFrame  # per-dispatch events in the shared EVENT_SCHEMA
    warnings: list[str]  # hook notices worth showing (dropped events, limits, ...)
    constants: pd.Series  # each event's dispatch's push constants (tuple of u32, or None), aligned with ``events``


def hook_library_path() -> Path:
    """Return the hook library installed in the tracelink package."""
    path = Path(__file__).resolve().parent.parent / HOOK_LIBRARY_NAME
    if not path.is_file():
        raise TracelinkError(
            f"the hook library {path} is missing: reinstall tracelink (`pip install -e .` builds it "
            "from native/ with the system C compiler)"
        )
    return path


def list_event_types() -> str:
    """Return the hook's list of accepted perf event names (IREE_HOOK_LIST_EVENT_TYPES)."""
    env = dict(os.environ, LD_PRELOAD=str(hook_library_path()), IREE_HOOK_LIST_EVENT_TYPES="1")
    probe = shutil.which("true")
    command = [probe] if probe else [sys.executable, "-c", ""]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    return result.stdout


def _prepare_output_dir(output_dir: Path) -> Path:
    """Create the output directory, check it is writable and remove stale record files."""
    output_dir = Path(output_dir).absolute()
    try:
        make_directory(output_dir)
        with tempfile.TemporaryFile(dir=output_dir):
            pass
    except OSError as error:
        raise TracelinkError(f"cannot write hook records to {output_dir}: {error.strerror}") from error
    for stale in output_dir.glob(RECORD_FILE_GLOB):
        stale.unlink()
    return output_dir


def _hooked_environment(
    base: Mapping[str, str], output_dir: Path, events: Sequence[str] | None, filter: str | None
) -> dict[str, str]:
    """The command's environment: the hook preloaded, and its settings."""
    env = dict(base)
    preload = env.get("LD_PRELOAD", "").strip()
    env["LD_PRELOAD"] = f"{hook_library_path()} {preload}".strip()
    env["TRACELINK_HOOK_OUTPUT"] = str(output_dir)
    env.pop("IREE_HOOK_LIST_EVENT_TYPES", None)  # it would make the command exit at once
    if events is not None:
        env["IREE_HOOK_PERF_EVENT_TYPES"] = ",".join(events)
    if filter is not None:
        env["IREE_HOOK_FILTER_NAME"] = filter
    return env


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the command's process group (the hook flushes on it), SIGKILL if it lingers."""
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        kill_group(process, signal_number)
        try:
            reap_within(process, STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _execute(command: list[str], env: dict[str, str], timeout_s: float | None, log: Path | None) -> tuple[int, bool]:
    """Run the command in its own process group, its output into ``log`` when given; return (returncode, timed_out)."""
    try:
        with open_for_writing(log, "wb") if log is not None else contextlib.nullcontext() as output:  # a link there is not followed
            process = start_process(command, env=env, stdout=output, stderr=subprocess.STDOUT if output else None)
    except OSError as error:
        raise TracelinkError(f"cannot run {command[0]}: {error.strerror}") from error
    try:
        return reap_within(process, timeout_s), False
    except subprocess.TimeoutExpired:
        _stop(process)
        return process.returncode, True
    except BaseException:
        kill_group(process)  # an interrupt: no grace period, it must stop within the 2 s promised
        reap(process)
        raise


def _notice_lines(files: Sequence[HookFile]) -> list[str]:
    """Human-readable lines for the notices worth showing."""
    lines: list[str] = []
    for hook_file in files:
        for notice in hook_file.notices:
            if notice.kind == Notice.EVENT_DROPPED:
                lines.append(f"perf event dropped: {notice.text}")
            elif notice.kind == Notice.UNSUPPORTED_ABI:
                lines.append(
                    f"library {notice.text!r} has executable-library ABI version {notice.value}; "
                    f"only {SUPPORTED_ABI_VERSION} is hooked, it ran unhooked"
                )
            elif notice.kind == Notice.EXPORT_LIMIT:
                lines.append(f"more than {notice.value} exports: {notice.text!r} and later ones ran unhooked")
            elif notice.kind == Notice.QUERY_LIMIT:
                lines.append(f"more than {notice.value} executable libraries: later ones ran unhooked")
            elif notice.kind == Notice.COUNTER_FAILED:
                lines.append(f"some counters could not be opened in thread {notice.text!r}; missing there")
            elif notice.kind == Notice.SIGNAL:
                lines.append(f"process {hook_file.pid} ended by signal {notice.value}; records flushed")
    return list(dict.fromkeys(lines))


def faulted_export(files: Sequence[HookFile]) -> str | None:
    """The export whose workgroup call took the fault (a SIGSEGV, SIGBUS, SIGFPE or SIGILL on the thread
    running it) that ended the process, as the record files name it; None when the fault came from
    elsewhere (the runtime, an embedded-ELF executable) or the signal was not a fault."""
    for hook_file in files:
        names = {export.export_id: export.name for export in hook_file.exports if export.export_id is not None}
        for notice in hook_file.notices:
            if notice.kind == Notice.FAULT_IN_EXPORT and notice.value in names:
                return names[notice.value]
    return None


def _describe_exit(command: Sequence[str], returncode: int, export: str | None) -> str:
    if returncode < 0:
        return f"{command[0]} crashed ({signal_name(-returncode)})" + (f" in dispatch {export}" if export else "")
    return f"{command[0]} exited with status {returncode}"


def _no_records_message(files: Sequence[HookFile], filter: str | None) -> str:
    """Why nothing was recorded, as one actionable line."""
    exports = [export for f in files for export in f.exports]
    unsupported = {n.value for f in files for n in f.notices if n.kind == Notice.UNSUPPORTED_ABI}
    if not exports and unsupported:
        versions = ", ".join(str(v) for v in sorted(unsupported))
        return (
            f"no dispatch recorded: the executables use executable-library ABI version {versions}, "
            f"the hook supports only version {SUPPORTED_ABI_VERSION} (IREE 3.13 runtime and compiler)"
        )
    if not exports:
        return (
            "no dispatch recorded: the hook saw no executable library loaded through dlsym. Modules "
            "compiled with the default embedded ELF are invisible to it: recompile with "
            "--iree-llvmcpu-link-embedded=false (llvm-cpu target, local-task or local-sync device)"
        )
    if not any(export.export_id is not None for export in exports):
        names = ", ".join(dict.fromkeys(export.name for export in exports))
        return f"no dispatch recorded: filter {filter!r} matched none of the exports ({names})"
    return "no dispatch recorded: the hooked exports were never called (or only before IREE_HOOK_SKIP_START_MS)"


def run_hooked(
    command: list[str],
    output_dir: Path,
    events: list[str] | None = None,
    filter: str | None = None,
    timeout_s: float | None = None,
    *,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
) -> HookRun:
    """Run ``command`` under the hook and read what it recorded.

    ``events``/``filter`` override IREE_HOOK_PERF_EVENT_TYPES/IREE_HOOK_FILTER_NAME from ``env``
    (default: this process's environment). The command's output goes to ``log`` when given, else
    it is not captured. Record files
    go to ``output_dir`` (stale ones are removed first) and stay there even when this raises
    TracelinkError: hook configuration error, nothing recorded, non-zero exit, crash, timeout.
    """
    if not command:
        raise TracelinkError("no command to run under the hook")
    base = os.environ if env is None else env
    output_dir = _prepare_output_dir(output_dir)
    started = time.monotonic()
    returncode, timed_out = _execute(list(command), _hooked_environment(base, output_dir, events, filter), timeout_s, log)
    elapsed_s = time.monotonic() - started

    paths = sorted(output_dir.glob(RECORD_FILE_GLOB))
    files = [read_hook_file(path) for path in paths]
    for hook_file in files:
        for notice in hook_file.notices:
            if notice.kind == Notice.CONFIG_ERROR:
                raise TracelinkError(f"hook configuration: {notice.text}")
    workgroups = workgroups_of(files)
    kept = f"{len(workgroups)} workgroup records kept in {output_dir}" + (f", its output in {log}" if log is not None else "")
    if timed_out:
        raise TracelinkError(f"{command[0]} timed out after {timeout_s:g} s and was stopped; {kept}")
    if returncode < 0:
        export = faulted_export(files)
        raise Crashed(f"{_describe_exit(command, returncode, export)}; {kept}", export)
    if returncode != 0:
        raise TracelinkError(f"{_describe_exit(command, returncode, None)}; {kept}")
    if workgroups.empty:
        raise TracelinkError(_no_records_message(files, filter if filter is not None else base.get("IREE_HOOK_FILTER_NAME")))
    csv_dir = base.get("IREE_HOOK_OUTPUT_CSV")
    if csv_dir:
        write_workgroups_csv(workgroups, Path(csv_dir))
    event_names = next(f.event_names for f in files if f.records is not None and len(f.records))
    return HookRun(
        command=list(command),
        output_dir=output_dir,
        record_files=paths,
        returncode=returncode,
        elapsed_s=elapsed_s,
        event_names=list(event_names),
        workgroups=workgroups,
        events=dispatch_events(workgroups),
        warnings=_notice_lines(files),
        constants=dispatch_constants(files, workgroups),
    )

