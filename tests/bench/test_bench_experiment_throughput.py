"""benchmarks/experiment_throughput.py's arithmetic: what its ratios count and leave out."""

from __future__ import annotations

import pytest

import benchmark_scripts


def test_ratios_count_the_worker_start_and_failed_builds_but_time_only_what_measured():
    et = benchmark_scripts.load("experiment_throughput")
    fresh = [{"candidate": "a", "seconds": 8.0, "ready_s": 7.0, "wall_s": 8.5},
             {"candidate": "b", "seconds": 6.0, "failed": "boom", "wall_s": 6.5},
             {"candidate": "c", "seconds": 10.0, "ready_s": 7.5, "wall_s": 10.5}]
    swapped = [{"candidate": "a", "seconds": 1.0, "ready_s": 0.05},
               {"candidate": "b", "seconds": 0.2, "failed": "boom"},
               {"candidate": "c", "seconds": 3.0, "ready_s": 0.1}]
    r = et.summarize(fresh, swapped, start_s=5.0)
    assert r["pairs"] == 3 and r["failed_builds"] == 1
    assert r["fresh_total_s"] == pytest.approx(25.5)  # until each process has exited
    assert r["swap_total_s"] == pytest.approx(9.2)  # the worker's start counts once
    assert r["experiments_per_hour"]["ratio"] == pytest.approx(25.5 / 9.2)
    # the failed build is in the totals, not in the medians
    assert r["time_to_first_measurement"] == pytest.approx({"fresh_s": 9.0, "swap_s": 2.0, "ratio": 4.5})
    assert r["time_to_ready"]["ratio"] == pytest.approx(7.25 / 0.075)


def test_a_mix_of_only_failed_builds_has_no_time_to_measure():
    et = benchmark_scripts.load("experiment_throughput")
    r = et.summarize([{"candidate": "b", "seconds": 6.0, "failed": "x", "wall_s": 6.1}],
                     [{"candidate": "b", "seconds": 0.1, "failed": "x"}], start_s=4.0)
    assert "time_to_first_measurement" not in r and r["failed_builds"] == 1
