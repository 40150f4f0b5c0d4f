"""A fault campaign against a local strom cluster (``python -m tools.chaos``; docs/chaos.md)."""
