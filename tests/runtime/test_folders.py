"""Temp folders like the ANE's (C44): <root>/<identifier>/model.mil + weight files, shared by
identical programs, removed on release and at exit; weight keys cannot escape the folder."""

import os
import subprocess
import sys
import textwrap

import pytest

import orion
from runtime_programs import add_program, linear_program, rand, weight_blob

KEY = "@model_path/weights/w.bin"


def test_folder_layout_matches_the_ane_protocol():
    w = weight_blob(rand((128, 64, 1, 1)))
    prog = orion.compile_mil(linear_program(), {KEY: w})
    assert os.path.basename(prog.folder) == prog.identifier
    with open(os.path.join(prog.folder, "model.mil")) as f:
        assert f.read() == prog.mil
    with open(os.path.join(prog.folder, "weights", "w.bin"), "rb") as f:
        assert f.read() == w
    folder = prog.folder
    prog.release()
    assert not os.path.exists(folder)


def test_identical_programs_share_one_folder_and_release_does_not_break_the_other():
    w = weight_blob(rand((128, 64, 1, 1), 3))
    p1 = orion.compile_mil(linear_program(), {KEY: w})
    p2 = orion.compile_mil(linear_program(), {KEY: w})
    assert p1.folder == p2.folder
    p1.release()
    assert os.path.isdir(p2.folder)  # the C44 collision bug would have deleted it
    p2(x=rand((1, 64, 1, 256)))
    folder = p2.folder
    p2.release()
    assert not os.path.exists(folder)


@pytest.mark.parametrize("key", ["@model_path/../escape.bin", "@model_path//abs.bin", "@model_path/a/../../b.bin",
                                 "weights/w.bin", "@model_path/", "@model_path/model.mil", "@model_path/./w.bin"])
def test_weight_keys_that_escape_or_are_malformed_are_rejected(key):
    with pytest.raises(orion.InputError, match="weight key"):
        orion.compile_mil(linear_program(path=key), {key: weight_blob(rand((128, 64, 1, 1)))})


def test_empty_weight_entry_is_c11():
    with pytest.raises(orion.CompileError) as e:
        orion.compile_mil(linear_program(), {KEY: b""})
    assert e.value.constraint == "C11"


def test_folders_removed_at_interpreter_exit_and_stale_ones_cleaned(tmp_path):
    env = dict(os.environ, ORION_TMPDIR=str(tmp_path))
    script = textwrap.dedent(f"""
        import sys; sys.path[:0] = {sys.path!r}
        import orion
        from runtime_programs import add_program
        p = orion.compile_mil(add_program())
        print(p.folder)
    """)
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=os.path.dirname(__file__),
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out.startswith(str(tmp_path)) and not os.path.exists(out)
    # A dead process's folder (pid that cannot exist) is removed by the next process.
    root = tmp_path / f"orion-sim-{os.getuid()}"
    stale = root / "999999999" / "X"
    stale.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", script], env=env, cwd=os.path.dirname(__file__), check=True,
                   capture_output=True)
    assert not (root / "999999999").exists()


_COMPILE = textwrap.dedent("""
    import sys; sys.path[:0] = {path!r}
    import orion
    from runtime_programs import add_program
    print(orion.compile_mil(add_program()).folder)
""")


def _run_in(env, tmp_path):
    return subprocess.run([sys.executable, "-c", _COMPILE.format(path=sys.path)], env=env,
                          cwd=os.path.dirname(__file__), capture_output=True, text=True)


def test_the_temp_root_is_per_user_private_and_checked(tmp_path):
    """One fixed root for every user locked the second user out and a root pre-created by
    someone else could redirect program folders: the root is per user, 0700, a real folder, ours."""
    env = dict(os.environ, ORION_TMPDIR=str(tmp_path))
    r = _run_in(env, tmp_path)
    assert r.returncode == 0, r.stderr
    root = tmp_path / f"orion-sim-{os.getuid()}"
    assert r.stdout.strip().startswith(str(root)) and oct(root.stat().st_mode & 0o777) == oct(0o700)
    root.chmod(0o777)                                             # loosened by someone: closed again
    assert _run_in(env, tmp_path).returncode == 0 and root.stat().st_mode & 0o777 == 0o700
    os.rmdir(root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.symlink_to(elsewhere)                                    # a planted link: refused
    r = _run_in(env, tmp_path)
    assert r.returncode != 0 and "not a folder" in r.stderr and not any(elsewhere.iterdir())
    root.unlink()
    if os.getuid() == 0:                                          # a root owned by another user: refused
        root.mkdir()
        os.chown(root, 65534, 65534)
        r = _run_in(env, tmp_path)
        assert r.returncode != 0 and "belongs to user 65534" in r.stderr
