"""Atomic file writes: what a reader (or a crash) can see is the old file or the new one, never half.

Every file orion writes for a user — weight blobs, safetensors, checkpoints, caches — goes through
:func:`atomic_write`: a temporary file in the same folder, fsync, rename over the target, fsync of the
folder so the rename itself is durable.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile


def fsync_dir(path: str) -> None:
    """Makes a rename inside ``path`` durable (a no-op where the platform cannot open folders)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb"):
    """``with atomic_write(path) as f: f.write(...)`` — replaces ``path`` only when the block succeeds."""
    path = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    with atomic_write(path) as f:
        f.write(data)


def read_json(path: str, error: type[Exception], missing: str = "no such file", invalid: str = "not valid JSON"):
    """Parsed JSON from ``path``; failures raise ``error`` (an orion error class) as "<path>: <missing>" or
    "<path>: <invalid> (<reason>)"."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path}: {invalid} ({e})") from None
    except RecursionError:
        raise error(f"{path}: {invalid} (nested too deeply to be a configuration file)") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, expected a JSON file") from None
