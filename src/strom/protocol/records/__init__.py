"""Record batches: the v2 format, its header-only validation for the hot path, compression, and the
legacy v0/v1 message sets."""
