"""The Python parts of the tests (support tools, proofs) are modules of this package, run with
`python3 -m tests.NAME...` from the repository root or imported by pytest from there."""
