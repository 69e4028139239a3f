"""Per-operation profiles: what the study posts for each incumbent and the LLM agents read."""

import torch

from polyinfer.bench.profile import profile_step, profile_workload, short_name
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.models.load import load_model
from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.synth import PRESETS, synthesize
from polyinfer.traffic.workload import cap_trace


def engine() -> Engine:
    torch.manual_seed(0)
    return Engine(load_model("tiny-llama"), EngineConfig(kv_cache_tokens=4096))


def test_a_decode_step_is_broken_down_by_operator_most_expensive_first():
    e = engine()
    free = e.blocks.num_free
    found = profile_step(e, Candidate.reference(), batch_size=3, context_len=40)
    assert (found.device, found.batch_size, found.context_len) == ("cpu", 3, 40)
    names = [op.name for op in found.ops]
    assert "aten::mm" in names or "aten::addmm" in names  # the projections
    assert [op.us_per_step for op in found.ops] == sorted((op.us_per_step for op in found.ops), reverse=True)
    assert found.step_us > 0 and all(op.calls_per_step > 0 for op in found.ops)
    assert e.blocks.num_free == free  # the batch's KV blocks are given back
    assert e.candidate == Candidate.reference()  # profiled beside the current forward, not swapped in


def test_the_table_lists_the_top_operators_and_sums_the_rest():
    found = profile_step(engine(), Candidate.parse("fast:decode_attention=batched"), 2, 24)
    text = found.table(top=3)
    lines = text.splitlines()
    assert found.candidate in lines[0] and "batch 2, context 24" in lines[0]
    assert len(lines) == 2 + 3 + 1 and lines[-1].strip().endswith(f"({len(found.ops) - 3} more)")


def test_the_workload_picks_the_decode_shape_that_carries_most_tokens():
    trace = cap_trace(synthesize(PRESETS["chat"]), 12, 64)
    found = profile_workload(engine(), Candidate.reference(), WorkloadProfile.of(trace))
    assert 1 <= found.batch_size <= 12 and found.context_len > 1


def test_kernel_names_lose_their_template_arguments():
    long = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MaxOps<float>>>(float*)"
    assert short_name(long) == "at::native::reduce_kernel<...>"
    assert short_name("_rms_norm_kernel") == "_rms_norm_kernel"
    assert short_name("aten::mm") == "aten::mm"


def test_the_profilers_native_chatter_stays_out_of_the_terminal(capfd):
    profile_step(engine(), Candidate.reference(), 1, 8)
    print("after", file=__import__("sys").stderr)
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "profiler_stop" not in err
    assert "after" in err  # stderr is back
