"""The engine worker: a process that loads the model once, then runs calls against its Engine."""

from __future__ import annotations

import gc
import resource
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import torch

from polyinfer.engine.candidate import Candidate
from polyinfer.engine.engine import Engine, SwapReport
from polyinfer.engine.messages import Call, Done, Failed, FailureKind, Ready, WorkerSpec
from polyinfer.engine.sequence import SamplingParams
from polyinfer.errors import PolyinferError
from polyinfer.models.load import load_model


def serve(conn: Connection, spec: WorkerSpec) -> None:
    """Process entry point: load, report Ready, then answer Call messages until None arrives."""
    t0 = time.perf_counter()
    if spec.cpu_threads and spec.config.device == "cpu":
        torch.set_num_threads(spec.cpu_threads)
    if spec.memory_limit_gb and spec.config.device == "cpu":
        limit = int(spec.memory_limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        model = load_model(spec.model, dtype=spec.config.torch_dtype, device=spec.config.device,
                           num_layers=spec.num_layers)
        t1 = time.perf_counter()
        engine = Engine(model, spec.config)
        t2 = time.perf_counter()
    except PolyinferError as e:
        conn.send(Failed(FailureKind.RAISED, str(e)))
        return
    # The model, tokenizer and pools live as long as the process: frozen out of the collector's
    # generations, a full collection no longer walks them (one did, ~0.1-0.3 s, in a timed window).
    gc.collect()
    gc.freeze()
    conn.send(Ready(t1 - t0, t2 - t1, model.weights.nbytes, engine.kv.num_blocks))
    while (msg := conn.recv()) is not None:
        conn.send(_run(engine, msg))


def _run(engine: Engine, call: Call) -> Done | Failed:
    start = time.perf_counter()
    try:
        value = call.fn(engine, *call.args)
    except PolyinferError as e:
        return Failed(FailureKind.RAISED, str(e))
    except Exception as e:  # a candidate's bug must not take the worker down
        tail = "".join(traceback.format_exception(e)[-3:])
        return Failed(FailureKind.RAISED, f"{type(e).__name__}: {e}\n{tail}")
    return Done(value, time.perf_counter() - start)


# Calls the supervisor makes; module-level so that they pickle.

def swap(engine: Engine, candidate: Candidate) -> SwapReport:
    return engine.swap(candidate)


def generate(engine: Engine, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
    return [s.output_ids for s in engine.generate(prompts, params)]


def describe(engine: Engine) -> dict[str, Any]:
    return {"candidate": engine.candidate.hash if engine.candidate else None,
            "kv_blocks": engine.kv.num_blocks, "device": str(engine.device)}
