"""The runner project's file-level post operations, as the patch folders of
`examples/post-operations/`, applied by `runner-patch apply` to fixture images in a real registry
shaped like their targets (the file at the path the operation names, the Python layout of the
backend, symbolic links as in the image; every platform of a Docker list or an OCI index), and
each proved against the tool the operation itself used. The operations' own files (diffs, the
daemon script, the ld.so.conf.d list) belong to the runner project and are not in this
repository: each test copies the example folder and writes a stand-in of the same shape there.
The tools:

- `patch -p1`: GNU patch run in the root on the original files gives the bytes the container
  sees in the patched image (umoci, and containerd with the native and overlayfs snapshotters);
- the guarded `sed` lines: the operation's own sed on the original file gives the same bytes
  (for the Python one, but for the marker comment the patch adds); `jq` reads the JSON value;
- placed files: their bytes and `stat` modes (and owners) through the links of the image;
- `ENV`: the config's `Env` as skopeo reads it.

Then a re-run is `already-patched` and pushes nothing, `verify` passes, and `rollback` puts the
original digest back. containerd must unpack every image, show no stale `.pyc` of a patched
module and no unreadable entry (the overlayfs `c?????????` of a whiteout with no directory below).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fixtures import registry as fixture_registry
from imagekit.layer import Layer
from tests.proof import postops as po
from tests.support.containerd import Containerd

REPO = "gpustack/runner"


@pytest.fixture(scope="module")
def registry_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("registry")


@pytest.fixture(scope="module")
def registry(registry_dir):
    addr, _ = fixture_registry.start(registry_dir)
    try:
        yield addr
    finally:
        fixture_registry.stop(registry_dir)


@pytest.fixture(scope="module")
def ctd():
    with Containerd() as c:
        yield c


def storage(registry_dir: Path) -> list[str]:
    """Every file of the registry's storage (equal lists: the run pushed nothing)."""
    return sorted(str(p.relative_to(registry_dir)) for p in (registry_dir / "storage").rglob("*")
                  if p.is_file())


def prove_cycle(addr, tag, backend, patches, work: Path, original: str, registry_dir: Path, repo=REPO):
    """Re-run (already patched, nothing written to the registry), verify, rollback (the
    original is back)."""
    m = work / "map.json"
    before = storage(registry_dir)
    again = po.apply(addr, repo, tag, backend, patches, work / "map-again.json")
    assert again["outcome"] == "already-patched", again
    assert storage(registry_dir) == before, "a re-run pushed something"
    po.verify(m, patches)
    po.rollback(m)
    assert po.served(addr, repo, tag) == original


# --- patch -p1 in the package location --------------------------------------------------------

