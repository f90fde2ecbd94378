"""`experiments/bench/fsdp_plan.py` rewrites the committed memory plan from the committed measurements;
`experiments/bench/fsdp.py` runs its setups on a tiny model."""

from __future__ import annotations

import pandas as pd
import pytest

from ..conftest import REPOSITORY, run_script


def test_the_plan_script_writes_the_committed_table(tmp_path):
    run_script("bench/fsdp_plan.py", "--out", str(tmp_path))
    written, committed = (pd.read_csv(p / "fsdp_plan.csv") for p in (tmp_path, REPOSITORY / "figures" / "bench"))
    numbers = written.select_dtypes("number").columns
    assert written.drop(columns=numbers).equals(committed.drop(columns=numbers))
    assert written[numbers].to_numpy() == pytest.approx(committed[numbers].to_numpy(), rel=1e-9)
    assert set(written.model) == {"Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B"}


@pytest.mark.slow  # three setups of fresh processes (torch imports, torchrun)
def test_the_fsdp_benchmark_runs_every_setup_and_finds_the_same_results(tmp_path):
    run_script("bench/fsdp.py", "--model", "tiny", "--ranks", "2", "--train-steps", "1", "--out", str(tmp_path))
    table = pd.read_csv(tmp_path / "fsdp.csv")
    assert list(dict.fromkeys(table.setup)) == ["one process", "one process, the sharded paths", "FSDP, 2 ranks"]
    assert table.same_results.all()
    sharded = table[table.setup == "FSDP, 2 ranks"]
    assert (sharded.weights_held_mib < sharded.weights_mib * 0.6).all()  # each rank holds about half
