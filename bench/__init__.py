"""Benchmarks: `python -m bench` runs every module's `main()`; `python -m bench.<module>` runs one."""
