"""The layout of an ``orion train`` run folder that readers outside training need: ``latest.json`` names the
newest step folder (itself a Hugging Face model folder with a ``state.json``), so ``orion.models.load(run)``
and the training code resolve a run the same way. Everything else about checkpoints is in
:mod:`orion.train.checkpoint`. The functions take the error type to raise (a training caller's
CheckpointError, a model loader's ModelFormatError), as :func:`orion.fileio.read_json` does."""

from __future__ import annotations

import os

from .fileio import read_json

LATEST = "latest.json"
STATE = "state.json"
MAX_STATE_BYTES = 64 << 20          # state.json holds the run history: megabytes at most, never more

__all__ = ["LATEST", "STATE", "MAX_STATE_BYTES", "is_run", "is_run_pointer", "latest_step", "confined"]


def is_run(path: str) -> bool:
    """Whether ``path`` is an orion train run folder (latest.json) or one of its step folders."""
    return os.path.isdir(path) and (os.path.isfile(os.path.join(path, LATEST)) or
                                    os.path.isfile(os.path.join(path, STATE)))


def is_run_pointer(path: str) -> bool:
    """Whether ``path`` is a run folder that names its latest step (and is not itself a model folder)."""
    return os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")) and \
        os.path.isfile(os.path.join(path, LATEST))


def confined(folder: str, name, where: str, error: type[Exception]) -> str:
    """The path of the entry ``name`` inside ``folder``; a name with a folder part, '..', an absolute
    path or a symlink leading outside raises ``error``."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name or \
            os.path.isabs(name) or "\0" in name:
        raise error(f"{where}: file entry {name!r} is not a plain file name inside the checkpoint folder")
    p = os.path.join(folder, name)
    real, root = os.path.realpath(p), os.path.realpath(folder)
    if os.path.dirname(real) != root:
        raise error(f"{where}: file entry {name!r} leads outside the checkpoint folder ({real})")
    return p


def latest_step(path: str, error: type[Exception]) -> str:
    """The step folder of ``path``: a run folder (via latest.json) or a step folder itself; ``error`` when
    it is neither or latest.json is damaged."""
    if not os.path.exists(path):
        raise error(f"checkpoint {path}: no such file or folder")
    if os.path.isfile(os.path.join(path, STATE)):
        return path
    lp = os.path.join(path, LATEST)
    if not os.path.isfile(lp):
        raise error(f"checkpoint {path}: no {LATEST} and no {STATE} (not an orion train checkpoint)")
    try:
        name = read_json(lp, ValueError, max_bytes=MAX_STATE_BYTES)["checkpoint"]
    except (ValueError, KeyError, TypeError) as e:
        raise error(f"checkpoint {path}: corrupt {LATEST} ({e})") from None
    if not isinstance(name, str) or not name.startswith("step-"):
        raise error(f"checkpoint {path}: corrupt {LATEST} (bad folder name {name!r})")
    return confined(path, name, f"checkpoint {path}: {LATEST}", error)
