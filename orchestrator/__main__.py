"""``python -m orchestrator``: the ``sweep`` command (:func:`orchestrator.commands.cli.entry`)."""
from orchestrator.commands.cli import entry

if __name__ == "__main__":
    entry()
