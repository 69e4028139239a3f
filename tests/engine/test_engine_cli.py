"""`polyinfer generate` end to end, and its answers to bad input (one line, exit 2, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyinfer.cli", *args], capture_output=True, text=True, timeout=300)


def test_generate_json_with_prompt_ids():
    out = cli("generate", "--model", "tiny-llama", "--prompt-ids", "1,2,3", "--max-tokens", "5", "--json",
              "--ignore-eos")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert len(result["token_ids"]) == 5 and result["finish_reason"] == "length" and result["text"] is None


def test_generate_text_on_the_default_model():
    out = cli("generate", "--prompt", "What is the capital of France?", "--max-tokens", "12", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert "Paris" in result["text"] and result["token_ids"]


def test_seeded_sampling_is_reproducible_from_the_cli():
    args = ("generate", "--model", "tiny-llama", "--prompt-ids", "5,6", "-n", "8", "-t", "1.0", "--seed", "3",
            "--json", "--ignore-eos")
    assert json.loads(cli(*args).stdout)["token_ids"] == json.loads(cli(*args).stdout)["token_ids"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "tiny-llama", "--prompt-ids", ",".join(["5"] * 3000)], "context"),
        (["--model", "tiny-llama", "--prompt-ids", "1,x"], "comma-separated integers"),
        (["--model", "tiny-llama", "--prompt-ids", "1", "--prompt", "hi"], "exactly one"),
        (["--model", "tiny-llama", "--prompt-ids", "99999"], "outside the vocabulary"),
        (["--model", "no-such-model", "--prompt-ids", "1"], "unknown model"),
        (["--model", "/nonexistent/dir", "--prompt-ids", "1"], "no checkpoint directory"),
        (["--model", "tiny-llama", "--prompt", "hi"], "no tokenizer"),
        (["--model", "tiny-llama", "--prompt-ids", "1", "--greedy", "-t", "0.7"], "exclude"),
        (["--model", "tiny-llama", "--prompt-ids", "1", "--dtype", "float8"], "unknown dtype"),
    ],
)
def test_bad_input_is_one_clear_line(args, needle):
    out = cli("generate", *args)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr
