"""breaknli-fast: the BreakNLI logical-triangle test on fast engines."""

__version__ = "0.1.0"
