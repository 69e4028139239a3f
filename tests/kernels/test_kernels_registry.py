import inspect
import subprocess
import sys

import pytest

from polyinfer.errors import PolyinferError
from polyinfer.kernels import KERNEL_NAMES, load


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_every_kernel_declares_its_knobs_as_keyword_only_launch_arguments(name):
    kernel = load(name)
    params = inspect.signature(kernel.launch).parameters
    keyword_only = {p.name: p.default for p in params.values() if p.kind is p.KEYWORD_ONLY}
    assert set(keyword_only) == set(kernel.knobs)
    for knob, default in keyword_only.items():
        assert default is None or default in kernel.knobs[knob], f"{name}.{knob} default {default}"
    data_params = [p for p in params if p not in keyword_only]
    assert data_params == list(inspect.signature(kernel.reference).parameters)


def test_unknown_kernel_names_the_known_ones():
    with pytest.raises(PolyinferError, match="rms_norm"):
        load("flash_attention_9")


def test_kernels_package_imports_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import polyinfer.kernels as k\n"
        "from polyinfer.errors import PolyinferError\n"
        "try:\n    k.load('gemv')\nexcept PolyinferError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'polyinfer[kernels]'" in out
