"""polyinfer: continuous compilation of inference."""

__version__ = "0.1.0"
