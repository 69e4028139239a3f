"""`polyinfer models`: list the presets and the embedded default, or load one model and describe it."""

from __future__ import annotations

import json
from typing import Any

import torch
import typer
from rich import box
from rich.console import Console
from rich.table import Table

from polyinfer.cli import app
from polyinfer.errors import ModelError
from polyinfer.models.default import DEFAULT_NAME
from polyinfer.models.load import load_model
from polyinfer.models.presets import PRESETS, preset_spec
from polyinfer.models.spec import ModelSpec

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _row(name: str, spec: ModelSpec, weights: str) -> dict[str, Any]:
    params = spec.parameter_count()
    return {
        "name": name,
        "family": spec.family,
        "layers": spec.num_layers,
        "hidden": spec.hidden_size,
        "heads": spec.num_heads,
        "kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "intermediate": spec.intermediate_size,
        "vocab": spec.vocab_size,
        "params": params,
        "bf16_gb": round(params * 2 / 1e9, 3),
        "weights": weights,
    }


def catalog() -> list[dict[str, Any]]:
    """One row per loadable name: the embedded default first, then the presets."""
    # The default has exactly the smollm2-135m preset's shape (a test checks the converted config),
    # so listing it does not require converting the GGUF.
    default = _row(DEFAULT_NAME, preset_spec("smollm2-135m"), "real")
    return [default, *(_row(name, preset_spec(name), "random") for name in PRESETS)]


def _params(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f} B"
    return f"{n / 1e6:.0f} M" if n >= 1e6 else f"{n / 1e3:.0f} K"


@app.command()
def models(
    ref: str = typer.Argument(
        None, help="load this model and describe it (dir, .gguf, preset or default name)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    layers: int = typer.Option(None, "--layers", help="load only the first N layers (with REF)"),
    dtype: str = typer.Option("bfloat16", "--dtype", help=f"dtype to load REF in: {', '.join(DTYPES)}"),
) -> None:
    """List the model presets and the embedded default, or load REF and describe it."""
    console = Console()
    if ref is None:
        rows = catalog()
        if as_json:
            print(json.dumps(rows, indent=2))
            return
        table = Table(box=box.SIMPLE, caption=f"{DEFAULT_NAME} has real weights; presets have random ones")
        for column in ("name", "family", "layers", "hidden", "heads/kv", "params", "bf16 GB"):
            table.add_column(
                column,
                justify="left" if column in ("name", "family") else "right",
                no_wrap=True,
                min_width=len(column),
            )
        for r in rows:
            table.add_row(
                r["name"],
                r["family"],
                str(r["layers"]),
                str(r["hidden"]),
                f"{r['heads']}/{r['kv_heads']}",
                _params(r["params"]),
                f"{r['bf16_gb']:.2f}",
            )
        console.print(table)
        return
    if dtype not in DTYPES:
        raise ModelError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    loaded = load_model(ref, dtype=DTYPES[dtype], num_layers=layers)
    tok = loaded.tokenizer
    info = {
        "source": loaded.source,
        "weights_hash": loaded.weights_hash,
        "dtype": dtype,
        "weight_bytes": loaded.weights.nbytes,
        "tokenizer": tok is not None,
        "chat_template": bool(tok and tok.chat_template),
        "spec": loaded.spec.to_json(),
    }
    if as_json:
        print(json.dumps(info, indent=2))
        return
    table = Table(title=loaded.source, show_header=False)
    for key, value in {k: v for k, v in info.items() if k != "spec"}.items():
        table.add_row(key, str(value))
    for key, value in loaded.spec.to_json().items():
        table.add_row(f"spec.{key}", str(value))
    console.print(table)
