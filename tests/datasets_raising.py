"""A user module that raises while it is imported (user code is arbitrary)."""
raise RuntimeError("boom at import")
