"""screen(): honest candidates pass; each escape hatch is rejected with a reason that names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyinfer.engine.candidate import BUILTIN_DIR, Candidate
from polyinfer.search.screen import screen

HONEST = [
    *(p for p in sorted(BUILTIN_DIR.glob("*.py")) if not p.stem.startswith("_")),
    Path(__file__).parent / "fused_qkv_candidate.py",
]


@pytest.mark.parametrize("path", HONEST, ids=lambda p: p.stem)
def test_honest_candidates_pass(path: Path) -> None:
    result = screen(Candidate.from_file(path))
    assert result.ok, result.reasons
    assert result.reasons == ()


def test_its_own_names_may_shadow_builtins() -> None:
    source = "import torch\n\ndef build(ctx):\n    def forward(input):\n        return input.float()\n    return forward\n"
    assert screen(Candidate(source)).ok


BUILD = "\n\ndef build(ctx):\n    return None\n"


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("import os" + BUILD, "line 1: imports os (process and filesystem access)"),
        ("import sys" + BUILD, "imports sys"),
        ("from subprocess import run" + BUILD, "imports subprocess (starts processes)"),
        ("import socket" + BUILD, "imports socket (network access)"),
        ("import shutil" + BUILD, "imports shutil"),
        ("import ctypes" + BUILD, "imports ctypes"),
        ("import multiprocessing.pool" + BUILD, "imports multiprocessing.pool (starts processes)"),
        ("import threading" + BUILD, "imports threading"),
        ("import signal" + BUILD, "imports signal"),
        ("import importlib" + BUILD, "imports importlib"),
        ("from pathlib import Path" + BUILD, "imports pathlib"),
        ("import yaml" + BUILD, "imports yaml, which is not allowed"),
        ("import polyinfer.models.load" + BUILD, "imports polyinfer.models.load, which is not allowed"),
        ("from . import sibling" + BUILD, "relative imports"),
        (
            "from torch.utils import cpp_extension" + BUILD,
            "imports torch.utils.cpp_extension (compiles and loads",
        ),
        (
            "import torch as T\nw = T.load('weights.pt')" + BUILD,
            "line 2: uses torch.load (reads pickled files)",
        ),
        ("import torch\ntorch.hub.load('x', 'y')" + BUILD, "uses torch.hub (downloads and runs code)"),
        ("import numpy as np\nnp.zeros(3).tofile('f')" + BUILD, "accesses .tofile (writes files)"),
        ("from polyinfer.engine.candidate import import_candidate" + BUILD, "runs arbitrary source"),
        (
            "from polyinfer.engine import supervisor" + BUILD,
            "imports polyinfer.engine.supervisor (starts processes)",
        ),
        ("data = open('/etc/passwd').read()" + BUILD, "line 1: uses open (file access)"),
        ("exec('print(1)')" + BUILD, "uses exec (runs arbitrary code)"),
        ("x = eval('1 + 1')" + BUILD, "uses eval"),
        ("c = compile('1', 'f', 'eval')" + BUILD, "uses compile"),
        ("m = __import__('os')" + BUILD, "uses __import__ (imports arbitrary modules)"),
        ("g = globals()" + BUILD, "uses globals"),
        ("b = __builtins__" + BUILD, "uses __builtins__"),
        (
            "x = ().__class__.__base__.__subclasses__()" + BUILD,
            "accesses .__subclasses__ (reaches interpreter",
        ),
        ("def f():\n    pass\ng = f.__globals__" + BUILD, "line 3: accesses .__globals__"),
        ("def f():\n    pass\nc = f.__code__" + BUILD, "accesses .__code__"),
        ("x = getattr(len, '__globals__')" + BUILD, "accesses .__globals__ through getattr"),
        ("def build(ctx):\n    import os\n    return os.system", "line 2: imports os"),
    ],
)
def test_each_escape_hatch_is_rejected_with_its_reason(source: str, reason: str) -> None:
    result = screen(Candidate(source))
    assert not result.ok
    assert any(reason in r for r in result.reasons), result.reasons


def test_every_reason_is_reported_in_source_order() -> None:
    source = "import os\nimport torch\ndef build(ctx):\n    open('x')\n    return eval('1')\n"
    assert screen(Candidate(source)).reasons == (
        "line 1: imports os (process and filesystem access)",
        "line 4: uses open (file access)",
        "line 5: uses eval (runs arbitrary code)",
    )


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("", "the source is empty"),
        ("def build(ctx:\n    pass\n", "line 1: syntax error"),
        ("import torch\n\ndef forward(batch):\n    pass\n", "defines no top-level build(ctx)"),
        ("def outer():\n    def build(ctx):\n        pass\n", "defines no top-level build(ctx)"),
    ],
)
def test_a_module_must_parse_and_define_build(source: str, reason: str) -> None:
    result = screen(Candidate(source))
    assert not result.ok and any(reason in r for r in result.reasons), result.reasons


def test_build_may_be_bound_by_assignment_or_import() -> None:
    assert screen(Candidate("from polyinfer.candidates.reference import build\n")).ok
    assert screen(Candidate("def make(ctx):\n    pass\nbuild = make\n")).ok


def test_the_size_limit() -> None:
    source = "def build(ctx):\n    pass\n" + "# padding\n" * 100
    assert screen(Candidate(source), max_bytes=len(source)).ok
    result = screen(Candidate(source), max_bytes=len(source) - 1)
    assert not result.ok and f"over the limit of {len(source) - 1}" in result.reasons[0]
