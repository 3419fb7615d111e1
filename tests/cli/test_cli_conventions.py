"""The ``orion`` command's conventions: help text and shown defaults on every flag, -v before
and after the subcommand, one error style (``orion: error: <message>``, exit 2 for bad flags, 1 for orion
errors, a traceback only with -v), mlx-lm's flag names, and generate's statistics line."""

from __future__ import annotations

import argparse
import os
import warnings

import pytest

from orion.cli import build_parser, main
from orion.cli.generate import _stats
from orion.errors import AneSimWarning
from orion.models.stream import Generation

LLAMA3 = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")


def _subparsers(p):
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return a.choices
    raise AssertionError("no subcommands")


def test_every_flag_of_every_command_has_help():
    missing = [f"{name} {a.option_strings or a.dest}" for name, sp in _subparsers(build_parser()).items()
               for a in sp._actions if not a.help]
    assert missing == []


@pytest.mark.parametrize("cmd", ["run", "demo", "train", "generate", "doctor", "info", "constraints"])
def test_help_shows_defaults_and_verbose(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "-v, --verbose" in out
    if cmd in ("run", "demo", "generate"):
        assert "(default: " in out


def test_verbose_is_accepted_before_and_after_the_subcommand():
    p = build_parser()
    assert p.parse_args(["-v", "info"]).verbose is True
    assert p.parse_args(["info", "-v"]).verbose is True
    assert p.parse_args(["info"]).verbose is False
    assert p.parse_args(["-v", "info"]).verbose is True   # the subcommand's default does not reset it


def test_a_bad_flag_value_is_a_usage_error_exit_2(capsys):
    assert _exit(["demo", "--dim", "-4"]) == 2
    err = capsys.readouterr().err
    assert "orion: error: argument --dim: must be >= 1, got -4" in err and "Traceback" not in err


def test_an_orion_error_is_one_line_exit_1_and_a_traceback_only_with_v(tmp_path, capsys):
    bad = tmp_path / "bad.mil"
    bad.write_text("program(1.3)\n{ this is not MIL }\n")
    assert main(["run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("orion: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert main(["run", str(bad), "-v"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().splitlines()[-1].startswith("orion: error: ")


def test_mlx_lm_flag_names():
    p = build_parser()
    a = p.parse_args(["generate", "--model", "m", "--temp", "0.7", "--adapter-path", "ad", "--max-tokens", "5"])
    assert (a.temperature, a.adapter, a.max_tokens) == (0.7, "ad", 5)
    a = p.parse_args(["generate", "--model", "m", "--temperature", "0.5", "--adapter", "x"])
    assert (a.temperature, a.adapter) == (0.5, "x")


def test_generate_statistics_never_say_nan():
    r = Generation("", [], [1, 2, 3], stop_reason="max_tokens", prefill_seconds=0.01)
    line = _stats(r)
    assert "nan" not in line and "no decode steps" in line and "300.0 tok/s" in line
    assert "nan" not in _stats(Generation("", [], [], stop_reason="max_tokens"))


@pytest.mark.skipif(not os.path.isdir(LLAMA3), reason="fixture model missing")
def test_generate_max_tokens_0_and_the_context_cut(tmp_path, capsys):
    common = ["generate", "--model", LLAMA3, "--prompt", "Hi there", "--device", "sim", "--no-cache"]
    assert main(common + ["--max-tokens", "0"]) == 0
    out, err = capsys.readouterr()
    assert out == "Hi there\n" and "nan" not in err and "0 generated" in err
    assert main(common + ["--max-tokens", "1000", "--stop-token", "-1"]) == 0
    err = capsys.readouterr().err
    assert "stop: context" in err and "--max-tokens 1000" in err and "context of 256" in err


@pytest.mark.skipif(not os.path.isdir(LLAMA3), reason="fixture model missing")
def test_generate_does_not_echo_the_prompt_before_an_error(capsys):
    assert main(["generate", "--model", LLAMA3, "--prompt", "hello " * 300, "--device", "sim", "--no-cache"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("orion: error: the prompt has")


def test_sim_warnings_name_their_category_once():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        warnings.warn("AneSimWarning: delta reload left the baked weights in place [C07]", AneSimWarning)
    text = warnings.formatwarning(w[0].message, w[0].category, w[0].filename, w[0].lineno, "")
    assert text.count("AneSimWarning") == 1 and "[C07]" in text


def _exit(argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _flag_owners(flag):
    """{command: its action for ``flag``} over every subcommand (nested ones too)."""
    out = {}

    def walk(name, p):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub, sp in a.choices.items():
                    walk(f"{name} {sub}".strip(), sp)
            elif flag in a.option_strings:
                out[name] = a
    walk("", build_parser())
    return out


def test_every_device_flag_offers_the_runtimes_one_list():
    from orion.native.runtime import DEVICES
    owners = _flag_owners("--device")
    assert {"run", "demo", "train", "generate", "doctor"} <= set(owners)
    assert {name: a.choices is DEVICES for name, a in owners.items()} == {name: True for name in owners}


def test_every_quantize_flag_offers_the_models_one_list_of_schemes():
    from orion.models.quantize import ACTIVATION_SCHEMES, MODEL_SCHEMES
    from orion.quant import SCHEMES
    assert MODEL_SCHEMES == tuple(SCHEMES)                  # a new weight scheme reaches models and CLIs at once
    owners = _flag_owners("--quantize")
    assert {"info", "quality", "train", "generate"} <= set(owners)
    assert {name: a.choices is MODEL_SCHEMES for name, a in owners.items()} == {name: True for name in owners}
    acts = _flag_owners("--activations")
    assert {"quality", "generate"} <= set(acts)
    assert {name: a.choices is ACTIVATION_SCHEMES for name, a in acts.items()} == {name: True for name in acts}
