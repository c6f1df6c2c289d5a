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


def read_key(create: bool) -> bytes | None:
    """This user's key; made (O_EXCL, no link followed) when missing or damaged and ``create`` is set."""
    path = key_path()
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as file:
            key = file.read(KEY_BYTES + 1)
        if len(key) == KEY_BYTES:
            return key
        problem = f"a profile key of {len(key)} bytes, not {KEY_BYTES}"
    except FileNotFoundError:
        problem = None
    except OSError as error:
        problem = f"unreadable profile key ({error.strerror})"
    if not create:
        return None
    if problem is not None:
        report_damaged_cache(path, problem + "; profiles signed with it are no longer believed")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # damaged (or a link): replaced, never written through
        key = secrets.token_bytes(KEY_BYTES)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(key)
        return key
    except OSError:
        return None  # an unwritable cache: the profile is unsigned, its report asks for --source-root


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
