"""The sweep file and its space: reading YAML, the validated and frozen spec, the space of
settings, the sampler and pruner table, the JSON schema, and the plan of worker slots a spec
asks of the machine.
"""

# the packages of orchestrator this one may import (besides its own modules)
MAY_IMPORT: tuple[str, ...] = ("core",)
