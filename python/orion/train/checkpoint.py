"""Training checkpoints: a step folder is a model (Hugging Face layout) plus the optimizer state, written
atomically and verified on read.

Layout of a run folder ``DIR``::

    DIR/latest.json                 {"checkpoint": "step-00000100", "step": 100}   (replaced atomically)
    DIR/step-00000100/config.json   the family's HF config        } what orion.models.load, orion generate,
    DIR/step-00000100/model.safetensors   fp32, HF names          } orion train --init and transformers read
    DIR/step-00000100/tokenizer.*   the run's tokenizer files     }
    DIR/step-00000100/optim.safetensors   AdamW m./v. moments (+ ``exact.*``: master tensors whose HF form
                                          does not convert back bit for bit)
    DIR/step-00000100/state.json    step, RNG, data position, loss scale, configs, strategy (schema-checked)
    DIR/step-00000100/manifest.json size + sha256 of every other file, state.json included

LoRA runs keep only the adapter tensors (canonical names, no config.json). Version-1 folders (canonical
model.safetensors, the manifest inside state.json) are still read.

A checkpoint is written into a hidden temp folder, every file fsynced, the folder renamed into place and
fsynced, and only then is ``latest.json`` replaced (temp file, fsync, rename). A kill at any moment leaves
``latest.json`` pointing at a complete checkpoint; the next save removes what a killed one left. Paths
registered with :func:`protect` (the user's input weights and data) are never written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field

import numpy as np

from ..native import safetensors as st
from ..errors import ModelFormatError
from ..fileio import atomic_folder, prune_stale_temps, read_json
from ..models.loaders import hf_to_canonical, read_checkpoint
from ..run_folder import LATEST, MAX_STATE_BYTES, is_run, latest_step  # noqa: F401  (is_run: ck.is_run)
from ..run_folder import confined as _confined
from .errors import CheckpointError
from .hf_layout import hf_model_files
from .state_schema import validate_manifest, validate_state
# the writers live in writes.py (model export and data write through them too); ck.protect etc. stay here
from .writes import _check_writable, _protected, atomic_write, protect, write_with  # noqa: F401

FORMAT = "orion-train-checkpoint"
VERSION = 2
MANIFEST = "manifest.json"
CORE_FILES = ("config.json", "model.safetensors", "optim.safetensors", "state.json", MANIFEST)  # the rest: tokenizer
EXACT = "exact."
def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Checkpoint:
    path: str                      # the step folder
    params: dict                   # canonical names, fp32 (exactly the trainer's master weights)
    optim: dict
    state: dict
    files: dict = field(default_factory=dict)        # the manifest: file name -> {size, sha256}

    @property
    def step(self) -> int:
        return int(self.state["step"])

    @property
    def tokenizer(self) -> bytes | None:
        """The SentencePiece model the run trained or was given (None otherwise)."""
        p = os.path.join(self.path, "tokenizer.model")
        if "tokenizer.model" not in self.files:
            return None
        with open(p, "rb") as f:
            return f.read()

    def tokenizer_files(self) -> dict[str, bytes]:
        """The run's own tokenizer files (every file of the manifest besides the model, optimizer and state),
        as verified against the manifest: what a resumed run carries on, whatever became of its --init."""
        out = {}
        for fn, info in sorted(self.files.items()):
            if fn in CORE_FILES:
                continue
            with open(confined(self.path, fn, f"checkpoint {self.path}: manifest"), "rb") as f:
                data = f.read()
            if len(data) != info["size"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
                raise CheckpointError(f"checkpoint {self.path}: {fn} changed since the checkpoint was read "
                                      f"(sha256 mismatch)")
            out[fn] = data
        return out


def _model_files(cfg, params: dict) -> tuple[dict, dict]:
    """(files written as the HF layout, exact canonical tensors for optim.safetensors): config.json and
    model.safetensors in the family's HF form; a tensor whose HF form does not convert back bit for bit
    (Gemma's ``w - 1`` norms) is also kept as it is, so a resume continues from the exact master weights."""
    files, hf = hf_model_files(cfg, params)
    back = hf_to_canonical(cfg, hf, "checkpoint")
    exact = {EXACT + k: v for k, v in params.items() if not np.array_equal(back[k], v)}
    return files, exact


def save(ckpt_dir: str, step: int, params: dict, optim: dict, state: dict, files: dict | None = None,
         keep: int = 2, cfg=None) -> str:
    """Write checkpoint ``step`` and point ``latest.json`` at it; returns the step folder. ``cfg`` (full
    training): the weights are written in the Hugging Face layout of its family; without it (LoRA
    adapters) as they are. ``files``: extra files by name (the tokenizer's)."""
    ckpt_dir = os.path.abspath(ckpt_dir)
    _check_writable(ckpt_dir)
    os.makedirs(ckpt_dir, exist_ok=True)
    name = f"step-{int(step):08d}"
    final = os.path.join(ckpt_dir, name)
    # named so that _prune finds what a killed write left
    with atomic_folder(final, temp_prefix=f".tmp-{name}-", old_prefix=f".old-{name}-") as tmp:
        if cfg is not None:
            model_files, exact = _model_files(cfg, params)
        else:
            model_files, exact = {"model.safetensors": lambda f: st.write(f, params, {"format": FORMAT})}, {}
        writers = dict(model_files)
        writers["optim.safetensors"] = lambda f: st.write(f, {**optim, **exact}, {"format": FORMAT})
        for fn, data in (files or {}).items():
            writers.setdefault(fn, lambda f, data=data: f.write(data))
        full = dict(state, format=FORMAT, version=VERSION, step=int(step), weights="hf" if cfg is not None
                    else "canonical")
        full.pop("files", None)
        body = json.dumps(full, indent=1, sort_keys=True).encode()
        writers["state.json"] = lambda f: f.write(body)
        manifest = {}
        for fn, writer in writers.items():
            p = os.path.join(tmp, fn)
            write_with(p, writer)
            manifest[fn] = {"size": os.path.getsize(p), "sha256": _sha256(p)}
        man = json.dumps({"format": FORMAT, "version": VERSION, "files": manifest}, indent=1, sort_keys=True).encode()
        write_with(os.path.join(tmp, MANIFEST), lambda f: f.write(man))
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
    # a killed latest.json replace (no live writer: this process is the run's only writer)
    prune_stale_temps(ckpt_dir, max_age_s=0.0)


def resolve(path: str) -> str:
    """The step folder of ``path``: a checkpoint dir (via latest.json) or a step folder itself."""
    return latest_step(path, CheckpointError)


def confined(folder: str, name, where: str) -> str:
    """The path of manifest entry ``name`` inside ``folder``; one leading outside is a CheckpointError."""
    return _confined(folder, name, where, CheckpointError)


def _read_json(path: str, what: str):
    """state.json / manifest.json / latest.json through the bounded reader (size and nesting checked first)."""
    if not os.path.isfile(path):
        raise CheckpointError(f"{what} is missing")
    try:
        return read_json(path, ValueError, max_bytes=MAX_STATE_BYTES)
    except ValueError as e:
        raise CheckpointError(f"{what} is corrupt ({e})") from None


def read_state(path: str, verify: bool = False) -> dict:
    """state.json of ``path`` (run or step folder), schema-checked; ``verify``: its size and sha256
    checked against the manifest first."""
    folder = resolve(path)
    where = f"checkpoint {folder}: state.json"
    if verify:
        files = read_manifest(folder)
        _verify(folder, "state.json", files.get("state.json"), True)
    state = _read_json(os.path.join(folder, "state.json"), where)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {folder}: not an orion train checkpoint")
    if state.get("version") not in (1, VERSION):
        raise CheckpointError(f"checkpoint {folder}: format version {state.get('version')!r} is not supported "
                              f"(this orion reads versions 1 and {VERSION})")
    validate_state(state, where)
    return state


def read_manifest(folder: str) -> dict:
    """The manifest (file name -> size, sha256) of a step folder: manifest.json (version 2, state.json
    included) or, in version 1 folders, state.json's own ``files``."""
    where = f"checkpoint {folder}: {MANIFEST}"
    mp = os.path.join(folder, MANIFEST)
    if os.path.isfile(mp):
        man = _read_json(mp, where)
        files = man.get("files") if isinstance(man, dict) else None
        if "state.json" not in (files or {}):
            raise CheckpointError(f"{where}: lists no state.json")
    else:
        st1 = _read_json(os.path.join(folder, "state.json"), f"checkpoint {folder}: state.json")
        if not isinstance(st1, dict) or st1.get("version") != 1:
            raise CheckpointError(f"{where} is missing")
        where, files = f"checkpoint {folder}: state.json", st1.get("files")
    validate_manifest(files, where)
    for fn in files:
        confined(folder, fn, where)
    return files


def _verify(folder: str, fn: str, info: dict | None, verify: bool) -> None:
    if info is None:
        raise CheckpointError(f"checkpoint {folder}: {fn} is not in the manifest")
    p = confined(folder, fn, f"checkpoint {folder}: manifest")
    if not os.path.isfile(p):
        raise CheckpointError(f"checkpoint {folder}: {fn} is missing")
    if os.path.getsize(p) != info["size"]:
        raise CheckpointError(f"checkpoint {folder}: {fn} has {os.path.getsize(p)} bytes, expected "
                              f"{info['size']} (truncated or corrupt)")
    if verify and _sha256(p) != info["sha256"]:
        raise CheckpointError(f"checkpoint {folder}: {fn} is corrupt (sha256 mismatch)")


def load(path: str, verify: bool = True) -> Checkpoint:
    """Reads and verifies (sizes + sha256 of every file, state.json included; the state's schema) a
    checkpoint; raises CheckpointError when anything is off. Weights come back in canonical names."""
    folder = resolve(path)
    files = read_manifest(folder)
    v1 = not os.path.isfile(os.path.join(folder, MANIFEST))      # its manifest is inside state.json
    for fn in ("model.safetensors", "optim.safetensors") + (() if v1 else ("state.json",)):
        if fn not in files:
            raise CheckpointError(f"checkpoint {folder}: the manifest lists no {fn}")
    for fn, info in files.items():
        _verify(folder, fn, info, verify)
    state = read_state(folder)
    try:
        optim, _ = st.load(os.path.join(folder, "optim.safetensors"))
        if state.get("weights") == "hf":
            params = dict(read_checkpoint(folder).weights)
        else:
            params, _ = st.load(os.path.join(folder, "model.safetensors"))
    except ModelFormatError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
    params = {k: np.array(v, np.float32) for k, v in params.items()}
    for k in [k for k in optim if k.startswith(EXACT)]:        # tensors the HF form cannot hold bit for bit
        params[k[len(EXACT):]] = np.array(optim.pop(k), np.float32)
    optim = {k: np.array(v, np.float32) for k, v in optim.items()}
    return Checkpoint(folder, params, optim, state, files)
