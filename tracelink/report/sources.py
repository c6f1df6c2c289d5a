"""Which local files the report may embed: the report is meant to be attached to bug reports.

Locations in a program name any path (``loc("mm"("/etc/passwd":1:1))``); a file is embedded only when
it lies under an allowed root, is a regular file, is not hidden below its root, is not under /dev, /proc
or /sys and is not too big. Every file refused or not found is listed, with the reason, so the report
says what it left out. ``--no-sources`` embeds nothing read from the user's files: neither source files
nor the executable sources the compiler dumped from them.

The allowed roots come from the command line of the run, never from the profile directory, which may
be someone else's: ``profile`` allows the program's directory, ``--source-root`` directories and the
local side of ``--source-map`` (and the working directory only when the program is under it and it is
neither / nor the home directory or above it), and records them in profile.json signed with this
user's key (:mod:`tracelink.report.signing`). ``report`` allows what its own command line names, and the
recorded roots only when the signature holds: an edited or received profile.json names no root. The
dumps a profile points at (``source_file``) are read only inside its artifacts directory.

Locations name paths on the machine that exported the model (``/home/someone/proj/braggnn.py``): a
source map (``OLD=NEW`` prefixes) says where those files are here. Only the lookup is rewritten; the
report keeps showing the recorded path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tracelink.report.signing import sign, signed_by_this_user

SYSTEM_ROOTS = (Path("/dev"), Path("/proc"), Path("/sys"))
NO_SOURCES = "sources not embedded (--no-sources)"
# How the report lists the compiler's dumps of the program when they are not embedded.
EXECUTABLE_DUMPS = "artifacts/executables/*.mlir (executable sources dumped by iree-compile)"
SIGNED_KEYS = ("allowed_roots", "source_map", "embed_sources")  # profile.json's keys that its sources_signature signs


@dataclass
class SourcePolicy:
    """The allowed roots, source map and size cap; collects the files it refused or could not find."""

    roots: tuple[Path, ...]
    embed: bool = True
    source_map: tuple[tuple[str, Path], ...] = ()  # (recorded prefix, local directory), longest prefix first
    skipped: dict[str, str] = field(default_factory=dict)  # path -> why it is not embedded
    trusted_record: bool = True  # False: the profile's recorded roots were refused (not signed here)

    @classmethod
    def for_run(
        cls, programs: list[Path], roots: list[Path], source_map: list[tuple[str, Path]], embed: bool = True,
    ) -> SourcePolicy:
        """The policy of one command line: the directories of ``programs`` (the files it was given), ``roots``,
        the map's local directories, and the working directory only when one of the programs is under it
        and it is narrower than the home directory (run from / or ~, every program is under it)."""
        cwd = Path.cwd().resolve()
        program_dirs = [Path(program).resolve().parent for program in programs]
        allowed = [*program_dirs, *roots, *(new for _, new in source_map)]
        narrow = cwd != Path("/") and not Path.home().resolve().is_relative_to(cwd)
        if narrow and any(directory.is_relative_to(cwd) for directory in program_dirs):
            allowed.append(cwd)
        ordered = tuple(sorted(((old, Path(new).resolve()) for old, new in source_map), key=lambda pair: -len(pair[0])))
        return cls(tuple(dict.fromkeys(Path(root).resolve() for root in allowed)), embed, ordered)

    @classmethod
    def for_profile(
        cls, summary: dict, extra_roots: list[Path] | None = None, embed: bool | None = None,
        extra_map: list[tuple[str, Path]] | None = None,
    ) -> SourcePolicy:
        """The policy of a ``report`` run on a profile: ``extra_roots`` and ``extra_map`` (its command line),
        with the roots and map the profile recorded when this user's tracelink signed them (see
        :meth:`record`); ``extra_map`` wins over the recorded map for the same prefix, ``embed`` overrides."""
        recorded = recorded_policy(summary)
        mapping = dict(recorded.source_map if recorded else ()) | {old: Path(new) for old, new in extra_map or []}
        roots = [*(recorded.roots if recorded else ()), *(extra_roots or []), *mapping.values()]
        embedded = (recorded.embed if recorded else True) if embed is None else embed
        ordered = tuple(sorted(((old, Path(new).resolve()) for old, new in mapping.items()), key=lambda pair: -len(pair[0])))
        return cls(tuple(dict.fromkeys(Path(root).resolve() for root in roots)), embedded, ordered, trusted_record=recorded is not None)

    def record(self) -> dict:
        """What profile.json keeps of this policy, signed so that only this user's later runs believe it."""
        payload = {"allowed_roots": [str(root) for root in self.roots], "source_map": [[old, str(new)] for old, new in self.source_map],
                   "embed_sources": self.embed}
        return payload | {"sources_signature": sign(payload)}

    def local_path(self, recorded: str) -> Path:
        """Where the file a location names is on this machine: the first (longest) matching map prefix rewritten."""
        for old, new in self.source_map:
            if recorded == old:
                return new
            if recorded.startswith(old.rstrip("/") + "/"):
                return new / recorded[len(old.rstrip("/")) + 1:]
        return Path(recorded)

    def allows_dumps(self) -> bool:
        """Whether the compiler's dumps of the program (executable sources) may be embedded; listed when not."""
        if not self.embed:
            self.skipped[EXECUTABLE_DUMPS] = NO_SOURCES
        return self.embed

    def refusal(self, path: Path, limit: int) -> str | None:
        """Why ``path`` (a local path) may not be embedded, or None when it may."""
        if not self.embed:
            return NO_SOURCES
        resolved = path.resolve()
        if any(resolved.is_relative_to(system) for system in SYSTEM_ROOTS):
            return "a device or kernel file"
        root = next((root for root in self.roots if resolved.is_relative_to(root)), None)
        if root is None:
            if not self.trusted_record:
                return ("outside the allowed source roots (profile.json's roots are not used: this user's tracelink did not "
                        "record them; --source-root or --source-map allows a directory)")
            return "outside the allowed source roots (the program's directory, --source-root, --source-map)"
        if any(part.startswith(".") for part in resolved.relative_to(root).parts):
            return "a hidden file"
        if not resolved.is_file():
            return "not a regular file"
        if resolved.stat().st_size > limit:
            return f"larger than {limit} bytes"
        with resolved.open("rb") as file:  # an .onnx model: its node positions are lines, but it is no text
            if b"\0" in file.read(8192):
                return "a binary file"
        return None

    def read_lines(self, path: Path, limit: int) -> list[str] | None:
        """The lines of the file a location names, when it may be embedded, else None (the reason is recorded)."""
        local = self.local_path(str(path))
        mapped = "" if local == Path(path) else f" (looked for as {local})"
        try:
            if not self.embed:
                reason = NO_SOURCES
            elif not os.path.lexists(local):
                reason = f"not found on this machine{mapped}; --source-map OLD=NEW says where its directory is"
            else:
                reason = self.refusal(local, limit)
                reason = reason and reason + mapped
            if reason is not None:
                self.skipped[str(path)] = reason
                return None
            return local.read_text(errors="replace").split("\n")
        except OSError as error:
            self.skipped[str(path)] = f"unreadable ({error.strerror}){mapped}"
            return None


def dump_path(artifacts: Path, recorded: str) -> Path | None:
    """The file a profile's ``source_file`` names (relative to its artifacts directory), or None when it,
    through ``..`` or a link, leaves that directory."""
    base = Path(artifacts).resolve()
    resolved = (base / recorded).resolve()
    return resolved if resolved.is_relative_to(base) and resolved != base else None


def recorded_policy(summary: dict) -> SourcePolicy | None:
    """The policy a profile recorded (:meth:`SourcePolicy.record`) when this user's key signed it, else None."""
    payload = {key: summary.get(key) for key in SIGNED_KEYS}
    if not signed_by_this_user(payload, summary.get("sources_signature")):
        return None
    roots = tuple(Path(str(root)) for root in payload["allowed_roots"] or [])
    return SourcePolicy(roots, bool(payload["embed_sources"]), tuple(source_map_of(summary)))


def source_map_of(summary: dict) -> list[tuple[str, Path]]:
    """The source map a profile was written with (``profile.json``'s ``source_map``: [[old, new], ...])."""
    pairs = summary.get("source_map") or []
    return [(str(pair[0]), Path(str(pair[1]))) for pair in pairs if isinstance(pair, (list, tuple)) and len(pair) == 2]