# Stand-ins for the operations' diffs (the runner project's files: the example's README says how
# a maintainer downloads them). Each is GNU diff's answer on a module written here, of the shape of
# the operation's diff: the same file, hunks as many and as far into it, lines removed and added
# so later hunks move, a `diff --git` header with or without `index`, headings after `@@` or none.
QWEN2_5_VL = [
    "import torch\nfrom torch import nn\n",
    300,
    "class Qwen2_5_VisionAttention(nn.Module):\n"
    "    def __init__(self, attn_backend):\n"
    "        super().__init__()\n",
    40,
    ('        self.use_flash_attn = attn_backend == "FLASH_ATTN"\n',
     "        self.use_flash_attn = False  # stand-in: never the flash-attention ViT path\n"),
    "        self.scale = 1.0\n",
    300,
    "class Qwen2_5_VisionTransformer(nn.Module):\n"
    "    def __init__(self, attn_backend):\n",
    30,
    ('        self.flash = attn_backend in ("FLASH_ATTN", "ROCM_AITER_FA")\n',
     "        self.flash = False  # stand-in\n"),
    "        self.depth = 32\n",
    20,
]
WRONG_DP_RAY = [
    "import os\nimport socket\n",
    140,
    "def get_open_zmq_inproc_path() -> str:\n"
    '    return f"inproc://{os.getpid()}"\n'
    "\n",
    ("", "\n_last_port = 0  # stand-in: ports handed out only increase\n\n"),
    "\ndef get_open_port() -> int:\n",
    10,
    ("    port = _get_open_port(None)\n", "    port = _get_open_port(_last_port + 1)\n"),
    "    return port\n",
    8,
    "def get_open_ports_list(count: int = 5) -> list[int]:\n",
    5,
    ("    ports = [get_open_port() for _ in range(count)]\n",
     "    global _last_port\n"
     "    ports = [get_open_port() for _ in range(count)]\n"
     "    _last_port = max(ports)\n"),
    "    return ports\n",
    6,
]
SERVER_ARGS = [
    "import dataclasses\nimport logging\n",
    38,
    ("import random\n", ""),
    "import tempfile\n",
    1330,
    "    def _handle_attention_backend(self):\n"
    "        major, minor = self.device_capability\n",
    ("        if major >= 10:\n",
     "        # stand-in: trtllm_mha only on SM100 and SM103\n"
     "        if (major, minor) in ((10, 0), (10, 3)):\n"),
    '            self.attention_backend = "trtllm_mha"\n',
    14,
    ('        logger.info("attention backend: %s", self.attention_backend)\n',
     '        logger.info("attention backend %s on SM%d%d", self.attention_backend, major, minor)\n'),
    12,
]
ZIMAGE = [
    "from dataclasses import dataclass, field\n"
    "\n"
    "import torch\n",
    2,
    ("from ..models.encoders import Qwen2TextConfig\n"
     "from ..models.encoders.qwen2 import qwen2_postprocess\n", ""),
    "from ..models.encoders import Qwen3TextConfig\n",
    30,
    "@dataclass\n"
    "class ZImagePipelineConfig(ImagePipelineConfig):\n",
    4,
    ("    text_encoder_configs: tuple = field(default_factory=lambda: (Qwen2TextConfig(),))\n",
     "    text_encoder_configs: tuple = field(default_factory=lambda: (Qwen3TextConfig(),))\n"),
    10,
]
PY_HEADINGS = r"^\(class\|def\|import\) "

DIFFS = [
    # (operation, diff file its patch.toml names, file in the diff, stand-in, diff -F, index line,
    #  backend, tag, site, python minor, index style)
    ("20251201_vllm_patch_qwen2_5_vl", "vllm_001_disable_flashatten_in_qwen2_5_vl.patch",
     "vllm/model_executor/models/qwen2_5_vl.py", QWEN2_5_VL, PY_HEADINGS, True,
     "cuda", "cuda12.8-vllm0.11.2", po.SITE312, 12, "docker"),
    ("20260129_vllm_patch_dp", "vllm_001_wrong_dp_ray.patch", "vllm/utils/network_utils.py",
     WRONG_DP_RAY, PY_HEADINGS, True, "rocm", "rocm6.4-vllm0.13.0", po.SITE312, 12, "oci"),
    ("20251213_sglang_patch_server_args", "sglang_001_fix_server_args.patch", "sglang/srt/server_args.py",
     SERVER_ARGS, None, False, "cuda", "cuda12.9-sglang0.5.6.post2", po.SITE312, 12, "docker"),
    ("20260214_sglang_patch_zimage", "001_patch_image.patch",
     "sglang/multimodal_gen/configs/pipeline_configs/zimage.py", ZIMAGE, PY_HEADINGS, True,
     "cann", "cann8.5-910b-sglang0.5.8.post1", po.SITE311, 11, "oci"),
]


@pytest.mark.parametrize("op,diff,rel,parts,headings,index,backend,tag,site,minor,style", DIFFS,
                         ids=[d[0] for d in DIFFS])
