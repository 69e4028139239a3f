"""LoadedModel: what every model source (checkpoint directory, GGUF file, preset) produces."""

from __future__ import annotations

from dataclasses import dataclass

from polyinfer.models.spec import ModelSpec
from polyinfer.models.tokenizer import Tokenizer
from polyinfer.models.weights import Weights


@dataclass(frozen=True, slots=True, eq=False)
class LoadedModel:
    """A model ready for the engine.

    `spec.num_layers` is the number of layers actually loaded (the fast tier loads the first few).
    `weights_hash` identifies the source's weights, independent of dtype, device and truncation for files
    (a fingerprint of the checkpoint or GGUF files, see `fingerprint.py`); for a preset it covers name,
    seed, config, dtype and generator device, because those determine the random values.
    """

    spec: ModelSpec
    weights: Weights
    tokenizer: Tokenizer | None
    source: str
    weights_hash: str
