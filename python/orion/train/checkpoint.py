"""Training checkpoints: safetensors weights + optimizer moments + a JSON state, written atomically.

Layout of a checkpoint folder ``DIR``::

    DIR/latest.json              {"checkpoint": "step-00000100", "step": 100}   (replaced atomically)
    DIR/step-00000100/model.safetensors   fp32 master weights (canonical names)
    DIR/step-00000100/optim.safetensors   AdamW m./v. moments
    DIR/step-00000100/state.json          step, RNG, data position, loss scale, configs, strategy, and the
                                          size + sha256 of every other file (corruption is detected)
    DIR/step-00000100/tokenizer.model     when the run trained or was given a SentencePiece model

A checkpoint is written into a hidden temp folder, every file fsynced, the folder renamed into place and
fsynced, and only then is ``latest.json`` replaced (temp file, fsync, rename). A kill at any moment leaves
``latest.json`` pointing at a complete checkpoint. Paths registered with :func:`protect` (the user's
input weights and data) are never written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

from .. import safetensors as st
from ..errors import ModelFormatError
from ..fileio import atomic_write as _atomic_write, fsync_dir as _fsync_dir
from .errors import CheckpointError

FORMAT = "orion-train-checkpoint"
VERSION = 1
LATEST = "latest.json"
_protected: set[str] = set()


def protect(path: str | None) -> None:
    """Never write ``path`` (or into it, when a folder) from this module."""
    if path:
        _protected.add(os.path.realpath(path))


def _check_writable(path: str) -> None:
    rp = os.path.realpath(path)
    for p in _protected:
        if rp == p or rp.startswith(p.rstrip(os.sep) + os.sep):
            raise CheckpointError(f"refusing to write {path}: it is (inside) the input {p}, which orion train never "
                                  f"overwrites; choose another output path")


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "wb"):
    """:func:`orion.fileio.atomic_write`, refusing paths inside the user's input weights."""
    _check_writable(os.path.abspath(path))
    with _atomic_write(path, mode) as f:
        yield f


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_fsynced(path: str, writer) -> None:
    with open(path, "wb") as f:
        writer(f)
        f.flush()
        os.fsync(f.fileno())


@dataclass
class Checkpoint:
    path: str                      # the step folder
    params: dict
    optim: dict
    state: dict
    tokenizer: bytes | None = None

    @property
    def step(self) -> int:
        return int(self.state["step"])


def save(ckpt_dir: str, step: int, params: dict, optim: dict, state: dict, tokenizer: bytes | None = None,
         keep: int = 2) -> str:
    """Write checkpoint ``step`` and point ``latest.json`` at it; returns the step folder."""
    ckpt_dir = os.path.abspath(ckpt_dir)
    _check_writable(ckpt_dir)
    os.makedirs(ckpt_dir, exist_ok=True)
    name = f"step-{int(step):08d}"
    final = os.path.join(ckpt_dir, name)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=ckpt_dir)
    try:
        files = {
            "model.safetensors": lambda f: st.write(f, params, {"format": FORMAT}),
            "optim.safetensors": lambda f: st.write(f, optim, {"format": FORMAT}),
        }
        if tokenizer is not None:
            files["tokenizer.model"] = lambda f: f.write(tokenizer)
        manifest = {}
        for fn, writer in files.items():
            p = os.path.join(tmp, fn)
            _write_fsynced(p, writer)
            manifest[fn] = {"size": os.path.getsize(p), "sha256": _sha256(p)}
        full = dict(state, format=FORMAT, version=VERSION, step=int(step), files=manifest)
        data = json.dumps(full, indent=1, sort_keys=True).encode()
        _write_fsynced(os.path.join(tmp, "state.json"), lambda f: f.write(data))
        _fsync_dir(tmp)
        if os.path.exists(final):                  # the same step written again (e.g. after a resume)
            old = tempfile.mkdtemp(prefix=f".old-{name}-", dir=ckpt_dir)
            os.rmdir(old)
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync_dir(ckpt_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    with atomic_write(os.path.join(ckpt_dir, LATEST), "w") as f:
        json.dump({"format": FORMAT, "checkpoint": name, "step": int(step)}, f)
    _prune(ckpt_dir, keep, name)
    return final


def _prune(ckpt_dir: str, keep: int, current: str) -> None:
    steps = sorted(n for n in os.listdir(ckpt_dir)
                   if n.startswith("step-") and os.path.isdir(os.path.join(ckpt_dir, n)))
    for n in steps[:-keep] if keep > 0 else []:
        if n != current:
            shutil.rmtree(os.path.join(ckpt_dir, n), ignore_errors=True)
    for n in os.listdir(ckpt_dir):                  # leftovers of killed writes
        if n.startswith((".tmp-step-", ".old-step-")):
            shutil.rmtree(os.path.join(ckpt_dir, n), ignore_errors=True)


def resolve(path: str) -> str:
    """The step folder of ``path``: a checkpoint dir (via latest.json) or a step folder itself."""
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint {path}: no such file or folder")
    if os.path.isfile(os.path.join(path, "state.json")):
        return path
    lp = os.path.join(path, LATEST)
    if not os.path.isfile(lp):
        raise CheckpointError(f"checkpoint {path}: no {LATEST} and no state.json (not an orion train checkpoint)")
    try:
        with open(lp) as f:
            latest = json.load(f)
        name = latest["checkpoint"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: corrupt {LATEST} ({e})") from None
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        raise CheckpointError(f"checkpoint {path}: corrupt {LATEST} (bad folder name {name!r})")
    return os.path.join(path, name)


def read_state(path: str) -> dict:
    folder = resolve(path)
    try:
        with open(os.path.join(folder, "state.json")) as f:
            state = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {folder}: state.json is missing") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder}: corrupt state.json ({e})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {folder}: not an orion train checkpoint")
    if state.get("version") != VERSION:
        raise CheckpointError(f"checkpoint {folder}: format version {state.get('version')} is not supported "
                              f"(this orion reads version {VERSION})")
    return state


def load(path: str, verify: bool = True) -> Checkpoint:
    """Reads and verifies (sizes + sha256) a checkpoint; raises CheckpointError when anything is off."""
    folder = resolve(path)
    state = read_state(folder)
    files = state.get("files") or {}
    for fn in ("model.safetensors", "optim.safetensors"):
        if fn not in files:
            raise CheckpointError(f"checkpoint {folder}: state.json lists no {fn}")
    for fn, info in files.items():
        p = os.path.join(folder, fn)
        if not os.path.isfile(p):
            raise CheckpointError(f"checkpoint {folder}: {fn} is missing")
        if os.path.getsize(p) != info.get("size"):
            raise CheckpointError(f"checkpoint {folder}: {fn} has {os.path.getsize(p)} bytes, expected "
                                  f"{info.get('size')} (truncated or corrupt)")
        if verify and _sha256(p) != info.get("sha256"):
            raise CheckpointError(f"checkpoint {folder}: {fn} is corrupt (sha256 mismatch)")
    try:
        params, _ = st.load(os.path.join(folder, "model.safetensors"))
        optim, _ = st.load(os.path.join(folder, "optim.safetensors"))
    except ModelFormatError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
    tok = None
    if "tokenizer.model" in files:
        with open(os.path.join(folder, "tokenizer.model"), "rb") as f:
            tok = f.read()
    params = {k: np.array(v, np.float32) for k, v in params.items()}
    optim = {k: np.array(v, np.float32) for k, v in optim.items()}
    return Checkpoint(folder, params, optim, state, tok)
