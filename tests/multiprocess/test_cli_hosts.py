"""``nbaccel launch --hosts``: every setting checked before anything starts (the command in a
child process), the config file's ``hosts`` applying to the command, and what each rank runs
(the script's text, as ``python script.py`` runs it) in real launched ranks. The ranks on
other machines are the hosts tier's (tests/hosts/test_hosts_cli.py)."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import cli_helpers as h
import pytest

from nbaccel.cli.hostscript import run_script, script_job
from nbaccel.launch.parent.errors import WorkerError
from nbaccel.launch.parent.notebook import notebook_launcher

pytestmark = pytest.mark.multiprocess

HELLO = "import sys\nprint('hello', sys.argv[1:])\n"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "hello.py").write_text(HELLO)
    return tmp_path


BAD_FLAGS = [
    (["--hosts", "node1,-oProxyCommand=x"], "key 'hosts' is not valid: hosts[1]="),
    (["--hosts", "node1, node1"], "hosts names 'node1' twice"),
    (["--hosts", "node1:0"], "a port is a number from 1 to 65535"),
    (["--hosts", "slurm"], "outside one (SLURM_JOB_ID is not set)"),
    (["--hosts_python", "/opt/py"], "--hosts_python only applies to a launch on other"),
    (["--hosts", "node1", "--hosts_connect_timeout", "0"], "'hosts_connect_timeout'"),
    (
        ["--hosts", "node1,node2", "--num_machines", "2", "--main_process_ip", "10.0.0.1"],
        "so num_machines and machine_rank do not apply",
    ),
    (["--hosts", "node1", "--num_processes", "0"], "key 'num_processes' has the value 0"),
]


def test_bad_hosts_settings_exit_2_before_anything_starts(work: Path) -> None:
    argvs = [["launch", *flags, "hello.py"] for flags, _ in BAD_FLAGS]
    for (flags, words), done in zip(BAD_FLAGS, h.nbaccel_each(argvs, home=work), strict=True):
        assert done.returncode == 2, (flags, h.detail(done))
        assert words in done.stderr, (flags, h.detail(done))
        assert "hello" not in done.stdout and "Launching" not in done.stdout, flags


def test_the_config_files_hosts_apply_and_the_flag_clears_them(work: Path) -> None:
    (work / "cfg.yaml").write_text("hosts: [nosuch.invalid]\nhosts_connect_timeout: 5\n")
    cleared = h.nbaccel(
        "launch",
        "--hosts",
        "",
        "hello.py",
        "x",
        home=work,
        NBACCEL_CONFIG_FILE=str(work / "cfg.yaml"),
    )
    assert cleared.returncode == 0 and "hello ['x']" in cleared.stdout, h.detail(cleared)
    clash = h.nbaccel(
        "launch", "--num_machines", "2", "--main_process_ip", "10.0.0.1", "hello.py",
        home=work, NBACCEL_CONFIG_FILE=str(work / "cfg.yaml"),
    )  # fmt: skip
    assert clash.returncode == 2 and "--hosts ''" in clash.stderr, h.detail(clash)
    if shutil.which("ssh") is None:
        pytest.skip("no ssh client here: the launch itself is the hosts tier's")
    done = h.nbaccel("launch", "hello.py", home=work, NBACCEL_CONFIG_FILE=str(work / "cfg.yaml"))
    assert done.returncode == 1, h.detail(done)
    assert "1 process(es) x 1 host(s) (nosuch.invalid)" in done.stderr, h.detail(done)
    assert "HostError: could not reach nosuch.invalid" in done.stderr, h.detail(done)
    assert "connect_timeout=5s" in done.stderr and "hello" not in done.stdout


RECORDER = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from nbaccel import Accelerator

    def main():
        accelerator = Accelerator()
        Path(sys.argv[1], f"rank{accelerator.process_index}.json").write_text(json.dumps({
            "name": __name__,
            "argv": sys.argv[1:],
            "file": __file__,
            "on_disk": os.path.exists(__file__),
            "steps": accelerator.gradient_accumulation_steps,
        }))
        if sys.argv[2:] == ["fail"] and accelerator.process_index == 1:
            sys.exit(3)
    """
)


@pytest.mark.parametrize("guard", [True, False], ids=["main-guard", "main_training_function"])
def test_each_rank_runs_the_scripts_text_as_python_runs_a_script(
    tmp_path: Path, guard: bool
) -> None:
    script = tmp_path / "gone_soon.py"
    script.write_text(RECORDER + ('if __name__ == "__main__":\n    main()\n' if guard else ""))
    config = "gradient_accumulation_steps: 3\n"
    job = script_job(str(script), [str(tmp_path), "x y"], False, "main", config)
    script.unlink()  # what the ranks run is the text read above
    notebook_launcher(run_script, (job,), num_processes=2, cpu=True, hosts=False)
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for record in records:
        assert record["name"] == ("__main__" if guard else "__nbaccel_script__")
        assert record["argv"] == [str(tmp_path), "x y"]
        assert record["file"] == str(script.resolve()) and record["on_disk"] is False
        assert record["steps"] == 3  # the resolved config travelled with the job


def test_a_ranks_exit_code_and_traceback_come_back(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(RECORDER + "main()\n")
    job = script_job(str(script), [str(tmp_path), "fail"], False, "main", "")
    with pytest.raises(WorkerError) as raised:
        notebook_launcher(run_script, (job,), num_processes=2, cpu=True, hosts=False)
    assert (raised.value.rank, raised.value.type_name, raised.value.message) == (
        1,
        "SystemExit",
        "3",
    )
    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\n\nraise ValueError(f'bad {x}')\n")
    broken_job = script_job(str(broken), [], False, "main", "")
    broken.unlink()
    with pytest.raises(ValueError, match="bad 1") as failed:
        notebook_launcher(run_script, (broken_job,), num_processes=2, cpu=True, hosts=False)
    cause = failed.value.__cause__
    assert isinstance(cause, WorkerError), failed.value
    assert f'File "{broken.resolve()}", line 3' in cause.remote_traceback
    assert "raise ValueError(f'bad {x}')" in cause.remote_traceback  # the line, file or not
    with pytest.raises(SystemExit, match="no such script"):
        script_job(str(tmp_path / "missing.py"), [], False, "main", "")
