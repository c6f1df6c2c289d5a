"""Write files atomically, so a failure never leaves a half-written output behind."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tracelink import TracelinkError


def write_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(temporary_path)`` then rename the result over ``path``; remove it on failure.

    A failed write (a full disk, ...) is one error naming ``path``, not the temporary file.
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(temporary)
        temporary.replace(path)
    except OSError as error:  # pyarrow's write errors name no file at all
        reason = error.strerror or str(error).splitlines()[0]
        raise TracelinkError(f"{path}: cannot write ({reason}); the earlier files in {path.parent} are kept") from None
    finally:
        temporary.unlink(missing_ok=True)
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    return write_atomic(path, lambda p: p.write_text(text))
