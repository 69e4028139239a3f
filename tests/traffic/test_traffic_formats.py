"""Trace loaders: each format by its real field names, detection by content, malformed rows by line."""

from pathlib import Path

import pytest

from polyinfer.traffic.formats import detect_format, load_trace
from polyinfer.traffic.formats.native import TraceWriter, write_trace
from polyinfer.traffic.trace import Request, Trace, TraceError

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2468190,879,3
"""
BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45.5,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
"""
MOONCAKE = """{"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}
{"timestamp": 10535, "input_length": 672, "output_length": 26, "hash_ids": [46, 47]}
{"timestamp": 27482, "input_length": 1100, "output_length": 52, "hash_ids": [46, 48, 49]}
"""


def write(tmp_path: Path, text: str, name: str = "trace.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_azure_arrivals_are_seconds_since_first_row(tmp_path):
    trace = load_trace(write(tmp_path, AZURE))
    assert trace.format == "azure" and len(trace) == 3
    assert [r.input_len for r in trace.requests] == [374, 396, 879]
    assert [r.output_len for r in trace.requests] == [44, 109, 3]
    assert [r.arrival_s for r in trace.requests] == pytest.approx([0.0, 4.314579, 4.566229], abs=1e-6)


def test_burstgpt_skips_failures_and_filters_models(tmp_path):
    path = write(tmp_path, BURSTGPT)
    trace = load_trace(path)
    assert (len(trace), trace.skipped) == (2, 1)
    assert [(r.arrival_s, r.input_len, r.output_len) for r in trace.requests] == [
        (0.0, 472, 18),
        (113.0, 417, 276),
    ]
    gpt4 = load_trace(path, model="GPT-4")
    assert [(r.arrival_s, r.input_len) for r in gpt4.requests] == [(0.0, 417)]
    with pytest.raises(TraceError, match=r"no rows of model 'Claude'.*ChatGPT, GPT-4"):
        load_trace(path, model="Claude")


def test_mooncake_hash_ids_are_512_token_prefix_blocks(tmp_path):
    trace = load_trace(write(tmp_path, MOONCAKE))
    assert trace.format == "mooncake" and trace.block_size == 512
    assert [r.arrival_s for r in trace.requests] == [0.0, 10.535, 27.482]
    assert trace.requests[2].prefix_hashes == (46, 48, 49)


def test_native_round_trip_keeps_every_field(tmp_path):
    requests = (
        Request(0.5, 3, 2, prompt_ids=(7, 8, 9), prefix_hashes=("a",), session="c1"),
        Request(0.75, 40, 9, prefix_hashes=(1, 2, 3)),
        Request(0.75, 1, 1),
    )
    trace = Trace("recorded", "polyinfer", requests, block_size=16, skipped=0)
    path = tmp_path / "rec.jsonl"
    write_trace(trace, path)
    assert load_trace(path) == trace


def test_native_derives_hashes_from_prompt_ids(tmp_path):
    path = tmp_path / "rec.jsonl"
    with TraceWriter(path, "rec", block_size=2) as writer:
        writer.write(Request(0.0, 5, 1, prompt_ids=(1, 2, 3, 4, 5)))
        writer.write(Request(1.0, 3, 1, prompt_ids=(1, 2, 9)))
    a, b = load_trace(path).requests
    assert len(a.prefix_hashes) == 3 and a.prefix_hashes[0] == b.prefix_hashes[0] != a.prefix_hashes[1]


def test_writer_refuses_requests_out_of_order(tmp_path):
    with TraceWriter(tmp_path / "rec.jsonl", "rec") as writer:
        writer.write(Request(2.0, 1, 1))
        with pytest.raises(TraceError, match=r"recorded after"):
            writer.write(Request(1.0, 1, 1))


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        (AZURE, "azure"),
        (BURSTGPT, "burstgpt"),
        (MOONCAKE, "mooncake"),
        ('{"polyinfer_trace": 1, "name": "x", "block_size": null}\n', "polyinfer"),
    ],
)
def test_format_is_detected_from_content_not_name(tmp_path, text, fmt):
    assert detect_format(write(tmp_path, text, name="misleading.csv")).name == fmt


def test_a_format_that_does_not_match_the_content_is_refused(tmp_path):
    with pytest.raises(TraceError, match=r"is not a burstgpt trace.*reads as azure"):
        load_trace(write(tmp_path, AZURE), format="burstgpt")
    with pytest.raises(TraceError, match=r"applies to BurstGPT traces only"):
        load_trace(write(tmp_path, AZURE), model="GPT-4")


@pytest.mark.parametrize(
    "text",
    [
        "time,input,output\n1,2,3\n",
        "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n",
        '{"ts": 1, "len": 2}\n',
        "just some text\n",
    ],
)
def test_unknown_formats_are_rejected_with_what_was_expected(tmp_path, text):
    with pytest.raises(TraceError, match=r"(?s)unknown trace format.*azure: CSV with header TIMESTAMP"):
        load_trace(write(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (AZURE.replace("396,109", "39x,109"), r":3: field 'ContextTokens' is not a whole number"),
        (AZURE.replace("396,109", "396"), r":3: expected 3 comma-separated columns"),
        (AZURE.replace("396,109", "396,-4"), r":3: field 'GeneratedTokens' is negative"),
        (
            AZURE.replace("2023-11-16 18:15:50", "yesterday"),
            r":3: TIMESTAMP 'yesterday.9951690' is not a datetime",
        ),
        (AZURE.replace("18:15:51", "18:15:40"), r":4: timestamp goes back 10.7483 s from the previous row's"),
        (BURSTGPT.replace("45.5,", "soon,"), r":3: field 'Timestamp' is not a number"),
        (BURSTGPT.replace("472,18", ",18"), r":2: missing field 'Request tokens'"),
        (MOONCAKE + '{"timestamp": 30000, "input_len', r":4: not valid JSON .*truncated"),
        (MOONCAKE.replace('"output_length": 26, ', ""), r":2: missing field 'output_length'"),
        (MOONCAKE.replace("[46, 47]}", '"46"}'), r":1: field 'hash_ids' must be a list"),
        (
            MOONCAKE.replace('"input_length": 655', '"input_length": 6.5'),
            r":1: field 'input_length' is not a whole",
        ),
        (
            MOONCAKE.replace('"input_length": 655', '"input_length": 2'),
            r":1: 2 prefix blocks of 512 tokens exceed",
        ),
        ('{"polyinfer_trace": 2}\n', r":1: trace version 2 is not 1"),
        ('{"polyinfer_trace": 1}\n[1, 2]\n', r":2: expected a JSON object"),
        (
            '{"polyinfer_trace": 1}\n{"arrival_s": -1, "input_len": 1, "output_len": 1}\n',
            r":2: arrival time -1",
        ),
    ],
)
def test_malformed_rows_name_file_line_and_problem(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(TraceError, match=message) as caught:
        load_trace(path)
    assert str(path) in str(caught.value)


def test_unreadable_files_are_trace_errors(tmp_path):
    with pytest.raises(TraceError, match=r"is empty"):
        load_trace(write(tmp_path, "\n\n"))
    with pytest.raises(TraceError, match=r"cannot read trace"):
        load_trace(tmp_path / "missing.csv")
    binary = tmp_path / "weights.bin"
    binary.write_bytes(b"\x80\x81\xfe\xff" * 10)
    with pytest.raises(TraceError, match=r"not UTF-8"):
        load_trace(binary)
    with pytest.raises(TraceError, match=r"no servable requests"):
        load_trace(write(tmp_path, BURSTGPT.splitlines()[0] + "\n1,ChatGPT,5,0,5,API log\n"))