def test_diff_in_the_package_location_equals_gnu_patch(registry, registry_dir, ctd, tmp_path, op, diff, rel, parts,
                                                      headings, index, backend, tag, site, minor, style):
    original_file, changed_file = po.module(parts)
    folder = po.copy_example(op, tmp_path / op)
    (folder / diff).write_text(po.gnu_diff(original_file, changed_file, rel, headings, index))
    pkg = rel.split("/")[0]
    version = tag.split(pkg, 1)[1]
    stem = rel.rsplit("/", 1)[1][:-3]
    pyc = f"{site}/{rel.rsplit('/', 1)[0]}/__pycache__/{stem}.cpython-3{minor}.pyc"

    def layers(_p):
        prefix = "usr/local/python3.11.13" if minor == 11 else "usr"
        pkg_layer = (Layer(f"pip install {pkg}=={version}")
                     .file(f"{site}/{pkg}/__init__.py", b"")
                     .file(f"{site}/{rel}", original_file)
                     .file(pyc, b"stale bytecode of the unpatched module")
                     .file(f"{site}/{pkg}-{version}.dist-info/METADATA",
                           f"Metadata-Version: 2.1\nName: {pkg}\nVersion: {version}\n\n"))
        top = Layer("COPY gpustack-entrypoint").file("usr/local/bin/gpustack-entrypoint", b"#!/bin/sh\n", 0o755)
        return [po.python_layer(minor, prefix), pkg_layer, top]

    original = po.push_image(registry, REPO, tag, layers, style)["digest"]
    record = po.apply(registry, REPO, tag, backend, [folder], tmp_path / "map.json")
    assert record["outcome"] == "patched", record

    # GNU patch -p1, run where `pip show` puts the package, on the original file.
    gnu = tmp_path / "gnu"
    po.write_tree(gnu, {rel: original_file})
    po.gnu_patch(gnu, folder / diff)
    assert (gnu / rel).read_bytes() == changed_file, "GNU patch did not give the stand-in's changed text"
    want = {"sha256": po.sha(changed_file), "mode": 0o644}
    po.judge(ctd, registry, REPO, tag, {f"/{site}/{rel}": want, f"/{pyc}": None}, tmp=tmp_path)
    prove_cycle(registry, tag, backend, [folder], tmp_path, original, registry_dir)


# --- patch -p1 in /usr/local/Ascend/atb-models, and a file ADDed with --chmod=550 ------------

ATB = "usr/local/Ascend/atb-models"
MINICPM = "atb_llm/models/minicpm_qwen2_v2"
# Stand-ins for the inputs the runner project keeps out of git (see the example's README).
RESAMPLER = b"# stand-in for OpenBMB's resampler.py (MiniCPM-V-2_6)\nclass Resampler:\n    pass\n"
MODEL_DIFF = f"""--- a/{MINICPM}/flash_causal_minicpm_qwen2_v2.py
+++ b/{MINICPM}/flash_causal_minicpm_qwen2_v2.py
@@ -1,3 +1,4 @@
 import torch
+from .resampler import Resampler
 
 class FlashMinicpmqwen2v2ForCausalLM:
"""


def mindie_base(layers_above):
    def layers(_p):
        base = po.python_layer(11, "usr/local/python3.11.13")
        atb = (Layer("ADD mindie-atb-models.tar.gz")
               .file(f"{ATB}/{MINICPM}/__init__.py", b"")
               .file(f"{ATB}/{MINICPM}/flash_causal_minicpm_qwen2_v2.py",
                     b"import torch\n\nclass FlashMinicpmqwen2v2ForCausalLM:\n    pass\n")
               .file(f"{ATB}/atb_llm/conf/config.json", ATB_CONFIG))
        return [base, atb, *layers_above]
    return layers


