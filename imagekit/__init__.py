"""Building and pushing container images for this repository's fixtures, test support, proofs
and benchmark: one implementation of each, so that what the tests feed runner-patch is made
the same way everywhere.

Standard library only. It is imported as a package from the repository root: run the modules
that use it with `python3 -m` from there (`python3 -m fixtures.build ...`); pytest finds it
through `pythonpath` in pytest.ini.

    imagekit.digest    sha256 of bytes; readers and writers that hash what passes through
    imagekit.media     media types and platforms
    imagekit.layer     deterministic tar layers: in memory (Layer) or streamed to a file
                       (StreamLayer); gzip without a name or mtime
    imagekit.manifest  descriptors, manifests and indexes, serialised as Docker or OCI tools do
    imagekit.registry  a distribution-API client over plain HTTP: blobs and manifests up and
                       down, every digest checked
    imagekit.vllm      the synthetic vLLM package as layer entries (sources from imagekit.pysrc)
    imagekit.tree      a layer streamed from a directory on disk (a root filesystem)
    imagekit.wheel     test wheels (PEP 427): METADATA, entry points, RECORD, `.data/`; pure
                       or tagged for one interpreter and platform; reproducible bytes
"""

from imagekit.digest import sha256

__all__ = ["sha256"]
