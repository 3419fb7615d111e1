"""A model path that is an ``orion train`` run folder means its latest step folder (orion.run_folder, the one
reading of latest.json that models and training share); a damaged latest.json is a ModelFormatError naming
it, before any loading."""

from __future__ import annotations

import pytest

from orion.errors import ModelFormatError
from orion.models.model import resolve_model_path


def _run(tmp_path, latest: str):
    run = tmp_path / "run"
    (run / "step-00000002").mkdir(parents=True)
    (run / "step-00000002" / "state.json").write_text("{}")
    (run / "latest.json").write_text(latest)
    return run


def test_a_run_folder_means_its_latest_step(tmp_path):
    run = _run(tmp_path, '{"checkpoint": "step-00000002", "step": 2}')
    assert resolve_model_path(str(run)) == str(run / "step-00000002")


def test_a_model_folder_is_taken_as_given(tmp_path):
    run = _run(tmp_path, '{"checkpoint": "step-00000002", "step": 2}')
    (run / "config.json").write_text("{}")                     # a model folder that happens to hold latest.json
    assert resolve_model_path(str(run)) == str(run)


@pytest.mark.parametrize("latest", ["{x", "[1]", '{"checkpoint": 5}', '{"checkpoint": "../../etc"}',
                                    '{"checkpoint": "step-1/../../x"}'])
def test_a_damaged_latest_json_is_a_model_format_error(tmp_path, latest):
    run = _run(tmp_path, latest)
    with pytest.raises(ModelFormatError, match="latest.json"):
        resolve_model_path(str(run))
