"""`polyinfer generate`: run one prompt through the engine and print or stream the completion."""

from __future__ import annotations

import json
import sys
import time

import typer

from polyinfer.cli import app
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.engine.sequence import SamplingParams, SequenceStatus
from polyinfer.errors import PolyinferError
from polyinfer.models.load import load_model


def parse_ids(text: str) -> list[int]:
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise PolyinferError(f"--prompt-ids must be comma-separated integers, got {text!r}") from None


@app.command()
def generate(
    model: str = typer.Option(None, "--model", "-m", help="checkpoint dir, .gguf file or preset (default: SmolLM2-135M-Instruct)"),
    prompt: str = typer.Option(None, "--prompt", "-p", help="prompt text"),
    prompt_ids: str = typer.Option(None, "--prompt-ids", help="prompt as comma-separated token ids"),
    max_tokens: int = typer.Option(64, "--max-tokens", "-n"),
    greedy: bool = typer.Option(False, "--greedy", help="greedy decoding (the default when no temperature is given)"),
    temperature: float = typer.Option(None, "--temperature", "-t"),
    top_k: int = typer.Option(0, "--top-k"),
    top_p: float = typer.Option(1.0, "--top-p"),
    seed: int = typer.Option(None, "--seed"),
    chat: bool = typer.Option(True, "--chat/--raw", help="wrap --prompt in the model's chat template, if it has one"),
    ignore_eos: bool = typer.Option(False, "--ignore-eos"),
    device: str = typer.Option("cpu", "--device"),
    dtype: str = typer.Option("float32", "--dtype"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of streaming text"),
) -> None:
    """Generate a completion for one prompt."""
    if (prompt is None) == (prompt_ids is None):
        raise PolyinferError("give exactly one of --prompt TEXT or --prompt-ids 1,2,3")
    if greedy and temperature:
        raise PolyinferError("--greedy and --temperature exclude each other")
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature or 0.0, top_k=top_k, top_p=top_p,
                            seed=seed, ignore_eos=ignore_eos)
    config = EngineConfig(device=device, dtype=dtype)
    t0 = time.perf_counter()
    loaded = load_model(model, dtype=config.torch_dtype, device=device)
    tok = loaded.tokenizer
    if prompt_ids is not None:
        ids = parse_ids(prompt_ids)
    elif tok is None:
        raise PolyinferError(f"model {loaded.source} has no tokenizer; pass --prompt-ids instead of --prompt")
    elif chat and tok.chat_template:
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": prompt}]), add_special_tokens=False)
    else:
        ids = tok.encode(prompt)
    engine = Engine(loaded, config)
    t1 = time.perf_counter()
    seq = engine.add_request(ids, params)
    shown = ""
    while seq.status is not SequenceStatus.FINISHED:
        engine.step()
        if tok is not None and not as_json:
            so_far = tok.decode(seq.output_ids)
            if so_far.startswith(shown):  # a partial UTF-8 character decodes differently once complete
                sys.stdout.write(so_far[len(shown):])
                sys.stdout.flush()
                shown = so_far
    t2 = time.perf_counter()
    text = tok.decode(seq.output_ids) if tok is not None else None
    decode_s = seq.token_times[-1] - seq.token_times[0] if len(seq.token_times) > 1 else 0.0
    if as_json:
        print(json.dumps({
            "model": loaded.source, "prompt_ids": ids, "token_ids": seq.output_ids, "text": text,
            "finish_reason": seq.finish_reason.value if seq.finish_reason else None,
            "load_s": round(t1 - t0, 4), "generate_s": round(t2 - t1, 4),
            "ttft_s": round(seq.token_times[0] - seq.arrival, 4),
            "decode_tok_s": round((len(seq.token_times) - 1) / decode_s, 2) if decode_s else None,
        }))
    elif tok is None:
        print(",".join(map(str, seq.output_ids)))
    else:
        print()
