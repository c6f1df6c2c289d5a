"""Which local files the report may embed: the report is meant to be attached to bug reports.

Locations in a program name any path (``loc("mm"("/etc/passwd":1:1))``); a file is embedded only when
it lies under an allowed root (the program's directory, the working directory, ``--source-root``
directories), is a regular file, is not hidden below its root, is not under /dev, /proc or /sys and is
not too big. Every file refused is listed, with the reason, so the report says what it left out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_ROOTS = (Path("/dev"), Path("/proc"), Path("/sys"))


@dataclass
class SourcePolicy:
    """The allowed roots and size cap; collects the files it refused."""

    roots: tuple[Path, ...]
    embed: bool = True
    skipped: dict[str, str] = field(default_factory=dict)  # path -> why it is not embedded

    @classmethod
    def for_profile(cls, summary: dict, extra_roots: list[Path] | None = None, embed: bool | None = None) -> SourcePolicy:
        """The policy a profile was written with (its summary), widened by ``extra_roots``, ``embed`` overriding."""
        program = str(summary.get("program") or "")
        roots = [Path.cwd(), *(Path(root) for root in summary.get("source_roots") or []), *(extra_roots or [])]
        if program:
            roots.append(Path(program).parent)
        embedded = bool(summary.get("embed_sources", True)) if embed is None else embed
        return cls(tuple(dict.fromkeys(root.resolve() for root in roots)), embedded)

    def refusal(self, path: Path, limit: int) -> str | None:
        """Why ``path`` may not be embedded, or None when it may."""
        if not self.embed:
            return "sources not embedded (--no-sources)"
        resolved = path.resolve()
        if any(resolved.is_relative_to(system) for system in SYSTEM_ROOTS):
            return "a device or kernel file"
        root = next((root for root in self.roots if resolved.is_relative_to(root)), None)
        if root is None:
            return "outside the allowed source roots (the program's directory, the working directory, --source-root)"
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
        """The lines of ``path`` when it may be embedded, else None (a refusal is recorded)."""
        try:
            if not os.path.lexists(path):
                return None  # not on this machine: nothing to embed, nothing refused
            reason = self.refusal(Path(path), limit)
            if reason is not None:
                self.skipped[str(path)] = reason
                return None
            return Path(path).read_text(errors="replace").split("\n")
        except OSError as error:
            self.skipped[str(path)] = f"unreadable ({error.strerror})"
            return None
