"""The quick-tour seed's examples with the import changed: in one process here, on 2 and 3
ranks through ``test_accelerator_multiprocess.py``, and section 2.1 launched as the seed does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import seed_examples

from nbaccel import notebook_launcher

KNOWN_BUGS: dict[str, str] = {}
EXAMPLES = [
    pytest.param(f, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[f.__name__]))
    if f.__name__ in KNOWN_BUGS
    else f
    for f in seed_examples.EXAMPLES
]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda f: f.__name__)
def test_seed_example_in_one_process(example: Callable[[], None]) -> None:
    example()


@pytest.mark.multiprocess
def test_section_2_1_notebook_launcher_runs_the_training_loop(
    capfd: pytest.CaptureFixture,
) -> None:
    # from accelerate import notebook_launcher  ->  from nbaccel import notebook_launcher
    args = ("fp16", 42, 64)
    results = notebook_launcher(seed_examples.training_loop, args, num_processes=2)
    assert len(results) == 2
    assert results[0] == results[1] > 0.9  # every rank computed the same gathered accuracy
    out = capfd.readouterr().out
    for epoch in range(5):  # accelerator.print: once, from the main process
        assert out.count(f"epoch {epoch}: ") == 1, out
