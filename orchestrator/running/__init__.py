"""Running a sweep: the worker pool and the worker process, the typed protocol between them, the
trial book over both stores, the phases (preflight, export), the scheduling loop, the servers,
and submission to clusters.
"""

# the packages of orchestrator this one may import (besides its own modules)
MAY_IMPORT: tuple[str, ...] = ("core", "config", "answer", "stores", "report")
