"""Which parts of a profile directory this user's own tracelink wrote: an HMAC with a key only they hold.

A profile directory may come from someone else ("here is my profile, what is slow?"). What it says about
the local disk (which directories the report may read source files from) is believed only when it carries
a signature made with this user's key: ``tracelink profile`` signs what its command line allowed, and
``tracelink report`` on that directory later reads the same files; an edited or received profile.json
fails the check and allows nothing. The key is 32 random bytes in the user's cache directory (mode 0600);
a damaged or missing key is replaced, which only makes earlier profiles unsigned.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from tracelink.collect.machine.host import cache_dir, report_damaged_cache

KEY_BYTES = 32


def key_path() -> Path:
    return cache_dir() / "profile-key"


def stored_key(path: Path) -> tuple[bytes | None, str | None]:
    """(the key at ``path``, None) when it holds one; (None, what is wrong) when damaged; (None, None) when missing."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as file:
            key = file.read(KEY_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as error:
        return None, f"unreadable profile key ({error.strerror})"
    return (key, None) if len(key) == KEY_BYTES else (None, f"a profile key of {len(key)} bytes, not {KEY_BYTES}")


def read_key(create: bool) -> bytes | None:
    """This user's key; made when missing or damaged and ``create`` is set. A new key is written whole to
    a file of its own and linked into place, which fails where another run has just made one: theirs is
    then the key (replacing it would leave their profile unsigned), and no run reads a key half written."""
    path = key_path()
    key, problem = stored_key(path)
    if key is not None or not create:
        return key
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if problem is not None:
            report_damaged_cache(path, problem + "; profiles signed with it are no longer believed")
            path.unlink(missing_ok=True)  # damaged (or a link): replaced, never written through
        key = secrets.token_bytes(KEY_BYTES)
        made = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        descriptor = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(key)
            os.link(made, path)
        finally:
            made.unlink(missing_ok=True)
    except FileExistsError:
        return stored_key(path)[0]
    except OSError:
        return None  # an unwritable cache: the profile is unsigned, its report asks for --source-root
    return key


def digest(key: bytes, payload: dict) -> str:
    return hmac.new(key, json.dumps(payload, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def sign(payload: dict) -> str:
    """The signature of ``payload`` (JSON-serialisable) with this user's key ('' when no key can be made)."""
    key = read_key(create=True)
    return digest(key, payload) if key is not None else ""


def signed_by_this_user(payload: dict, signature: object) -> bool:
    """Whether ``signature`` is this user's signature of ``payload``."""
    key = read_key(create=False)
    return key is not None and isinstance(signature, str) and hmac.compare_digest(digest(key, payload), signature)
