"""`polyinfer optimize` refuses bad engine settings with one clear line, before loading anything."""

from __future__ import annotations

import sys

import pytest

from polyinfer.cli import main


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--block-size", 24), "block_size must be a power of two"),
        (("--max-num-seqs", 0), "max_num_seqs must be >= 1"),
        (("--kv-cache-tokens", -5), "kv_cache_tokens must be >= 1"),
        (("--budget", "soon"), "cannot read the duration"),
    ],
)
def test_bad_engine_settings_exit_2(monkeypatch, capsys, tmp_path, args, needle):
    monkeypatch.setattr(sys, "argv", ["polyinfer", "optimize", "--model", "tiny-llama",
                                      "--board", str(tmp_path / "b.db"), *map(str, args)])
    with pytest.raises(SystemExit) as exit:
        main()
    err = capsys.readouterr().err.replace("\n", " ")
    assert exit.value.code == 2 and needle in err and "Traceback" not in err
    assert not (tmp_path / "b.db").exists()  # nothing was started
