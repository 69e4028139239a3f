"""`polyinfer models`: the listing and the description of one model."""

from __future__ import annotations

import importlib
import json
import pkgutil

from typer.testing import CliRunner

import polyinfer.cli
from polyinfer.cli import app
from polyinfer.models.presets import PRESETS

# As `polyinfer.cli.main` does: every module registers its commands (with one alone, typer would
# treat the app as that single command).
for info in pkgutil.iter_modules(polyinfer.cli.__path__):
    importlib.import_module(f"polyinfer.cli.{info.name}")
runner = CliRunner()


def test_listing_has_the_default_and_every_preset():
    table = runner.invoke(app, ["models"])
    assert table.exit_code == 0, table.output
    assert all(name in table.output for name in ["smollm2-135m-instruct", *PRESETS])
    assert "8.03 B" in table.output and "16.06" in table.output  # llama-3.1-8b params and bf16 GB

    rows = json.loads(runner.invoke(app, ["models", "--json"]).output)
    assert [r["name"] for r in rows] == ["smollm2-135m-instruct", *PRESETS]
    assert rows[0]["weights"] == "real" and {r["weights"] for r in rows[1:]} == {"random"}
    one_b = next(r for r in rows if r["name"] == "llama-3.2-1b")
    assert (one_b["layers"], one_b["hidden"], one_b["heads"], one_b["kv_heads"]) == (16, 2048, 32, 8)
    assert one_b["bf16_gb"] == 2.471


def test_describe_one_model():
    result = runner.invoke(app, ["models", "tiny-qwen3", "--layers", "2", "--dtype", "float32", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["source"] == "preset:tiny-qwen3" and info["spec"]["num_layers"] == 2
    assert info["dtype"] == "float32" and not info["tokenizer"] and len(info["weights_hash"]) == 64
    assert "spec.head_dim" in runner.invoke(app, ["models", "tiny-qwen3", "--layers", "1"]).output
