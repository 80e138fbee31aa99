"""Every notebook in notebooks/ runs top to bottom in a real Jupyter kernel, checked."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import socket
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("sklearn")

from nbaccel.examples import quickstart  # noqa: E402
from tests.support.kernel import KERNEL_NAME, Cell, kernel_env, running_kernel, strip_ansi  # noqa: E402

pytestmark = pytest.mark.notebook

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# Notebooks this file checks in detail; any other notebook is still run to the end without error.
CHECKED = {
    "01_quickstart.ipynb",
    "02_precision_and_accumulation.ipynb",
    "03_checkpoint_and_resume.ipynb",
    "04_fsdp.ipynb",
    "05_multi_node.ipynb",
    "06_colab_kaggle.ipynb",
    "07_config_panel.ipynb",
    "08_transformers_trainer.ipynb",
    "09_worker_pool.ipynb",
    "11_deepspeed.ipynb",
}
# Notebooks that need other machines: the hosts tier runs them on its test bed
# (tests/hosts/test_hosts_notebook.py); here they are only checked as stored.
ON_HOSTS = {"10_multi_host.ipynb"}
_CELL_TIMEOUT = 240


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read(name: str) -> Any:
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def _with_parameters(notebook: Any, **values: Any) -> Any:
    """Append ``NAME = value`` lines to the cell tagged ``parameters`` (as papermill does)."""
    cells = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "the notebook needs exactly one cell tagged 'parameters'"
    overrides = "".join(f"\n{name} = {value!r}" for name, value in values.items())
    cells[0].source += "\n# set by the test" + overrides
    return notebook


def _client(notebook: Any) -> Any:
    return nbclient.NotebookClient(
        notebook,
        timeout=_CELL_TIMEOUT,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )


def _text(notebook: Any) -> str:
    """Everything the executed notebook's cells printed (stdout, stderr, results), in order."""
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output["text"])
            elif output.get("output_type") in ("execute_result", "display_data"):
                parts.append(str(output.get("data", {}).get("text/plain", "")) + "\n")
            elif output.get("output_type") == "error":
                parts.append("\n".join(output.get("traceback", [])))
    return strip_ansi("".join(parts))


def _execute(notebook: Any) -> str:
    _client(notebook).execute(env=kernel_env())
    return _text(notebook)


def _python(source: str) -> str:
    """A cell's source as plain Python (IPython's ``%magic`` lines become calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return str(TransformerManager().transform_cell(source))


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not found in the notebook's output:\n{text[-4000:]}"
    return float(match.group(1))


# -- static checks ---------------------------------------------------------------------------


def test_every_notebook_is_stored_with_outputs_cleared() -> None:
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert set(names) >= CHECKED, f"missing notebooks: {sorted(CHECKED - set(names))}"
    for name in names:
        notebook = _read(name)
        nbformat.validate(notebook)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [], f"{name}: a cell has stored outputs"
                assert cell.execution_count is None, f"{name}: a cell has an execution count"


def test_quickstart_notebook_trains_with_exactly_the_demo_function() -> None:
    """The notebook's `train` is `nbaccel.examples.quickstart.train`, which `nbaccel demo` runs."""
    notebook = _read("01_quickstart.ipynb")
    defined = [
        node
        for cell in notebook.cells
        if cell.cell_type == "code"
        for node in ast.parse(_python(cell.source)).body
        if isinstance(node, ast.FunctionDef) and node.name == "train"
    ]
    assert len(defined) == 1, "the quickstart must define train() once"
    package = ast.parse(inspect.getsource(quickstart.train)).body[0]
    assert ast.dump(defined[0]) == ast.dump(package), (
        "notebooks/01_quickstart.ipynb's train() differs from nbaccel/examples/quickstart.py"
    )


# -- the notebooks, run top to bottom --------------------------------------------------------


def test_01_quickstart() -> None:
    text = _execute(_read("01_quickstart.ipynb"))
    for rank in (0, 1):
        assert re.search(rf"^rank {rank} of 2 on cpu: \d+ optimizer steps", text, re.M), text
        assert f"[rank{rank}]: trained on" in text, "a rank's output did not reach the cell"
    assert _number(r"test accuracy: ([0-9.]+)", text) >= 0.90
    assert "on 389 test images" in text, "gather_for_metrics must give the whole test split"
    assert "every rank ends with the same weights: True" in text


def test_02_precision_and_accumulation() -> None:
    text = _execute(_read("02_precision_and_accumulation.ipynb"))
    for mode in ("no", "bf16"):
        assert _number(rf"mixed_precision='{mode}': test accuracy ([0-9.]+)", text) >= 0.90
    steps = re.findall(r"x \d+ (?:images|accumulated): (\d+) optimizer steps", text)
    assert len(steps) == 3 and len(set(steps)) == 1, f"steps differ: {steps}\n{text}"
    for difference in re.findall(r"largest weight difference ([0-9.e+-]+)", text):
        assert float(difference) < 1e-5
    assert "the same training: True" in text


