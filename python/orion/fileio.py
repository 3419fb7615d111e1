"""Atomic file writes: what a reader (or a crash) can see is the old file or the new one, never half.

Every file orion writes for a user — weight blobs, safetensors, checkpoints, caches — goes through
:func:`atomic_write`: a temporary file in the same folder, fsync, rename over the target, fsync of the
folder so the rename itself is durable.
"""

from __future__ import annotations

import contextlib
import functools
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


def _umask() -> int:
    """The process umask: Linux reports it in /proc (thread-safe); elsewhere setting it is the only way to
    read it, which could race with other threads creating files, so that is done once."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return _umask_once()


@functools.lru_cache(maxsize=None)
def _umask_once() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def prune_stale_temps(folder: str, max_age_s: float = 3600.0) -> int:
    """Removes ``.<name>.*.tmp`` files that :func:`atomic_write` left behind when a process was killed
    mid-write (older than ``max_age_s``: a live writer's file is younger); returns how many."""
    import time
    n = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    now = time.time()
    for e in entries:
        if e.name.startswith(".") and e.name.endswith(".tmp") and e.is_file(follow_symlinks=False):
            with contextlib.suppress(OSError):
                if now - e.stat(follow_symlinks=False).st_mtime > max_age_s:
                    os.unlink(e.path)
                    n += 1
    return n


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb"):
    """``with atomic_write(path) as f: f.write(...)`` — replaces ``path`` only when the block succeeds."""
    path = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~_umask())        # mkstemp makes 0600; a user's files follow their umask
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
