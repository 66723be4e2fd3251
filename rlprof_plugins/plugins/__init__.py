"""Thin per-engine entry points: each registers its engine's patches."""
