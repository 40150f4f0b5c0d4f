"""Developer tools for strom (not shipped in the package)."""