def test_03_checkpoint_and_resume() -> None:
    text = _execute(_read("03_checkpoint_and_resume.ipynb"))
    assert "attempt 1 failed (RuntimeError: injected failure after epoch 3)" in text, text
    assert "[rank0]: restart 1: resuming after epoch 3" in text, text
    assert "resumed run equals uninterrupted run: True" in text, text
    assert "checkpoints kept (total_limit=2): ['checkpoint_4', 'checkpoint_5']" in text
    # section 4: a stateful loader resumes mid-epoch, as after a lost session
    assert "[rank0]: resuming epoch 2 after 5 batches" in text, text
    assert "resumed mid-epoch run equals uninterrupted run: True" in text, text


def test_04_fsdp() -> None:
    text = _execute(_read("04_fsdp.ipynb"))
    for rank in (0, 1):  # the first layer's 8192 values, half on each process
        assert f"[rank{rank}]: holds 4096 of the 8192 values of 0.weight" in text, text
    sharded = _number(r"sharded model: test accuracy ([0-9.]+) on 389 images", text)
    assert sharded >= 0.90
    assert "'optimizer_0', 'pytorch_model_fsdp_0'" in text, text
    assert "model shards: ['.metadata', '__0_0.distcp', '__1_0.distcp']" in text, text
    assert "merged: ['model.safetensors']" in text, text
    assert re.search(r"nbaccel merge-weights: wrote \S+/merged_bin/pytorch_model\.bin", text), text
    plain = _number(r"plain model, merged weights: test accuracy ([0-9.]+) on 389 images", text)
    assert plain == sharded
    assert "same accuracy as the sharded model: True" in text, text
    assert "merged weights equal the sharded model's full state dict: True" in text, text


def test_11_deepspeed() -> None:
    pytest.importorskip("deepspeed")
    text = _execute(_read("11_deepspeed.ipynb"))
    for rank in (0, 1):  # ZeRO-3 with stage3_param_persistence_threshold 0: half each
        assert f"[rank{rank}]: holds 4805 of the 9610 parameter values" in text, text
    first = _number(r"\[rank0\]: epoch 3: loss [0-9.]+, test accuracy ([0-9.]+)", text)
    assert first >= 0.8
    assert "DeepSpeed's checkpoint:" in text, text
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" in text, text
    assert "[rank0]: resumed from the checkpoint of epoch 2" in text, text
    assert "process 1 returned: {}" in text, text
    assert "resumed run equals uninterrupted run to float32 rounding: True" in text, text
    losses = re.findall(r"\[rank0\]: epoch 3: (loss [0-9.]+, test accuracy [0-9.]+)", text)
    assert len(losses) == 2 and losses[0] == losses[1], losses  # the resumed epoch 3 is the same


def _check_multi_node(text: str, node_rank: int) -> None:
    for local in (0, 1):
        rank = 2 * node_rank + local
        line = rf"machine {node_rank}: rank {rank} of 4, test accuracy ([0-9.]+)"
        assert _number(line, text) >= 0.90


def test_05_multi_node_plays_machine_1_in_a_second_kernel() -> None:
    """Top to bottom with its defaults: the notebook starts the second kernel itself."""
    notebook = _with_parameters(_read("05_multi_node.ipynb"), PORT=_free_port())
    text = _execute(notebook)
    _check_multi_node(text, 0)
    prefix = "[machine 1] "
    machine1 = [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]
    _check_multi_node("\n".join(machine1), 1)


def test_05_multi_node_the_same_notebook_in_two_kernels() -> None:
    """As on two machines: two kernels run the notebook, differing only in NODE_RANK."""
    port = _free_port()
    notebooks = [
        _with_parameters(
            _read("05_multi_node.ipynb"), NODE_RANK=node, PORT=port, PLAY_MACHINE_1_HERE=False
        )
        for node in (0, 1)
    ]

    async def both() -> None:
        await asyncio.gather(*(_client(nb).async_execute(env=kernel_env()) for nb in notebooks))

    asyncio.run(both())
    for node, notebook in enumerate(notebooks):
        text = _text(notebook)
        assert "second kernel" not in text.split("%%also_in_second_kernel")[-1]
        assert f"on node {node} of 2" in text, text
        _check_multi_node(text, node)


def test_06_colab_kaggle() -> None:
    text = _execute(_read("06_colab_kaggle.ipynb"))
    assert "Colab: False, Kaggle: False" in text
    assert _number(r"CPU accuracy: ([0-9.]+)", text) >= 0.90
    assert "no TPU here" in text
    assert "CudaInitializedError: CUDA was already initialised in this process" in text, text
    assert 'start_method="spawn"' in text
    assert "with spawn (gloo)" in text and "with spawn: 2 ranks returned" in text, text


def _html_outputs(notebook: Any, needle: str) -> list[str]:
    return [
        str(output["data"]["text/html"])
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "display_data"
        and needle in str(output.get("data", {}).get("text/html", ""))
    ]


