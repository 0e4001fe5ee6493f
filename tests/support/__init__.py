"""Tools the Rust integration tests spawn (see README.md): `python3 -m tests.support.NAME`."""
