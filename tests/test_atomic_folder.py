"""orion.fileio.atomic_folder, the one writer of folders that must appear whole (checkpoints, HF exports, saved
programs): a reader sees the old folder or the complete new one; a failed write changes nothing on disk."""

import os

import pytest
from orion import fileio
from orion.fileio import atomic_folder


def _tree(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def _write(folder, files):
    for rel, data in files.items():
        p = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)


def test_a_new_folder_appears_whole_with_the_users_umask(tmp_path):
    target = tmp_path / "out" / "model"                  # missing parents are made
    with atomic_folder(target) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path / "out") and os.path.basename(tmp).startswith(".model.")
        _write(tmp, {"a.bin": b"1", "sub/b.bin": b"2"})
        assert not target.exists()                       # nothing visible until the block ends
    assert _tree(target) == {"a.bin": b"1", os.path.join("sub", "b.bin"): b"2"}
    assert os.listdir(tmp_path / "out") == ["model"]
    assert os.stat(target).st_mode & 0o777 == 0o777 & ~fileio._umask()


def test_an_existing_folder_is_replaced_and_its_old_copy_removed(tmp_path):
    target = tmp_path / "model"
    _write(target, {"old.bin": b"old", "keep.bin": b"x"})
    with atomic_folder(target) as tmp:
        _write(tmp, {"keep.bin": b"new"})
    assert _tree(target) == {"keep.bin": b"new"}
    assert os.listdir(tmp_path) == ["model"]


def test_a_failing_block_leaves_the_old_folder_and_no_temp(tmp_path):
    target = tmp_path / "model"
    _write(target, {"a.bin": b"old"})
    with pytest.raises(RuntimeError, match="writer failed"), atomic_folder(target) as tmp:
        _write(tmp, {"a.bin": b"half"})
        raise RuntimeError("writer failed")
    assert _tree(target) == {"a.bin": b"old"}
    assert os.listdir(tmp_path) == ["model"]


def test_a_failed_rename_into_place_puts_the_old_folder_back(tmp_path, monkeypatch):
    target = tmp_path / "model"
    _write(target, {"a.bin": b"old"})
    real = os.rename

    def rename(src, dst):
        if os.path.basename(src).endswith(".tmp"):      # the new folder's move into place
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="No space"), atomic_folder(target) as tmp:
        _write(tmp, {"a.bin": b"new"})
    assert _tree(target) == {"a.bin": b"old"}
    assert os.listdir(tmp_path) == ["model"]


def test_the_hidden_names_are_the_callers_to_choose(tmp_path):
    seen = []
    with atomic_folder(tmp_path / "step-1", temp_prefix=".tmp-step-1-") as tmp:
        seen.append(os.path.basename(tmp))
    assert seen[0].startswith(".tmp-step-1-") and seen[0].endswith(".tmp")