def test_minicpm_resampler_added_and_atb_models_patched(registry, registry_dir, ctd, tmp_path):
    op = po.copy_example("20251213_mindie_patch_minicpm_qwen2_v2", tmp_path / "op")
    (op / "1-resampler" / "resampler.py").write_bytes(RESAMPLER)
    (op / "2-atb-models" / "minicpm_qwen2_v2.patch").write_text(MODEL_DIFF)
    patches = [op / "1-resampler", op / "2-atb-models"]
    tag = "cann8.3-910b-mindie2.2.rc1"
    original = po.push_image(registry, REPO, tag, mindie_base([]), "oci")["digest"]
    record = po.apply(registry, REPO, tag, "cann", patches, tmp_path / "map.json")
    assert record["outcome"] == "patched", record
    assert [p["outcome"] for p in record["platforms"][0]["patches"]] == ["patched", "patched"]

    gnu = tmp_path / "gnu"
    model = f"{MINICPM}/flash_causal_minicpm_qwen2_v2.py"
    po.write_tree(gnu, {model: b"import torch\n\nclass FlashMinicpmqwen2v2ForCausalLM:\n    pass\n"})
    po.gnu_patch(gnu, op / "2-atb-models" / "minicpm_qwen2_v2.patch")
    expect = {
        f"/{ATB}/{MINICPM}/resampler.py": {"sha256": po.sha(RESAMPLER), "mode": 0o550, "uid": 0, "gid": 0},
        f"/{ATB}/{model}": {"sha256": po.sha((gnu / model).read_bytes()), "mode": 0o644},
    }
    po.judge(ctd, registry, REPO, tag, expect, tmp=tmp_path)
    prove_cycle(registry, tag, "cann", patches, tmp_path, original, registry_dir)


# --- sed on atb_llm/conf/config.json, judged by jq ---------------------------------------------

ATB_CONFIG = b"""{
  "llm": {
    "ccl": {
      "enable_mc2": "true"
    },
    "chat_template": "",
    "ep_level": 1
  },
  "models": {
    "qwen_moe": {
      "eplb": {
        "level": 0,
        "expert_map_file": ""
      },
      "ep_level": 2
    },
    "deepseekv2": {
      "ep_level": 1,
      "h3p": {
        "enable_qkvdown_dp": "true"
      }
    }
  }
}
"""


def test_atb_config_value_equals_sed_and_jq_reads_it(registry, registry_dir, ctd, tmp_path):
    folder = po.EXAMPLES / "20251224_mindie_patch_atb_config"
    tag = "cann8.3-a3-mindie2.2.rc1"
    original = po.push_image(registry, REPO, tag, mindie_base([]), "docker")["digest"]
    record = po.apply(registry, REPO, tag, "cann", [folder], tmp_path / "map.json")
    assert record["outcome"] == "patched", record

    # The operation's own sed, on the original file.
    by_sed = tmp_path / "config.json"
    by_sed.write_bytes(ATB_CONFIG)
    subprocess.run(["sed", "-i", 's/"ep_level": 2/"ep_level": 1/g', str(by_sed)], check=True)
    path = f"/{ATB}/atb_llm/conf/config.json"
    po.judge(ctd, registry, REPO, tag, {path: {"sha256": po.sha(by_sed.read_bytes()), "mode": 0o644}}, tmp=tmp_path)
    root = po.umoci_rootfs(registry, REPO, tag, "linux/amd64", tmp_path / "jq")
    jq = subprocess.run(["jq", "-c", "[.models.qwen_moe.ep_level, .models.deepseekv2.ep_level, .llm.ep_level]",
                         str(root / path.lstrip("/"))], check=True, capture_output=True, text=True)
    assert jq.stdout.strip() == "[1,1,1]"
    prove_cycle(registry, tag, "cann", [folder], tmp_path, original, registry_dir)


# --- the guarded sed on network_utils.py --------------------------------------------------------

NETWORK_UTILS = b'''import os
import socket

_next_port: int | None = None


def get_open_port() -> int:
    global _next_port
    port = _get_open_port(_next_port)
    _next_port = port
    return port
'''

