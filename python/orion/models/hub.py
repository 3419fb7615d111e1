"""Model names as people type them (``Qwen/Qwen3-0.6B``): resolved to a local folder through
``huggingface_hub`` — its cache first, a download of only what orion reads (config, safetensors,
tokenizer files) otherwise, never a download when ``HF_HUB_OFFLINE`` is set.

The cache location and offline mode are read from the environment at each call (``HF_HUB_CACHE``,
``HUGGINGFACE_HUB_CACHE``, ``HF_HOME``, ``HF_HUB_OFFLINE``), not frozen when huggingface_hub is imported.
"""

from __future__ import annotations

import os
import re
import unicodedata

from ..errors import ModelFormatError

__all__ = ["ALLOW_PATTERNS", "is_repo_id", "repo_id_problem", "hub_cache_dir", "hub_offline", "resolve_repo"]

# What orion reads from a checkpoint folder; nothing else is downloaded (no .bin/.pt/.gguf duplicates).
ALLOW_PATTERNS = ["config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
                  "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                  "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja"]

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$", re.ASCII)


def is_repo_id(name: str) -> bool:
    """``org/name`` shaped as on the Hub (one slash, no leading dot or slash, no '..', no '--'). A name of
    that shape with non-ASCII characters counts too, so that :func:`resolve_repo` can say what is wrong
    with it (:func:`repo_id_problem`) instead of a plain "no such file"."""
    shape = "".join(c if c.isascii() else "x" for c in name)
    return bool(_REPO_ID.match(shape)) and ".." not in name and "--" not in name and not name.endswith(".")


def repo_id_problem(name: str) -> str | None:
    """Why ``name`` is not a valid Hub id (None when it is): the Hub allows org/name in ASCII letters,
    digits, '-', '_' and '.' only, which look-alike characters pasted from a web page often are not."""
    for i, c in enumerate(name):
        if not c.isascii():
            what = unicodedata.name(c, "unnamed")
            return (f"the character {c!r} (U+{ord(c):04X} {what}) at position {i + 1} is not ASCII; Hub ids are "
                    f"org/name in ASCII letters, digits, '-', '_' and '.' (retype it)")
    if not is_repo_id(name):
        return "Hub ids are org/name in ASCII letters, digits, '-', '_' and '.', without '--' or '..'"
    return None


def hub_cache_dir() -> str:
    """huggingface_hub's cache folder by its own rules, from the current environment."""
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                                       ".cache"), "huggingface")
    path = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return os.path.expandvars(os.path.expanduser(path))


def hub_offline() -> bool:
    v = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return v.strip().upper() in ("1", "ON", "YES", "TRUE")


def resolve_repo(repo_id: str, revision: str | None = None) -> str:
    """The local snapshot folder of ``repo_id``: from the cache when it is there, else downloaded
    (unless offline). Raises :class:`ModelFormatError` saying how to fix it."""
    problem = repo_id_problem(repo_id)
    if problem:                              # before the cache: huggingface_hub's refusal would be blamed on it
        raise ModelFormatError(f"{repo_id!r}: no such local file or folder, and not a valid Hugging Face Hub id: "
                               f"{problem}")
    try:
        from huggingface_hub import snapshot_download  # start-up: huggingface_hub only for a Hub name
        from huggingface_hub.errors import (  # start-up: huggingface_hub only for a Hub name
            HFValidationError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise ModelFormatError(f"{repo_id}: loading models by Hub name needs the 'huggingface_hub' package "
                               f"(pip install huggingface_hub), or pass a local folder") from None
    cache = hub_cache_dir()
    kw = dict(revision=revision, cache_dir=cache, allow_patterns=ALLOW_PATTERNS)
    partial = None
    try:
        folder = snapshot_download(repo_id, local_files_only=True, **kw)     # the cache first
        if _has_model(folder):
            return folder
        partial = folder
    except LocalEntryNotFoundError:
        pass
    except HFValidationError as e:           # an id or revision the Hub refuses, whatever the cache holds
        raise ModelFormatError(f"{repo_id!r}{f' (revision {revision!r})' if revision else ''}: not a valid Hugging "
                               f"Face Hub id or revision: {str(e).splitlines()[0]}") from None
    except Exception as e:  # noqa: BLE001 - a malformed cache entry: report it, do not hide it
        raise ModelFormatError(f"{repo_id}: the Hugging Face cache entry in {cache} is unusable "
                               f"({type(e).__name__}: {e}); delete models--{repo_id.replace('/', '--')} there") from None
    if hub_offline() and partial is not None:
        raise ModelFormatError(f"{repo_id}: the cached snapshot {partial} lacks config.json or the *.safetensors "
                               f"weights and HF_HUB_OFFLINE is set. Fix: run once with network and without "
                               f"HF_HUB_OFFLINE (or `hf download {repo_id}`), or pass a local folder")
    if hub_offline():
        raise ModelFormatError(f"{repo_id}: not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE is set, so "
                               f"nothing is downloaded. Fix: run once with network and without HF_HUB_OFFLINE "
                               f"(or `hf download {repo_id}`), point HF_HUB_CACHE/HF_HOME at the cache that holds "
                               f"it, or pass a local folder")
    try:
        folder = snapshot_download(repo_id, **kw)
    except RepositoryNotFoundError as e:          # GatedRepoError too
        raise ModelFormatError(f"{repo_id}: the Hub has no such repository, or it is private/gated ({type(e).__name__}); "
                               f"check the name, or log in with `hf auth login` after accepting its terms") from None
    except RevisionNotFoundError:
        raise ModelFormatError(f"{repo_id}: no revision {revision!r} on the Hub") from None
    except LocalEntryNotFoundError as e:
        raise ModelFormatError(f"{repo_id}: cannot reach the Hugging Face Hub and it is not in the cache ({cache}): "
                               f"{str(e).splitlines()[0]}; check the network or pass a local folder") from None
    except OSError as e:
        raise ModelFormatError(f"{repo_id}: download failed ({type(e).__name__}: {e})") from None
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise ModelFormatError(f"{repo_id}: the repository has no config.json (not a transformers model folder)")
    return folder


def _has_model(folder: str) -> bool:
    """A cached snapshot made by another tool may hold only some files (e.g. config.json alone)."""
    names = os.listdir(folder)
    return "config.json" in names and any(n.endswith(".safetensors") for n in names)
