"""The words every layer shares: the errors and exit codes, paths and store URLs, the record
keys, and the adapter to the private names of Optuna and CPython.
"""

# the packages of orchestrator this one may import (besides its own modules)
MAY_IMPORT: tuple[str, ...] = ()
