"""The benchmarks run in one go at a tiny shape on the CPU (the same script runs on a GPU at real
shapes): every section, its CSV, and equality with plain transformers in fp32."""

import pandas as pd

from ..conftest import run_script


def test_performance_runs_every_section_and_writes_its_table(tmp_path):
    run_script(
        "bench/performance.py",
        *("--models", "tiny", "--device", "cpu", "--repeats", "1", "--sweep-steps", "3", "--new-tokens", "4"),
        *("--eval-examples", "4", "--eval-new-tokens", "2", "--train-steps", "1", "--task", "reverse"),
        *("--sequential-steps", "2", "--prefix-sharing", "off", "--static-cache", "true", "--out", str(tmp_path)),
    )
    table = pd.read_csv(tmp_path / "performance.csv")
    assert sorted(set(table.section)) == ["eval", "sweep", "train"]
    # The training step is also timed against the library's own forward and backward (its overhead).
    assert table.versus[table.section == "train"].tolist() == [
        "plain transformers",
        "the library's forward and backward alone",
    ]
    assert table.identical.all() and (table.dtype == "float32").all()
    assert table.agreement.str.contains("rows equal to plain transformers: 1").any()
    assert (table.other_s > 0).all()
    # The library's training step is a difference of two runs (2 + N steps minus 2): at this tiny
    # shape on a busy machine it is noise around zero, so only the timed loops must be positive.
    timed = table.section != "train"
    assert (table.library_s[timed] > 0).all() and table.library_s.notna().all()


def test_proxies_count_few_host_synchronisations_per_decoding_pass(tmp_path):
    """The decoding loop reads the device back every few tokens, not per token: at most 2 host
    synchronisations per pass over a sweep (the bound the loop is built to)."""
    run_script(
        "bench/proxies.py",
        *("--models", "tiny", "--device", "cpu", "--sweep-steps", "4", "--new-tokens", "16"),
        *("--train-steps", "2", "--task", "reverse", "--gpu-path", "true", "--out", str(tmp_path)),
    )
    table = pd.read_csv(tmp_path / "proxies.csv").set_index(["section", "who"])
    assert table.loc[("sweep", "library"), "passes"] == 16
    assert table.loc[("sweep", "library"), "syncs_per_unit"] <= 2
    # Losses are read back every 10 steps, not per step: beyond what the same forward and backward
    # cost in plain transformers, a step reads back only host-side values (the epoch's permutation,
    # the optimiser's step counter).
    library, plain = table.loc[("train", "library"), "syncs_per_unit"], table.loc[("train", "plain"), "syncs_per_unit"]
    assert library <= plain + 2
    assert table.loc[("sweep", "library"), "ops"] > 0
