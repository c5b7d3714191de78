"""bench/learning.py's matrix and report: what a reader of docs/BENCHMARKS.md relies on. Every run
of the matrix names a config that exists; comparisons that share a baseline at one size share its
runs (so the matrix costs what `list` says); a verdict says a difference is inside the spread when
the seeds disagree or the gap is smaller than the spread, and beyond it otherwise."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import learning  # noqa: E402


def test_every_variant_of_the_matrix_names_a_config_that_exists():
    for comparison in learning.MATRIX:
        for variant in comparison.variants:
            assert (ROOT / variant.config).is_file(), (comparison.name, variant.name)


def test_comparisons_of_one_size_share_their_baselines_runs():
    calculator = [c for c in learning.MATRIX if c.variants[0] is learning.CALC_LOCAL]
    assert {c.name for c in calculator} >= {"engines-calculator", "sampler", "async", "lora"}
    keys = {c.key(c.variants[0], 0) for c in calculator}
    assert len(keys) == 1
    # a different size is a different run
    bigger = learning.Comparison("x", "?", 8, (0,), (learning.CALC_LOCAL,))
    assert bigger.key(learning.CALC_LOCAL, 0) not in keys


def _rows(afters: dict[int, float]) -> list[dict]:
    return [{"seed": seed, "after": after} for seed, after in afters.items()]


@pytest.mark.parametrize(
    ("base", "other", "verdict"),
    [
        ({0: 0.50, 1: 0.60}, {0: 0.80, 1: 0.90}, "+30% (beyond the spread of 7%; all seeds agree)"),
        ({0: 0.50, 1: 0.70}, {0: 0.60, 1: 0.66}, "+3% (inside the spread of 14%; seeds disagree)"),
        ({0: 0.60, 1: 0.60}, {0: 0.50, 1: 0.50}, "-10% (beyond the spread of 0%; all seeds agree)"),
        # only the seeds both ran are compared
        ({0: 0.60, 1: 0.70}, {0: 0.50}, "-10% (seed 0 only: no spread yet)"),
        ({0: 0.60}, {1: 0.50}, "no seed run by both"),
    ],
)
def test_a_verdict_weighs_the_difference_against_the_spread_over_seeds(base, other, verdict):
    assert learning.verdict(_rows(base), _rows(other)) == verdict


def test_the_report_says_which_variants_have_no_run_yet():
    comparison = learning.MATRIX[0]
    base = comparison.variants[0]
    done = {
        comparison.key(base, seed): {
            "seed": seed,
            "before": 0.1,
            "after": after,
            "sampled_tokens": 1000,
            "wall_s": 300.0,
        }
        for seed, after in ((0, 0.6), (1, 0.7))
    }
    lines = learning.report_rows([comparison], done)
    assert "| 2 (0, 1) | 10% ± 0% | 65% ± 7% | baseline |" in lines[2]
    assert all("not run" in line for line in lines[3:])


def test_a_variants_settings_are_part_of_its_runs_key_but_not_where_its_python_is():
    dtype = next(c for c in learning.MATRIX if c.name == "dtype")
    bf16, default = dtype.variants
    assert dtype.key(bf16, 0) != dtype.key(default, 0)
    assert "bfloat16" in dtype.key(bf16, 0)
    vllm = next(c for c in learning.MATRIX if c.name == "sampler").variants[1]
    assert "AWORLD_TRAIN_VLLM_PYTHON" not in dtype.key(vllm, 0)
    # the float32 variant is the CPU's default run: the baseline every other calculator comparison shares
    assert dtype.key(default, 0) == learning.MATRIX[0].key(learning.CALC_LOCAL, 0)


def test_a_variants_revision_keeps_the_runs_made_before_it_apart():
    credit = next(c for c in learning.MATRIX if c.name == "credit")
    grpo, gigpo, _ = credit.variants
    before = learning.Variant("gigpo", gigpo.config, gigpo.overrides)  # the same run before the change
    assert credit.key(gigpo, 0) != credit.key(before, 0)
    assert credit.key(gigpo, 0).startswith(credit.key(before, 0)[:-1])
    assert grpo.revision == ""  # the baseline's runs still count


def test_a_runs_failed_episodes_are_counted_from_its_token_files_and_reported(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import runs

    def part(folder: str, statuses: list[str]) -> None:
        (tmp_path / "tokens" / folder).mkdir(parents=True)
        pq.write_table(
            pa.table({"status": statuses}), tmp_path / "tokens" / folder / "part-0-000001-a.parquet"
        )

    part("step_000001", ["ok", "timeout", "tool_server_down", "malformed_tool_call"])
    part("step_000002", ["ok", "max_turns"])
    part("eval/before", ["ok", "truncated"])
    part("eval/after", ["tool_server_down", "ok"])
    failed = runs.failed_episodes(tmp_path)
    assert failed == {"train": 2, "eval": 1}  # malformed, max_turns and truncated are no failure
    rows = [{"failed_episodes": failed}, {}]  # a run recorded before they were counted
    assert learning._failed(rows) == "2 + 1, ?"
