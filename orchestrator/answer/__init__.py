"""The answer of a sweep, as pure rules on numbers: the objectives and their direction, the
paired statistics, and the plan and verdict of a `compare:` block.
"""

# the packages of orchestrator this one may import (besides its own modules)
MAY_IMPORT: tuple[str, ...] = ("core", "config")
