"""The runner project's 17 package post operations (issue 36), as the folders of
`examples/post-operations/` hold them: their requirement lines (or `remove`), the `env` patches
stacked after them, unchanged. Each runs against a fixture image holding what the operation
starts from (tests/proof/pkgworld.py: the installed versions it upgrades, downgrades or removes,
the Env its lines read) and an index of stand-in wheels under the real names and versions,
given to uv as `UV_INDEX_URL` (the folders name no index, as the operations did not):

- `plan` names what uv chooses per platform (new, upgrade, downgrade, removal, nothing) and
  pushes nothing;
- `apply` gives the amd64 platform what `uv pip install` (or `uv pip uninstall`) of the same
  expanded lines gives in a chroot of the original image, file by file (uv is the judge), the
  stacked `env` patches' variables are in the config, and an import in the patched image shows
  the version the operation wanted;
- a re-run is already patched, `verify` passes, `rollback` restores the original digest.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.proof import pkgworld, proofutil as pu, pyroot, uvjudge, wheelimg, wheelrun
from tests.proof.wheeljudge import compare

EXAMPLES = pu.REPO_ROOT / "examples" / "post-operations"
TAGS = {"cuda-vllm": "cuda12.8-vllm0.14.1", "cuda-sglang": "cuda12.8-sglang0.5.8",
        "rocm-vllm": "rocm6.4-vllm0.14.1", "rocm-sglang": "rocm6.4-sglang0.5.8",
        "cann-vllm": "cann8.3-910b-vllm0.11.0", "cann-mindie": "cann8.3-910b-mindie2.2.rc1"}
CUDA_PATH = "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/cuda/nvvm/bin:"
BISHENG = "/usr/local/Ascend/ascend-toolkit/latest/bisheng_toolkit/bishengir/bin:"


@dataclass
class Case:
    """One operation: its folders (in the order given to --patch), the image it runs on, what
    `plan` must say per architecture (normalized: lower case, `_` as `-`), what uv is asked in
    the judge (the lines as the image's Env expands them; or REMOVE), the Env the stacked
    patches leave (a value, or a prefix ending in `:`) and an import that must print WHAT."""
    op: str
    image: str
    folders: tuple[str, ...] = ("",)
    plan: dict[str, list[str]] = field(default_factory=dict)
    absent: list[str] = field(default_factory=list)
    judge: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)


AUDIO = ["librosa", "soundfile", "mistral_common[audio]"]
CUDNN = ["nvidia-cudnn-cu12>=9.16.0.29", "nvidia-cudnn-frontend>=1.17.0", "nvidia-nccl-cu12>=2.28.3"]
CUDNN_PLAN = ["nvidia-cudnn-cu12 9.10.2.21 -> 9.16.0.29", "nvidia-cudnn-frontend 1.14.0 -> 1.17.0"]
CASES = [
    Case("20251022_vllm_install_ray_client", "cuda-vllm", ("", "env-cann", "env-cuda", "env-rocm"),
         {"amd64": ["grpcio 1.66.0 new"], "arm64": ["grpcio 1.66.0 new"]}, ["ray 2.55.0 ->"], ["ray[client]"],
         env={"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}, imports={"grpcio": "grpcio 1.66.0 on x86_64"}),
    Case("20251022_vllm_install_ray_client", "cann-vllm", ("", "env-cann", "env-cuda", "env-rocm"),
         {"amd64": ["grpcio 1.66.0 new"]}, ["ray 2.55.0 ->"], ["ray[client]"],
         env={"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}),
    Case("20251022_vllm_install_ray_default", "rocm-vllm", plan={
        "amd64": ["aiohttp 3.10.0 new", "prometheus-client 0.21.0 new"]}, absent=["ray 2.55.0 ->"],
         judge=["ray[default]"], imports={"ray": "ray 2.55.0 on x86_64"}),
    Case("20251029_vllm_reinstall_ray", "cann-vllm", plan={
        a: ["ray 2.55.0 -> 2.48.0", "grpcio 1.66.0 new", "aiohttp 3.10.0 new"] for a in ("amd64", "arm64")},
         judge=["ray[client]>=2.47.1,<=2.48.0", "ray[default]>=2.47.1,<=2.48.0"],
         imports={"ray": "ray 2.48.0 on x86_64"}),
    Case("20251110_sglang_install_flashattn", "cuda-sglang", ("", "env"),
         {"amd64": ["flash-attn 2.8.3+cu12torch2.8cxx11abifalse new"]}, judge=["FLASH"],
         env={"SGLANG_FLASHATTN_VERSION": "2.8.3"}, imports={"flash_attn": "flash-attn 2.8.3 on x86_64"}),
    Case("20251125_mindie_install_posix_ipc", "cann-mindie", plan={
        a: ["posix-ipc 1.2.0 new"] for a in ("amd64", "arm64")}, judge=["posix_ipc==1.2.0"],
         imports={"posix_ipc": "posix_ipc 1.2.0 on x86_64"}),
    Case("20251209_mindie_install_av", "cann-mindie", plan={a: ["av 16.0.1 new"] for a in ("amd64", "arm64")},
         judge=["av==16.0.1"], imports={"av": "av 16.0.1 on x86_64"}),
    Case("20251214_cuda_several_patches", "cuda-vllm", ("packages", ""),
         {a: ["nvshmem4py-cu12 0.1.2 new"] for a in ("amd64", "arm64")}, judge=["nvshmem4py-cu12"],
         env={"PATH": CUDA_PATH}, imports={"nvshmem": "nvshmem4py-cu12 0.1.2 on x86_64"}),
    Case("20251215_cann_several_patches", "cann-vllm", ("packages", ""),
         {a: ["triton-ascend 3.2.0 new"] for a in ("amd64", "arm64")}, judge=["triton-ascend"],
         env={"PATH": BISHENG}, imports={"triton": "triton-ascend 3.2.0 on x86_64"}),
    Case("20251216_sglang_uninstall_runai_model_streamer", "cuda-sglang", ("", "env"),
         {a: ["runai-model-streamer"] for a in ("amd64", "arm64")}, remove=["runai-model-streamer"],
         env={"RUNAI_STREAMER_MEMORY_LIMIT": "0", "RUNAI_STREAMER_LOG_TO_STDERR": "1",
              "RUNAI_STREAMER_LOG_LEVEL": "INFO"}),
    Case("20251219_rocm_install_petit_kernel", "rocm-vllm", plan={"amd64": ["petit-kernel 0.0.2 new"]},
         judge=["petit-kernel"], imports={"petit_kernel": "petit-kernel 0.0.2 on x86_64"}),
    Case("20251219_vllm_install_audio_extra", "cuda-vllm", plan={
        a: ["librosa 0.11.0 new", "soundfile 0.13.1 new", "mistral-common 1.8.0 new", "soxr 0.5.0 new"]
        for a in ("amd64", "arm64")}, judge=AUDIO, imports={"librosa": "librosa 0.11.0"}),
    Case("20260203_cuda_several_patches", "cuda-vllm", plan={a: CUDNN_PLAN for a in ("amd64", "arm64")},
         absent=["nvidia-nccl-cu12"], judge=CUDNN, imports={"nvidia.cudnn": "nvidia-cudnn-cu12 9.16.0.29 on x86_64"}),
    Case("20260204_cuda_several_patches", "cuda-sglang", ("", "env"), {a: CUDNN_PLAN for a in ("amd64", "arm64")},
         ["nvidia-nccl-cu12"], CUDNN, env={"SGLANG_DISABLE_CUDNN_CHECK": "1"}),
    Case("20260204_rocm_reinstall_triton", "rocm-sglang", plan={"amd64": ["triton 3.4.0 -> 3.5.1"]},
         judge=["triton==3.5.1"], imports={"triton": "triton 3.5.1 on x86_64"}),
    Case("20260205_cuda_reinstall_nccl", "cuda-vllm", plan={
        a: ["nvidia-nccl-cu12 2.28.3 -> 2.27.5"] for a in ("amd64", "arm64")}, judge=["nvidia-nccl-cu12==2.27.5"],
         imports={"nvidia.nccl": "nvidia-nccl-cu12 2.27.5 on x86_64"}),
    Case("20260212_rocm_reinstall_triton", "rocm-vllm", plan={"amd64": ["triton 3.4.0 -> 3.5.1"]},
         judge=["triton==3.5.1"]),
    Case("20260605_vllm_patch_dp_port", "cuda-vllm", ("packages",),
         {a: ["ray 2.55.0 -> 2.54.0"] for a in ("amd64", "arm64")}, judge=["ray==2.54.0"],
         imports={"ray": "ray 2.54.0 on x86_64"}),
]


def norm(text: str) -> str:
    return text.lower().replace("_", "-")


class PkgWorld:
    def __init__(self, req_world, work: Path, index):
        self.req_world, self.work, self.index = req_world, work, index
        self.layers = {}

    def layer(self, backend: str, arch: str):
        key = (backend, arch)
        if key not in self.layers:
            self.layers[key] = pkgworld.installed_layer(self.req_world.wheels_world, backend, arch,
                                                        self.work / f"{backend}-{arch}")
        return self.layers[key]

    def push(self, repo: str, image: str) -> dict:
        backend = image.split("-")[0]
        arches = pkgworld.ARCHES[backend]
        w = self.req_world.wheels_world
        return w.layers.push(w.addr, repo, TAGS[image], arches=arches, style="oci" if len(arches) > 1 else "single",
                             extra=lambda a: [self.layer(backend, a)], env=pkgworld.ENV[image])


@pytest.fixture(scope="module")
def pkg_world(req_world, tmp_path_factory):
    from tests.proof import pyindex
    work = tmp_path_factory.mktemp("pkgops")
    saved = os.environ.get("UV_INDEX_URL")
    with pyindex.Index(pkgworld.write(work / "index")) as index:
        os.environ["UV_INDEX_URL"] = index.url
        try:
            yield PkgWorld(req_world, work, index)
        finally:
            if saved is None:
                os.environ.pop("UV_INDEX_URL", None)
            else:
                os.environ["UV_INDEX_URL"] = saved


def folders(case: Case, pw: PkgWorld, tmp: Path) -> list[Path]:
    """The case's folders as the repository holds them; the flash-attn one copied with its
    release URL pointing at the index (the same file name)."""
    root = EXAMPLES / case.op
    if case.op != "20251110_sglang_install_flashattn":
        return [root / f for f in case.folders]
    copy = tmp / case.op
    shutil.copytree(root, copy)
    toml = copy / "patch.toml"
    toml.write_text(toml.read_text().replace(pkgworld.FLASH_RELEASE, pw.index.base + "/files/"))
    return [copy / f for f in case.folders]


def image_args(pw: PkgWorld, repo: str, case: Case) -> list[str]:
    return ["--backend", case.image.split("-")[0], "--repository", f"{pw.req_world.wheels_world.addr}/{repo}",
            "--tag", TAGS[case.image], "--no-cache", "-q"]


def patch_args(paths: list[Path]) -> list[str]:
    return [a for p in paths for a in ("--patch", str(p))]


def config_env(addr: str, repo: str, digest: str, arch: str) -> dict[str, str]:
    out = subprocess.run(["skopeo", "inspect", "--config", "--tls-verify=false", "--override-os", "linux",
                          "--override-arch", arch, f"docker://{addr}/{repo}@{digest}"],
                         capture_output=True, text=True, check=True).stdout
    return dict(e.split("=", 1) for e in json.loads(out)["config"]["Env"])


def check_plan(case: Case, run) -> None:
    assert run.code == 0, run.describe()
    rec = run.record
    for plat in rec["platforms"]:
        arch = plat["platform"].split("/")[1]
        text = norm(json.dumps(plat))
        for want in case.plan.get(arch, []):
            assert norm(want) in text, f"{case.op} on {case.image} {arch}: plan does not say {want!r}: {text}"
        for never in case.absent:
            assert norm(never) not in text, f"{case.op} on {case.image} {arch}: plan names {never!r}: {text}"


def judge_root(case: Case, pw: PkgWorld, repo: str, original: str, tmp: Path) -> Path:
    """uv's own run of the operation's lines in a chroot of the original amd64 image."""
    addr = pw.req_world.wheels_world.addr
    root = wheelimg.copy_root(wheelimg.unpack(addr, repo, "@" + original, "amd64", tmp / "o"), tmp / "uv")
    if case.remove:
        with uvjudge.runnable(root) as judge:
            cmd = [shutil.which("chroot") or "/usr/sbin/chroot", str(root), f"/{judge.name}/uv", "pip", "uninstall", "--system", "--python",
                   pyroot.PYTHON, "--break-system-packages", "--no-cache", *case.remove]
            env = {**pyroot.env(), "UV_NO_CONFIG": "1", "LD_LIBRARY_PATH": f"/{judge.name}/lib",
                   "TMPDIR": f"/{judge.name}/tmp"}
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
            assert r.returncode == 0, f"uv pip uninstall {case.remove}: {r.stderr}"
        return root
    lines = [f"flash-attn @ {pw.index.base}/files/{pkgworld.FLASH} ; platform_machine == 'x86_64'"
             if x == "FLASH" else x for x in case.judge]
    uvjudge.system(root, lines, pw.index.url)
    return root


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}@{c.image}" for c in CASES])
def test_operation_folder_plans_applies_as_uv_and_rolls_back(pkg_world, case, tmp_path):
    pw = pkg_world
    w = pw.req_world.wheels_world
    repo = f"proof/pkgops-{case.op.split('_', 1)[0]}-{case.image}".lower()
    original = pw.push(repo, case.image)["digest"]
    paths = folders(case, pw, tmp_path)
    before = wheelrun.storage(w.registry_dir)
    plan = wheelrun.tool("plan", *image_args(pw, repo, case), *patch_args(paths), "--json")
    check_plan(case, plan)
    assert wheelrun.storage(w.registry_dir) == before, "plan pushed something"
    dmap = tmp_path / "map.json"
    run = wheelrun.tool("apply", *image_args(pw, repo, case), *patch_args(paths), "--digest-map", str(dmap), "--json")
    assert run.code == 0 and run.record["outcome"] == "patched", run.describe()
    amd64 = next(p for p in run.record["platforms"] if p["platform"].startswith("linux/amd64"))
    patched = wheelimg.unpack(w.addr, repo, "@" + amd64["patched_digest"], "amd64", tmp_path / "p")
    diffs = compare(judge_root(case, pw, repo, original, tmp_path), patched, "uv")
    assert diffs == [], f"{case.op}: the patched amd64 tree differs from uv's:\n  " + "\n  ".join(diffs[:25])
    for module, what in case.imports.items():
        out = pyroot.chroot(patched, pyroot.PYTHON, "-c", f"import {module} as m; print(m.WHAT)").stdout
        assert out == what + "\n", f"{case.op}: import {module} printed {out!r}"
    for plat in run.record["platforms"]:
        env = config_env(w.addr, repo, plat["patched_digest"], plat["platform"].split("/")[1])
        for name, value in case.env.items():
            ok = env.get(name, "").startswith(value) if value.endswith(":") else env.get(name) == value
            assert ok, f"{case.op}: {plat['platform']} Env {name}={env.get(name)!r}, wanted {value!r}"
    again = wheelrun.tool("apply", *image_args(pw, repo, case), *patch_args(paths), "--digest-map",
                          str(tmp_path / "again.json"), "--json")
    assert again.code == 0 and again.record["outcome"] == "already-patched", again.describe()
    v = wheelrun.tool("verify", "--digest-map", str(dmap), *patch_args(paths), "-q")
    assert v.code == 0, v.describe()
    r = wheelrun.rollback(dmap)
    assert r.code == 0, r.describe()
    assert wheelrun.served(w.addr, repo, TAGS[case.image]) == original
