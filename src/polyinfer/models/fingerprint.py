"""Content fingerprints of weight files: cheap enough to compute on every load of a 16 GB checkpoint.

Hashing every byte of a large checkpoint costs tens of seconds, so a fingerprint hashes each file's name,
size, first MiB (which holds a safetensors or GGUF header: every tensor's name, dtype, shape and offset)
and 64 evenly spaced 4 KiB samples of the rest. Two checkpoints of the same shapes but different values
(another seed, another fine-tune) differ in practically every sample; a single edited weight may not show.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

HEAD_BYTES = 1 << 20
SAMPLES = 64
SAMPLE_BYTES = 4096


def fingerprint(files: Iterable[Path]) -> str:
    """Hex sha256 over the files, in the order given (callers pass a stable order)."""
    digest = hashlib.sha256()
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.name}\0{size}\0".encode())
        with path.open("rb") as f:
            digest.update(f.read(HEAD_BYTES))
            if size > HEAD_BYTES:
                stride = (size - HEAD_BYTES) // SAMPLES
                for i in range(SAMPLES):
                    f.seek(HEAD_BYTES + i * stride)
                    digest.update(f.read(SAMPLE_BYTES))
    return digest.hexdigest()
