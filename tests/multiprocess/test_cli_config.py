"""``nbaccel config``, ``to-fsdp2``, ``env`` and every command's ``--help`` in child processes."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import cli_helpers as h
import pytest
import torch
import yaml

import nbaccel
from nbaccel.cli.main import build_parser, main

pytestmark = pytest.mark.multiprocess


def _file(home: Path) -> dict:
    return yaml.safe_load((home / ".cache" / "nbaccel" / "default_config.yaml").read_text())


def test_config_round_trip_default_flags_show_update(tmp_path: Path) -> None:
    done = h.nbaccel("config", "default", "--mixed_precision", "bf16", home=tmp_path)
    assert done.returncode == 0 and "configuration saved at" in done.stdout, h.detail(done)
    assert _file(tmp_path)["mixed_precision"] == "bf16"
    update = ["config", "update", "--num_processes", "4", "--fsdp_sharding_strategy", "2"]
    done = h.nbaccel(*update, "--debug", "yes", home=tmp_path)
    assert done.returncode == 0, h.detail(done)
    written = _file(tmp_path)
    assert (written["num_processes"], written["debug"], written["mixed_precision"]) == (
        4,
        True,
        "bf16",  # kept from the file
    )
    assert written["fsdp_config"] == {"fsdp_sharding_strategy": "SHARD_GRAD_OP"}
    shown = h.nbaccel("config", "show", home=tmp_path)
    assert shown.returncode == 0, h.detail(shown)
    assert "(nbaccel default)" in shown.stdout and "num_processes: 4" in shown.stdout


def test_a_bad_value_for_config_is_refused_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(tmp_path / "c.yaml"))
    assert main(["config", "--mixed_precision", "bf61"]) == 2  # a bad value is a usage error
    assert "key 'mixed_precision'" in capsys.readouterr().err
    assert not (tmp_path / "c.yaml").exists()


def test_to_fsdp2_converts_a_file(tmp_path: Path) -> None:
    (tmp_path / "v1.yaml").write_text(h.GUIDE_YAML)
    done = h.nbaccel(
        "to-fsdp2", "--config_file", "v1.yaml", "--output_file", "v2.yaml", home=tmp_path
    )
    assert done.returncode == 0, h.detail(done)
    assert "fsdp_sharding_strategy: FULL_SHARD -> fsdp_reshard_after_forward: true" in done.stdout
    fsdp = yaml.safe_load((tmp_path / "v2.yaml").read_text())["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is True
    assert "fsdp_sharding_strategy" not in fsdp and "fsdp_use_orig_params" not in fsdp


def test_config_without_a_terminal_says_what_to_do(tmp_path: Path) -> None:
    done = h.nbaccel("config", home=tmp_path)  # stdin is /dev/null, as in a notebook's `!`
    assert done.returncode == 2
    assert "nbaccel config default" in done.stderr


def _expect(fd: int, text: str, seen: list[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in "".join(seen):
        assert time.monotonic() < deadline, f"waited for {text!r}; got {''.join(seen)!r}"
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen.append(os.read(fd, 4096).decode(errors="replace"))
            except OSError:
                break


def test_questionnaire_through_a_pseudo_terminal(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "nbaccel", "config"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=tmp_path,
        env=h.cli_environ(tmp_path),
        close_fds=True,
    )
    os.close(follower)
    seen: list[str] = []
    answers = [
        ("Kind of run", "MULTI_CPU"),
        ("How many machines", "two"),  # invalid: asked again
        ("How many machines", ""),  # Enter: the default, 1
        ("How many processes in total", "3"),
        ("Mixed precision (no, bf16", "fp16"),  # not offered on the CPU: asked again
        ("Mixed precision", "bf16"),
        ("debug checks", ""),
    ]
    try:
        for prompt, answer in answers:
            _expect(leader, prompt, seen)
            seen.append("\n--answered--\n")
            os.write(leader, (answer + "\n").encode())
        _expect(leader, "configuration saved at", seen)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        os.close(leader)
    transcript = "".join(seen)
    assert "'two' is not valid" in transcript
    assert "fp16 does not train on the CPU (bf16 is its mixed precision); answer bf16" in transcript
    written = _file(tmp_path)
    assert written["distributed_type"] == "MULTI_CPU" and written["num_processes"] == 3
    assert written["num_machines"] == 1 and written["mixed_precision"] == "bf16"
    assert written["use_cpu"] is True and written["debug"] is False


def test_env_prints_the_running_versions_and_the_config(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("mixed_precision: fp16\ndeepspeed_config: {zero_stage: 2}\n")
    done = h.nbaccel("env", home=tmp_path, NBACCEL_CONFIG_FILE=str(tmp_path / "c.yaml"))
    assert done.returncode == 0, h.detail(done)
    rows = dict(line[2:].split(" : ", 1) for line in done.stdout.splitlines() if " : " in line)
    rows = {k.strip(): v.strip() for k, v in rows.items()}
    assert rows["nbaccel"] == nbaccel.__version__
    assert rows["Python"] == platform.python_version()
    assert rows["torch"] == torch.__version__
    assert rows["CUDA build"] == str(torch.version.cuda)
    for package in ("ipykernel", "ipywidgets"):
        assert rows[package] == importlib.metadata.version(package)
    assert "NCCL" in rows and "CUDA devices" in rows and "Colab / Kaggle" in rows
    assert rows["Config file"] == f"{tmp_path / 'c.yaml'} (NBACCEL_CONFIG_FILE)"
    assert "mixed_precision: fp16" in done.stdout
    assert "accepted but not acted on: deepspeed_config" in done.stdout


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
                found.update({f"{name} {k}": v for k, v in _subparsers(sub).items()})
    return found


def test_every_option_of_every_command_has_help() -> None:
    commands = _subparsers(build_parser())
    assert {"config", "config default", "config show", "config update", "launch", "test"} <= set(
        commands
    )
    assert {"env", "to-fsdp2", "demo"} <= set(commands)
    for name, parser in commands.items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)


def test_a_bad_option_exits_2_with_the_usage(tmp_path: Path) -> None:
    done = h.nbaccel("launch", "--num_procesess", "2", "x.py", home=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: nbaccel launch")
    assert "(did you mean --num_processes?)" in done.stderr
    helped = _subparsers(build_parser())["launch"].format_help()
    for option in ("--num_processes", "--num_machines", "--machine_rank", "--main_process_ip"):
        assert option in helped
    for option in ("--main_process_port", "--mixed_precision", "--cpu", "--max_restarts"):
        assert option in helped
    for option in ("--monitor_interval", "--rdzv_backend", "--config_file", "--module"):
        assert option in helped
    assert "--fsdp_sharding_strategy" in helped and "--fsdp_auto_wrap_policy" in helped
