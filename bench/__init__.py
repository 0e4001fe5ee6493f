"""The benchmark (see README.md); its Python runs as `python3 -m bench.NAME` from the repository root."""
