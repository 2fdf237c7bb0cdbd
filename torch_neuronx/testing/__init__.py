"""Test helpers: a tiny reference model and the CPU parity-check tool."""
