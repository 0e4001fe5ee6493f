"""The proof tests (pytest; see README.md)."""