GUARDED_SED = r'''F="$1"
if grep -qE '^[[:space:]]*_next_port = port \+ 1[[:space:]]*$' "${F}"; then
    echo "Already fixed"
elif grep -qE '^[[:space:]]*_next_port = port[[:space:]]*$' "${F}"; then
    sed -i -E 's/^([[:space:]]*)_next_port = port[[:space:]]*$/\1_next_port = port + 1/' "${F}"
else
    exit 1
fi
'''


@pytest.mark.parametrize("backend,tag,editable", [("cuda", "cuda12.9-vllm0.21.0", False),
                                                  ("cann", "cann8.5-910b-vllm0.18.0", True)])
def test_dp_port_equals_the_guarded_sed(registry, registry_dir, ctd, tmp_path, backend, tag, editable):
    folder = po.EXAMPLES / "20260605_vllm_patch_dp_port"
    version = tag.split("vllm", 1)[1]
    site = po.SITE311 if editable else po.SITE312
    root = "vllm-workspace/vllm" if editable else site
    rel = "vllm/utils/network_utils.py"

    def layers(_p):
        pkg = (Layer("install vllm")
               .file(f"{root}/vllm/__init__.py", b"")
               .file(f"{root}/{rel}", NETWORK_UTILS)
               .file(f"{site}/vllm-{version}.dist-info/METADATA", f"Name: vllm\nVersion: {version}\n\n"))
        minor, prefix = (11, "usr/local/python3.11.13") if editable else (12, "usr")
        return [po.python_layer(minor, prefix), pkg]

    original = po.push_image(registry, REPO, tag, layers, "oci" if editable else "docker")["digest"]
    record = po.apply(registry, REPO, tag, backend, [folder], tmp_path / "map.json")
    assert record["outcome"] == "patched", record

    by_sed = tmp_path / "network_utils.py"
    by_sed.write_bytes(NETWORK_UTILS)
    subprocess.run(["bash", "-c", GUARDED_SED, "sed", str(by_sed)], check=True)
    ours_root = po.umoci_rootfs(registry, REPO, tag, "linux/amd64", tmp_path / "ours")
    ours = (ours_root / root / rel).read_text().splitlines(keepends=True)
    marker = [line for line in ours if "runner-patch 20260605-vllm-patch-dp-port" in line]
    assert len(marker) == 1, ours
    assert "".join(line for line in ours if line not in marker) == by_sed.read_text()
    # The walk stops at the module's layer, and no layer read holds its `__pycache__`: its
    # layer hides the three names of the image's Python, which overlayfs lists as unreadable
    # (docs/patches.md, "Stale bytecode"); umoci and the native snapshotter show nothing.
    minor = 11 if editable else 12
    cache = f"{root}/vllm/utils/__pycache__/network_utils.cpython-3{minor}"
    phantoms = [f"{cache}{opt}.pyc" for opt in ("", ".opt-1", ".opt-2")]
    po.judge(ctd, registry, REPO, tag,
             {f"/{root}/{rel}": {"sha256": po.sha("".join(ours).encode()), "mode": 0o644}},
             unreadable_ok={"overlayfs": phantoms})
    prove_cycle(registry, tag, backend, [folder], tmp_path, original, registry_dir)


# --- files placed through the `latest` link, and ld.so.conf.d -----------------------------------

MINDIE = "usr/local/Ascend/mindie"
DAEMON = "mindie-service/bin/mindieservice_daemon"
# Stand-in for the daemon script the operation rendered (the example's README says how a
# maintainer renders it): a few lines of the same kind, the image's Python prefix written in.
DAEMON_STANDIN = (b"#!/usr/bin/bash\n"
                  b"# stand-in for the rendered mindieservice_daemon\n"
                  b"export LD_LIBRARY_PATH=/usr/local/python3.11.13/lib:${LD_LIBRARY_PATH}\n"
                  b'exec "$(dirname "${BASH_SOURCE[0]}")/mindieservice_daemon_" "$@"\n')


