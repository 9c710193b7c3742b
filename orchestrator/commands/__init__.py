"""The faces: the `sweep` command line (parser, handlers, entry) and the Python API, and `sweep
reproduce`.
"""

# the packages of orchestrator this one may import (besides its own modules)
MAY_IMPORT: tuple[str, ...] = ("core", "config", "answer", "stores", "report", "running")
