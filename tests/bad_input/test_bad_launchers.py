"""MPI launcher environments that do not describe this process: malformed launcher
variables (PMI_*, OMPI_COMM_WORLD_*, MV2_COMM_WORLD_*), two launchers' variables that disagree, and an MPI
world that is not the one they describe (``PMI_RANK=0 PMI_SIZE=2 orion train`` without mpiexec: mpi4py
starts a 1-rank world) end in a LaunchError naming the variables, before any work: exit 1, one line on
stderr, no run folder written. A well-formed launch whose MPI world matches still starts."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from orion.cli import main
from orion.train import distributed
from orion.train.distributed import ENV, LaunchError, from_env, launched

FAST = ["train", "--preset", "micro", "--batch", "2", "--no-progress", "--seq-len", "64", "--steps", "1",
        "--sample-tokens", "0"]
ALL_VARS = [v for pair in ENV for v in pair]


@pytest.fixture()
def env(monkeypatch):
    """Sets launcher variables on a clean slate: env(PMI_RANK="0", PMI_SIZE="2")."""
    for v in ALL_VARS:
        monkeypatch.delenv(v, raising=False)

    def put(**values):
        for k, v in values.items():
            monkeypatch.setenv(k, v)
    return put


class FakeMPI:
    """mpi4py.MPI as far as from_env and Comm read it: a world of ``size`` ranks seen from ``rank``."""

    def __init__(self, rank: int, size: int):
        world = types.SimpleNamespace(Get_rank=lambda: rank, Get_size=lambda: size)
        world.Dup = lambda: world
        self.COMM_WORLD = world

    @staticmethod
    def Get_library_version():
        return "FakeMPI 1.0\nfor tests"


@pytest.fixture()
def mpi_world(monkeypatch):
    """Makes ``from mpi4py import MPI`` give a FakeMPI world (rank, size)."""
    def make(rank: int, size: int):
        monkeypatch.setitem(sys.modules, "mpi4py", types.SimpleNamespace(MPI=FakeMPI(rank, size)))
    return make


def _tree(root) -> dict:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = None if os.path.isdir(p) else Path(p).read_bytes()
    return out


def _refused(tmp_path, capsys, *phrases):
    """orion train refuses the environment: exit 1, one `orion: error:` line with ``phrases``, nothing written."""
    before = _tree(tmp_path)
    assert main(FAST + ["--ckpt-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("orion: error: ") and "\n" not in err and "Traceback" not in err, err
    for p in phrases:
        assert p in err, (p, err)
    assert _tree(tmp_path) == before                       # no run folder, no log, no temp file


MALFORMED = [
    ("size not a number", {"PMI_RANK": "0", "PMI_SIZE": "abc"}, ["PMI_SIZE='abc'", "is not an integer"]),
    ("size empty", {"PMI_RANK": "0", "PMI_SIZE": ""}, ["PMI_SIZE=''", "is not an integer"]),
    ("size a float", {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2.0"},
     ["OMPI_COMM_WORLD_SIZE='2.0'", "is not an integer"]),
    ("rank in hex", {"MV2_COMM_WORLD_RANK": "0x1", "MV2_COMM_WORLD_SIZE": "2"}, ["MV2_COMM_WORLD_RANK='0x1'"]),
    ("rank with digit separators", {"PMI_RANK": "1_0", "PMI_SIZE": "20"}, ["PMI_RANK='1_0'"]),
    ("size zero", {"PMI_RANK": "0", "PMI_SIZE": "0"}, ["PMI_RANK=0 PMI_SIZE=0", "PMI_SIZE must be >= 1"]),
    ("size negative", {"PMI_RANK": "0", "PMI_SIZE": "-2"}, ["PMI_SIZE=-2", "PMI_SIZE must be >= 1"]),
    ("rank negative", {"PMI_RANK": "-1", "PMI_SIZE": "2"}, ["PMI_RANK=-1", "must be in [0, PMI_SIZE) = [0, 2)"]),
    ("rank equal to size", {"PMI_RANK": "2", "PMI_SIZE": "2"}, ["PMI_RANK=2 PMI_SIZE=2", "[0, 2)"]),
    ("rank beyond a size of 1", {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "1"},
     ["OMPI_COMM_WORLD_RANK=3", "[0, 1)"]),
    ("two launchers, other sizes",
     {"PMI_RANK": "0", "PMI_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "3"},
     ["disagree", "PMI_RANK=0 PMI_SIZE=2", "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=3"]),
    ("two launchers, other ranks",
     {"PMI_RANK": "0", "PMI_SIZE": "2", "MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2"},
     ["disagree", "MV2_COMM_WORLD_RANK=1"]),
    ("one launcher single, one not",
     {"PMI_RANK": "0", "PMI_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
     ["disagree", "PMI_SIZE=1"]),
]


@pytest.mark.parametrize("values, phrases", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_launcher_variables_are_refused_before_any_work(tmp_path, capsys, env, values, phrases):
    env(**values)
    with pytest.raises(LaunchError) as e:
        launched()
    for p in phrases:
        assert p in str(e.value), (p, str(e.value))
    _refused(tmp_path, capsys, *phrases)


WORLDS = [
    ("no mpiexec: 1-rank world, rank 0", {"PMI_RANK": "0", "PMI_SIZE": "2"}, (0, 1),
     ["PMI_RANK=0 PMI_SIZE=2", "rank 0 of 2", "reports rank 0 of 1", "mpiexec -n 2"]),
    ("no mpiexec: 1-rank world, rank 1", {"PMI_RANK": "1", "PMI_SIZE": "2"}, (0, 1),
     ["rank 1 of 2", "reports rank 0 of 1"]),
    ("another MPI's launcher: other size", {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"}, (0, 2),
     ["OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4", "reports rank 0 of 2", "FakeMPI 1.0"]),
    ("stale variables: other rank", {"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2"}, (0, 2),
     ["rank 1 of 2", "reports rank 0 of 2"]),
]


@pytest.mark.parametrize("values, world, phrases", [c[1:] for c in WORLDS], ids=[c[0] for c in WORLDS])
def test_a_world_that_is_not_the_launchers_is_refused(tmp_path, capsys, env, mpi_world, values, world, phrases):
    env(**values)
    mpi_world(*world)
    with pytest.raises(LaunchError) as e:
        from_env()
    for p in phrases:
        assert p in str(e.value), (p, str(e.value))
    _refused(tmp_path, capsys, *phrases)


def test_a_launch_that_matches_its_world_starts(env, mpi_world):
    env(PMI_RANK="1", PMI_SIZE="3", OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_SIZE="3")   # two launchers agreeing
    mpi_world(1, 3)
    comm = from_env(7.0)
    assert (comm.rank, comm.size, comm.timeout) == (1, 3, 7.0)
    env(PMI_RANK=" 0 ", PMI_SIZE="1")                                  # mpiexec -n 1: no MPI at all
    for v in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        os.environ.pop(v)
    assert launched() is None and from_env() is None
    assert issubclass(LaunchError, distributed.TrainError)


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="needs mpi4py (the distributed extra)")
def test_pmi_size_2_without_mpiexec_is_refused_in_a_real_process(tmp_path):
    """The issue's case as a user meets it: mpi4py's real MPI gives the process a 1-rank world."""
    env = {k: v for k, v in os.environ.items() if k not in ALL_VARS}
    env.update(PMI_RANK="0", PMI_SIZE="2", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-m", "orion.cli.train"] + FAST[1:] + ["--ckpt-dir", str(tmp_path / "run")],
                       env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    err = r.stderr.strip()
    assert err.startswith("orion: error: ") and "\n" not in err, err
    assert "PMI_RANK=0 PMI_SIZE=2" in err and "reports rank 0 of 1" in err
    assert os.listdir(tmp_path) == []


def test_a_usage_error_on_an_mpi_rank_ends_the_whole_job(monkeypatch, capsys):
    """A flag combination refused inside the run (after the launch) on one MPI rank is reported with the rank
    and ends the job through the world (exit 2), like any other error there: it used to escape the handler,
    leaving the other ranks waiting for this one."""
    from orion.flags import UsageError
    from orion.train import launch

    finished = []
    fake = types.SimpleNamespace(rank=0, size=2, is_root=True, finish=lambda code: finished.append(code) or code)
    monkeypatch.setattr(distributed, "from_env", lambda timeout=None: fake)

    def refuse(args, dist=None):
        raise UsageError("--accum 3 does not divide the batch over 2 ranks")
    monkeypatch.setattr(launch, "run_parsed", refuse)
    assert main(FAST) == 2
    assert finished == [2]
    err = capsys.readouterr().err
    assert "MPI rank 0 of 2" in err and "does not divide" in err