def refresh_entrypoint(tmp: Path) -> Path:
    """The example folder, copied, with the stand-in daemon under the name its patch.toml gives."""
    folder = po.copy_example("20251103_mindie_refresh_entrypoint", tmp / "20251103_mindie_refresh_entrypoint")
    (folder / "mindieservice_daemon").write_bytes(DAEMON_STANDIN)
    return folder


def mindie_layers(link: list[tuple[str, str]]):
    """MindIE installed in 8.3.RC1, its old daemon, and the links given (path, target)."""
    def layers(_p):
        install = (Layer("install mindie")
                   .file(f"{MINDIE}/8.3.RC1/{DAEMON}", b"#!/usr/bin/bash\necho old daemon\n", 0o755)
                   .file(f"{MINDIE}/8.3.RC1/{DAEMON}_", b"\x7fELF daemon", 0o550)
                   .file(f"{MINDIE}/8.3.RC1/mindie-service/conf/config.json", b"{}\n"))
        links = Layer("ln -s")
        for path, target in link:
            links.symlink(path, target)
        return [po.python_layer(11, "usr/local/python3.11.13"), install, links]
    return layers


LINKS = {
    "relative": [(f"{MINDIE}/latest", "8.3.RC1")],
    "absolute": [(f"{MINDIE}/latest", f"/{MINDIE}/8.3.RC1")],
    "chain": [(f"{MINDIE}/latest", "current"), (f"{MINDIE}/current", "../mindie/8.3.RC1")],
}


@pytest.mark.parametrize("how", sorted(LINKS))
def test_daemon_placed_through_the_latest_link(registry, registry_dir, ctd, tmp_path, how):
    folder = refresh_entrypoint(tmp_path)
    repo, tag = f"links-{how}/runner", "cann8.2-910b-mindie2.1.rc1"
    original = po.push_image(registry, repo, tag, mindie_layers(LINKS[how]), "oci")["digest"]
    record = po.apply(registry, repo, tag, "cann", [folder], tmp_path / "map.json")
    assert record["outcome"] == "patched", record
    assert f"/{MINDIE}/8.3.RC1/{DAEMON}" in record["platforms"][0]["reason"], record
    expect = {
        f"/{MINDIE}/latest/{DAEMON}": {"sha256": po.sha(DAEMON_STANDIN), "mode": 0o755, "uid": 0, "gid": 0},
        # The directory the link leads to keeps everything else: nothing shadowed it.
        f"/{MINDIE}/latest/{DAEMON}_": {"sha256": po.sha(b"\x7fELF daemon"), "mode": 0o550},
        f"/{MINDIE}/latest/mindie-service/conf/config.json": {"sha256": po.sha(b"{}\n"), "mode": 0o644},
    }
    po.judge(ctd, registry, repo, tag, expect, tmp=tmp_path)
    root = po.umoci_rootfs(registry, repo, tag, "linux/amd64", tmp_path / "link")
    assert (root / MINDIE / "latest").is_symlink(), "the link is still a link"
    prove_cycle(registry, tag, "cann", [folder], tmp_path, original, registry_dir, repo)


@pytest.mark.parametrize("how,links,expect", [
    ("outside", [(f"{MINDIE}/latest", "../../../../../../opt/mindie")], "leads out of the image root"),
    ("loop", [(f"{MINDIE}/latest", "other"), (f"{MINDIE}/other", "latest")], "loops"),
])
def test_links_leaving_the_root_or_looping_are_refused(registry, registry_dir, tmp_path, how, links, expect):
    folder = refresh_entrypoint(tmp_path)
    repo, tag = f"links-{how}/runner", "cann8.2-910b-mindie2.1.rc1"
    original = po.push_image(registry, repo, tag, mindie_layers(links), "oci")["digest"]
    before = storage(registry_dir)
    record = po.apply(registry, repo, tag, "cann", [folder], tmp_path / "map.json", check=1)
    assert record["outcome"] == "refused", record
    assert expect in record["reason"] and f"/{MINDIE}/latest" in record["reason"], record
    assert po.served(registry, repo, tag) == original
    assert storage(registry_dir) == before, "a refused image pushed something"


