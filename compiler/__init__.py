"""Tessera: a compiler for tile accelerators (see README.md and docs/architecture.md)."""
