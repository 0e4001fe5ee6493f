"""The synthetic vLLM package of the fixture and benchmark images, as layer entries (see
imagekit.layer): the modules around the patch target, the target with its stale bytecode, and a
wheel's dist-info. The sources are short test-made files (imagekit.pysrc), not upstream code."""

from imagekit import pysrc
from imagekit.layer import MTIME

TARGET_SUFFIX = "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py"
V1_DIR = "vllm/distributed/kv_transfer/kv_connector/v1"
SITE312 = "usr/local/lib/python3.12/dist-packages"
SITE311 = "usr/local/python3.11/lib/python3.11/site-packages"


def package(root, version, py_tag, so, multi_connector=None, so_mode=0o644):
    """Entries of the `vllm` package directory under ROOT (the directory holding `vllm/`):
    `__init__.py`, `_version.py`, the native module `_C.abi3.so` (bytes SO, mode SO_MODE), the
    `distributed/kv_transfer/kv_connector/v1` modules, and, when MULTI_CONNECTOR (its source) is
    given, `multi_connector.py` with a stale `.pyc` of it for PY_TAG (e.g. cpython-312)."""
    v1 = f"{root}/{V1_DIR}"
    e = [
        (f"{root}/vllm/__init__.py", "file", pysrc.vllm_init(version)),
        (f"{root}/vllm/_version.py", "file", pysrc.vllm_version_py(version)),
        (f"{root}/vllm/_C.abi3.so", "file", so, so_mode),
        (f"{root}/vllm/distributed/__init__.py", "file", b""),
        (f"{root}/vllm/distributed/kv_transfer/__init__.py", "file", b""),
        (f"{root}/vllm/distributed/kv_transfer/kv_connector/__init__.py", "file", b""),
        (f"{v1}/__init__.py", "file", pysrc.v1_init()),
        (f"{v1}/base.py", "file", pysrc.v1_base()),
        (f"{v1}/metrics.py", "file", pysrc.v1_metrics()),
        (f"{v1}/__pycache__/base.{py_tag}.pyc", "file", pysrc.fake_pyc(py_tag, pysrc.v1_base(), MTIME)),
    ]
    if multi_connector is not None:
        e += [
            (f"{v1}/multi_connector.py", "file", multi_connector),
            (f"{v1}/__pycache__/multi_connector.{py_tag}.pyc", "file",
             pysrc.fake_pyc(py_tag, multi_connector, MTIME)),
        ]
    return e


def wheel_dist_info(site, version, summary):
    """Entries of `vllm-VERSION.dist-info` as pip leaves it in SITE after a wheel install."""
    di = f"{site}/vllm-{version}.dist-info"
    return [
        (f"{di}/METADATA", "file", pysrc.metadata("vllm", version, summary)),
        (f"{di}/RECORD", "file",
         f"vllm/__init__.py,,\nvllm/{TARGET_SUFFIX[5:]},,\nvllm-{version}.dist-info/METADATA,,\n"),
        (f"{di}/INSTALLER", "file", "pip\n"),
    ]