# Stand-in for the operation's list of HPC-X library directories (its README says how a
# maintainer writes the real one).
HPCX_STANDIN = b"/opt/hpcx/ompi/lib\n/opt/hpcx/ucx/lib\n"


def test_hpcx_conf_placed(registry, registry_dir, ctd, tmp_path):
    folder = po.copy_example("20251105_vllm_polish_nvidia_hpcx", tmp_path / "20251105_vllm_polish_nvidia_hpcx")
    (folder / "hpcx.conf").write_bytes(HPCX_STANDIN)
    tag = "cuda12.8-vllm0.10.2"

    def layers(_p):
        etc = Layer("ld.so.conf").file("etc/ld.so.conf.d/libc.conf", b"/usr/local/lib\n")
        return [po.python_layer(12), etc]

    original = po.push_image(registry, REPO, tag, layers, "docker")["digest"]
    record = po.apply(registry, REPO, tag, "cuda", [folder], tmp_path / "map.json")
    assert record["outcome"] == "patched", record
    po.judge(ctd, registry, REPO, tag, {
        "/etc/ld.so.conf.d/hpcx.conf": {"sha256": po.sha(HPCX_STANDIN), "mode": 0o644, "uid": 0, "gid": 0},
        "/etc/ld.so.conf.d/libc.conf": {"sha256": po.sha(b"/usr/local/lib\n"), "mode": 0o644},
    }, tmp=tmp_path)
    prove_cycle(registry, tag, "cuda", [folder], tmp_path, original, registry_dir)


# --- ENV ------------------------------------------------------------------------------------------

ENVS = [
    ("20260203_sglang_disable_cudnn_check", "cuda", "cuda12.9-sglang0.5.8",
     ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
     ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SGLANG_DISABLE_CUDNN_CHECK=1"]),
    ("20251214_cuda_several_patches", "cuda", "cuda12.8-vllm0.12.0",
     ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/bin",
      "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64"],
     # The operation's order in front, each entry once (ENV's reading, later duplicates dropped).
     ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/cuda/nvvm/bin:/usr/local/sbin:/usr/bin",
      "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64"]),
    ("20251215_cann_several_patches", "cann", "cann8.3-910b-vllm0.11.0",
     ["PATH=/usr/local/python3.11.13/bin:/usr/bin"],
     ["PATH=/usr/local/Ascend/ascend-toolkit/latest/bisheng_toolkit/bishengir/bin:/usr/local/python3.11.13/bin:/usr/bin"]),
]


@pytest.mark.parametrize("op,backend,tag,env,expect", ENVS, ids=[e[0] for e in ENVS])
def test_env_edits_read_back_from_the_config(registry, registry_dir, ctd, tmp_path, op, backend, tag, env, expect):
    folder = po.EXAMPLES / op
    layers = lambda _p: [po.python_layer(12)]  # noqa: E731
    original = po.push_image(registry, REPO, tag, layers, "docker", env=env)["digest"]
    record = po.apply(registry, REPO, tag, backend, [folder], tmp_path / "map.json")
    assert record["outcome"] == "patched", record
    for plat in ("linux/amd64", "linux/arm64/v8"):
        cfg = po.config_of(registry, REPO, tag, plat)
        assert cfg["config"]["Env"] == expect, plat
        assert len(cfg["rootfs"]["diff_ids"]) == 1, "an env patch adds no layer"
        assert cfg["history"][-1]["empty_layer"] is True
    po.judge(ctd, registry, REPO, tag, {})
    prove_cycle(registry, tag, backend, [folder], tmp_path, original, registry_dir)
