"""Atomic file writes: what a reader (or a crash) can see is the old file or the new one, never half.

Every file orion writes for a user — weight blobs, safetensors, checkpoints, caches — goes through
:func:`atomic_write`: a temporary file in the same folder, fsync, rename over the target, fsync of the
folder so the rename itself is durable; a folder of files written together (a checkpoint, an exported model,
a saved program) goes through :func:`atomic_folder`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import tempfile
import time

import numpy as np


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


def _fsync_tree(root: str) -> None:
    """fsync of every file and folder under ``root`` (the folders last, so their entries are durable)."""
    for dirpath, _, names in os.walk(root, topdown=False):
        for n in names:
            p = os.path.join(dirpath, n)
            if os.path.islink(p):
                continue
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike, *, temp_prefix: str | None = None, old_prefix: str | None = None):
    """``with atomic_folder(path) as tmp: <write files into tmp>`` — the folder analogue of
    :func:`atomic_write`: files go into a hidden sibling folder, which is fsynced (every file and folder) and
    renamed over ``path`` only when the block succeeds; a reader or a kill sees the old folder or the complete
    new one, never a mix. An existing ``path`` is moved aside, replaced, then removed; whether it may be
    replaced at all is the caller's check. ``temp_prefix`` / ``old_prefix``: the hidden names (mkdtemp
    prefixes) of the folder being written and of the one moved aside, default ``.<name>.`` and ``.<name>.old.``,
    for a caller that sweeps leftovers of killed writes by name."""
    path = os.path.abspath(os.fspath(path))
    parent, base = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=temp_prefix or f".{base}.", suffix=".tmp", dir=parent)
    try:
        os.chmod(tmp, 0o777 & ~_umask())       # mkdtemp makes 0700; a user's folders follow their umask
        yield tmp
        _fsync_tree(tmp)
        old = None
        if os.path.lexists(path):
            old = tempfile.mkdtemp(prefix=old_prefix or f".{base}.old.", dir=parent)
            os.rmdir(old)                       # a free hidden name, taken by the rename below
            os.rename(path, old)
        try:
            os.rename(tmp, path)
        except BaseException:
            if old is not None:                 # put the old folder back rather than leave none
                with contextlib.suppress(OSError):
                    os.rename(old, path)
            raise
        fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        _remove(old)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    with atomic_write(path) as f:
        f.write(data)


# Bounds of the JSON orion reads from users' files (configs, tokenizers, adapters, scales, bench results):
# the largest tokenizer.json files are tens of MB; no configuration nests more than a dozen levels, and
# Python's parser recurses once per level (a deeply nested file is a RecursionError, not a parse error).
MAX_JSON_BYTES = 256 << 20
MAX_JSON_DEPTH = 100
MAX_JSONL_LINE_BYTES = 1 << 20           # one record of a log

_BRACKETS_AND_QUOTES = b'"[]{}'
_DROP_OTHERS = bytes(b for b in range(256) if b not in _BRACKETS_AND_QUOTES)
_STRING = re.compile(rb'"[^"]*"')


def json_nesting_depth(data: bytes) -> int:
    """How deeply the arrays/objects of the JSON text ``data`` nest (brackets inside strings do not count),
    found at C speed without parsing: escaped backslashes and quotes go first, then every byte but quotes
    and brackets, then the (now escape-free) strings."""
    s = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _DROP_OTHERS)
    s = _STRING.sub(b"", s)
    if not s:
        return 0
    a = np.frombuffer(s, np.uint8)
    return int(np.cumsum(np.where((a == ord("[")) | (a == ord("{")), 1, -1)).max())


def _check_depth(data: bytes, where: str, error: type[Exception], invalid: str) -> None:
    depth = json_nesting_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise error(f"{where}: {invalid} (nested too deeply: {depth} levels, more than the {MAX_JSON_DEPTH} a data "
                    f"file can need)")


def _loads(data: bytes, where: str, error: type[Exception], invalid: str):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: {invalid} (not UTF-8 text: byte 0x{data[e.start]:02x} at byte offset {e.start})") \
            from None
    try:
        return json.loads(text)
    except ValueError as e:      # JSONDecodeError, and an integer literal of more than 4300 digits
        raise error(f"{where}: {invalid} ({e})") from None
    except RecursionError:       # the depth scan is exact on valid JSON; malformed text may fool it
        raise error(f"{where}: {invalid} (nested too deeply)") from None


def parse_json(data: bytes | str, where: str, error: type[Exception], invalid: str = "not valid JSON"):
    """Parsed JSON text of at most :data:`MAX_JSON_DEPTH` levels; anything else raises ``error`` as
    "<where>: <invalid> (<reason>)" (an undecodable byte is named by its offset)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    _check_depth(data, where, error, invalid)
    return _loads(data, where, error, invalid)


def read_json(path: str, error: type[Exception], missing: str = "no such file", invalid: str = "not valid JSON",
              max_bytes: int = MAX_JSON_BYTES):
    """Parsed JSON from ``path`` (at most ``max_bytes``, checked before reading; :func:`parse_json`'s depth
    bound); failures raise ``error`` (an orion error class) as "<path>: <missing>" or
    "<path>: <invalid> (<reason>)"."""
    path = os.fspath(path)
    with open_for_reading(path, error, missing, "a JSON file") as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise error(f"{path}: {invalid} ({size} bytes, more than the {max_bytes} a JSON file of this kind "
                        f"can need)")
        data = f.read(max_bytes + 1)              # st_size is 0 for pipes and /proc files
    if len(data) > max_bytes:
        raise error(f"{path}: {invalid} (more than the {max_bytes} bytes a JSON file of this kind can need)")
    return parse_json(data, path, error, invalid)


def iter_jsonl(path: str, error: type[Exception], skip_invalid: bool = False,
               max_line_bytes: int = MAX_JSONL_LINE_BYTES):
    """``(line number, value)`` of every non-blank line of a JSON Lines file, read a line at a time (each at
    most ``max_line_bytes``, :func:`parse_json`'s depth bound). A line that is not JSON raises ``error``
    naming the file and line, or is skipped with ``skip_invalid`` (a log whose writer was killed mid-line);
    an over-long or over-deep line always raises: no writer produces one."""
    path = os.fspath(path)
    with open_for_reading(path, error, "no such file", "a JSON Lines file") as f:
        yield from _jsonl_records(f, path, error, skip_invalid, max_line_bytes)


@contextlib.contextmanager
def open_for_reading(path: str, error: type[Exception], missing: str, kind: str):
    """``path`` opened for reading bytes; a missing file, a folder or an unreadable file is ``error``."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, expected {kind}") from None
    except OSError as e:
        raise error(f"{path}: cannot read it ({e.strerror or e})") from None
    with f:
        try:
            yield f
        except OSError as e:                      # reading it failed (EIO, a vanished network file, ...)
            raise error(f"{path}: cannot read it ({e.strerror or e})") from None


def _jsonl_records(f, path: str, error: type[Exception], skip_invalid: bool, max_line_bytes: int):
    for n, raw in enumerate(iter(lambda: f.readline(max_line_bytes + 1), b""), 1):
        where = f"{path}, line {n}"
        if len(raw) > max_line_bytes:
            raise error(f"{where}: longer than {max_line_bytes} bytes (not a JSON Lines record)")
        if not raw.strip():
            continue
        _check_depth(raw, where, error, "not valid JSON")
        try:
            value = _loads(raw, where, error, "not valid JSON")
        except error:
            if skip_invalid:
                continue
            raise
        yield n, value
