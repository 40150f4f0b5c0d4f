"""Foundations every layer may use: the injectable clock and the limits."""
