"""state.json of a checkpoint: covered by the sha256 manifest, its schema checked on read
(a missing key or a wrong type is a CheckpointError naming the key, not a KeyError/TypeError on --resume),
and the manifest's file entries confined to the checkpoint folder."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from train_helpers import lively_params, micro_config, minimal_state
from orion.train import checkpoint as ck
from orion.train.errors import CheckpointError


@pytest.fixture
def saved(tmp_path):
    cfg = micro_config()
    d = str(tmp_path / "run")
    folder = ck.save(d, 3, lively_params(cfg), {"m.a": np.ones(2, np.float32)}, minimal_state(cfg), cfg=cfg)
    return d, folder


def _rewrite(folder: str, fn: str, edit) -> None:
    """Changes ``fn`` and updates the manifest to match (a consistent edit: only the schema can catch it)."""
    p = os.path.join(folder, fn)
    with open(p) as f:
        d = json.load(f)
    edit(d)
    with open(p, "w") as f:
        json.dump(d, f)
    mp = os.path.join(folder, ck.MANIFEST)
    with open(mp) as f:
        man = json.load(f)
    man["files"][fn] = {"size": os.path.getsize(p), "sha256": ck._sha256(p)}
    with open(mp, "w") as f:
        json.dump(man, f)


def test_state_json_is_in_the_manifest(saved):
    d, folder = saved
    p = os.path.join(folder, "state.json")
    with open(p) as f:
        body = f.read()
    with open(p, "w") as f:
        f.write(body.replace('"step": 3', '"step": 4'))          # same size, other content
    with pytest.raises(CheckpointError, match="state.json is corrupt"):
        ck.load(d)


@pytest.mark.parametrize("edit,key", [
    (lambda s: s.pop("data"), "'data' is missing"),
    (lambda s: s["data"].pop("cursor"), "'data.cursor' is missing"),
    (lambda s: s["data"].update(cursor="abc"), "'data.cursor' must be an integer"),
    (lambda s: s.update(step=1.5), "'step' must be an integer"),
    (lambda s: s.update(step=True), "'step' must be an integer"),
    (lambda s: s.update(model=[1]), "'model' must be an object"),
    (lambda s: s["optimizer"].update(t=None), "'optimizer.t' must be an integer"),
    (lambda s: s["scaler"].update(scale="big"), "'scaler.scale' must be a number"),
    (lambda s: s["train"].update(batch="8"), "'train.batch' must be an integer"),
    (lambda s: s["train"].update(lr=[1]), "'train.lr' must be a number"),
    (lambda s: s.update(history={"a": 1}), "'history' must be a list"),
    (lambda s: s.update(history=["x"]), "'history' must be a list of numbers"),
    (lambda s: s.update(stability={"skipped_steps": "2"}), "'stability.skipped_steps' must be an integer"),
    (lambda s: s.update(weights="torch"), "'weights' must be one of"),
    (lambda s: s["data"].update(epoch=-1), "must be >= 0"),
])
def test_a_wrong_state_is_a_checkpoint_error_naming_the_key(saved, edit, key):
    d, folder = saved
    _rewrite(folder, "state.json", edit)
    with pytest.raises(CheckpointError, match=key.replace("(", r"\(")) as e:
        ck.load(d)
    assert "state.json" in str(e.value)


@pytest.mark.parametrize("name", ["../outside.bin", "/etc/passwd", "sub/x", "..", ""])
def test_manifest_entries_stay_inside_the_folder(saved, tmp_path, name):
    d, folder = saved
    (tmp_path / "outside.bin").write_bytes(b"x")
    _rewrite(folder, ck.MANIFEST, lambda m: m["files"].update({name: {"size": 1, "sha256": "0" * 64}}))
    with pytest.raises(CheckpointError, match="file entry"):
        ck.load(d)


def test_a_symlink_out_of_the_folder_is_refused(saved, tmp_path):
    d, folder = saved
    (tmp_path / "secret").write_bytes(b"s")
    os.symlink(str(tmp_path / "secret"), os.path.join(folder, "link"))
    _rewrite(folder, ck.MANIFEST, lambda m: m["files"].update(link={"size": 1, "sha256": "0" * 64}))
    with pytest.raises(CheckpointError, match="leads outside"):
        ck.load(d)


def test_latest_json_cannot_point_outside(saved, tmp_path):
    d, _ = saved
    os.symlink(str(tmp_path), os.path.join(d, "step-99999999"))
    with open(os.path.join(d, ck.LATEST), "w") as f:
        json.dump({"checkpoint": "step-99999999"}, f)
    with pytest.raises(CheckpointError, match="outside"):
        ck.load(d)
    with open(os.path.join(d, ck.LATEST), "w") as f:
        json.dump({"checkpoint": "../run"}, f)
    with pytest.raises(CheckpointError, match="latest.json"):
        ck.load(d)


def test_a_valid_state_loads_with_its_weights(saved):
    d, _ = saved
    got = ck.load(d)
    cfg = micro_config()
    want = lively_params(cfg)
    assert got.step == 3 and set(got.params) == set(want)
    for k in want:
        np.testing.assert_array_equal(got.params[k], want[k])


def test_a_version_1_checkpoint_still_loads(tmp_path):
    """Version 1 (canonical model.safetensors, the manifest inside state.json) as written before the HF layout."""
    from orion.native import safetensors as st
    cfg = micro_config()
    p = lively_params(cfg)
    folder = tmp_path / "run" / "step-00000002"
    folder.mkdir(parents=True)
    files = {}
    for fn, tensors in (("model.safetensors", p), ("optim.safetensors", {"m.a": np.ones(2, np.float32)})):
        with open(folder / fn, "wb") as f:
            st.write(f, tensors, {"format": ck.FORMAT})
        files[fn] = {"size": os.path.getsize(folder / fn), "sha256": ck._sha256(str(folder / fn))}
    state = dict(minimal_state(cfg), format=ck.FORMAT, version=1, step=2, files=files)
    (folder / "state.json").write_text(json.dumps(state))
    (tmp_path / "run" / ck.LATEST).write_text(json.dumps({"checkpoint": "step-00000002", "step": 2}))
    got = ck.load(str(tmp_path / "run"))
    assert got.step == 2
    for k in p:
        np.testing.assert_array_equal(got.params[k], p[k])
    files["model.safetensors"]["sha256"] = "0" * 64
    (folder / "state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt"):
        ck.load(str(tmp_path / "run"))