def test_08_transformers_trainer() -> None:
    pytest.importorskip("transformers")
    notebook = _with_parameters(_read("08_transformers_trainer.ipynb"), EPOCHS=1.0)
    text = _execute(notebook)
    for rank in (0, 1):
        result = rf"^\{{'rank': {rank}, 'world_size': 2, 'wrapped_as': 'DistributedDataParallel', "
        found = re.search(result + r"'eval_accuracy': ([0-9.]+)\}$", text, re.M)
        assert found and float(found.group(1)) >= 0.6, text  # one short epoch in the test
        line = f"rank {rank}: fsdp='full_shard' on CPU -> model wrapped as DistributedDataParallel"
        assert line in text, text
    # the Trainer's live table (its progress bar above the loss and metrics table), once per
    # launch: the first launch trains one epoch (in the test), the FSDP one half an epoch
    live = _html_outputs(notebook, "<progress")
    tables = [html for html in live if "Training Loss" in html]
    assert len(tables) == 2, live
    assert "Accuracy" in tables[0] and "<td>1</td>" in tables[0]
    assert "attempted to send message from fork" not in text


def test_07_config_panel() -> None:
    text = _execute(_read("07_config_panel.ipynb"))
    assert re.search(r"^hardware found: CPU", text, re.M), text
    assert "main_process_ip: give the address of machine 0 when several machines run" in text
    assert re.search(r"^num_processes: at most \d+: this machine has", text, re.M), text
    assert "panel.config raises ConfigError" in text and "errors: none" in text
    assert "accelerator = Accelerator(gradient_accumulation_steps=2, cpu=True)" in text, text
    assert "start_method='fork'" in text and "max_restarts=1" in text
    for line in ("gradient_accumulation_steps: 2", "start_method: fork", "max_restarts: 1"):
        assert re.search(rf"^{line}$", text, re.M), f"{line!r} not saved:\n{text}"
    assert "loaded into a new panel, same values: True" in text
    assert "the file the CLI reads equals panel.config: True" in text
    for rank in (0, 1):
        assert _number(rf"rank {rank}: test accuracy ([0-9.]+) on 389 images", text) >= 0.90
    assert re.search(r"^Finished: 2 ranks, [0-9.]+ s elapsed$", text, re.M), text
    assert re.search(r"rank 0: finished, progress 132/132, [0-9.]+ steps/s", text), text
    assert "LaunchStopped: the launch was stopped on request" in text, text
    assert re.search(r"^Stopped: 2 ranks", text, re.M), text
    assert text.count("(Stop button)") == 2, text


def test_09_worker_pool_interrupt_a_long_cell_and_carry_on() -> None:
    """Cell by cell in one kernel, as a user runs it; the long cell is interrupted for real
    (the kernel's interrupt, once both ranks have printed a few epochs)."""
    outs: list[str] = []

    def on_message(message: dict[str, Any], cell: Cell) -> None:
        if message["msg_type"] == "execute_result":
            outs.append(message["content"]["data"]["text/plain"])

    def interrupt_later(message: dict[str, Any], cell: Cell) -> None:
        on_message(message, cell)
        if not interrupted and all(cell.stdout.count(f"[rank{r}]: epoch") >= 3 for r in (0, 1)):
            interrupted.append(True)
            kernel.interrupt()

    interrupted: list[bool] = []
    text = ""
    with running_kernel() as kernel:
        for cell in _read("09_worker_pool.ipynb").cells:
            if cell.cell_type != "code":
                continue
            long_cell = "interrupt" in cell.metadata.get("tags", [])
            run = kernel.submit(cell.source)
            kernel.collect(run, _CELL_TIMEOUT, interrupt_later if long_cell else on_message)
            expected = ("error", "KeyboardInterrupt") if long_cell else ("ok", "")
            assert (run.status, run.ename) == expected, run.describe()
            text += run.stdout
    assert interrupted, "the long cell ended before it was interrupted"
    for rank in (0, 1):
        assert f"[rank{rank}]: rank {rank} of 2 on cpu: 22 batches per epoch" in text, text
        assert re.search(rf"^\[rank{rank}\]: stopped after epoch (\d+)$", text, re.M), text
    assert "[rank" not in "".join(outs), f"the accuracy differs between ranks: {outs}"
    first, last = (float(out) for out in outs if out.startswith("0."))
    assert first >= 0.8 and last >= 0.9, outs
    assert "nbaccel: the pool is stopped." in text, text
    where = [out for out in outs if out.startswith("rank  host  state  where")]
    assert len(where) == 1 and where[0].count(" idle") == 2, outs  # %nbaccel where, between cells


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in NOTEBOOKS.glob("*.ipynb") if p.name not in CHECKED | ON_HOSTS),
)
def test_other_notebooks_run_to_the_end(name: str) -> None:
    _execute(_read(name))
