import time

import torch

from polyinfer.bench.timer import calls_per_sample, time_calls

CPU = torch.device("cpu")


def test_short_calls_are_grouped_into_samples_of_the_minimum_length():
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.001)

    seconds = time_calls(fn, CPU, reps=4, warmup=2, min_sample_s=0.005)
    assert len(seconds) == 4
    # one probe call picks k; each sample runs k calls and reports the time per call
    k = (len(calls) - 2 - 1) // 4
    assert 2 <= k <= 5 and len(calls) == 2 + 1 + 4 * k
    assert all(0.0009 < s < 0.004 for s in seconds)


def test_on_cpu_each_call_is_its_own_sample_by_default():
    calls = []
    seconds = time_calls(lambda: calls.append(1), CPU, reps=7, warmup=3)
    assert len(seconds) == 7 and len(calls) == 10


def test_calls_per_sample_is_one_when_a_call_is_already_long_enough():
    assert calls_per_sample(lambda: time.sleep(0.003), CPU, 0.002) == 1
    assert calls_per_sample(lambda: None, CPU, 0.0) == 1


def test_the_collector_is_off_while_timing_and_restored_after():
    import gc

    states = []
    time_calls(lambda: states.append(gc.isenabled()), CPU, reps=3, warmup=0)
    assert states == [False] * 3
    assert gc.isenabled()
