"""The benchmarks' error, apart from what loads their data (`datasets` reads whether it is offline when it is
imported: a command that decides that first, like `score`, imports this alone)."""


class DataError(ValueError):
    """Bad data configuration: a missing file, a gated dataset without credentials, an unknown name."""
