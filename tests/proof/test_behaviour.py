"""Run the real multi_connector.py (original and as patched by runner-patch) without vLLM or torch.

The file's own module-level imports are read with `ast` and exactly those names are stubbed in
`sys.modules` for the duration of the load (then restored). Only five need a real shape:
KVConnectorStats (dataclass with `data`), KVConnectorPromMetrics (4-argument __init__), init_logger,
PromMetricT (a TypeVar) and torch.Tensor; every other imported name is an inert class.

Registration is driven through the file's own `MultiConnector.build_prom_metrics` (children
MooncakeConnector: statistics but no metrics; MooncakeStoreConnector: both), then
`MultiKVConnectorPromMetrics.observe` gets a payload keyed by class name, as the scheduler sends it.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import itertools
import logging
import sys
import types
import typing
from pathlib import Path

import pytest

from tests.proof import proofutil as pu
from tests.proof import releases
from tests.proof.test_releases import AFFECTED, expected_arg

EXPECTED_ASSERT = ("MooncakeConnector is not contained in the list of registered connectors "
                   "with Prometheus metrics support: dict_keys(['MooncakeStoreConnector'])")
_counter = itertools.count()


class _Inert:
    def __init__(self, *args, **kwargs):
        self.__dict__.update(kwargs)


def _shaped_stubs() -> dict[str, object]:
    @dataclasses.dataclass
    class KVConnectorStats:
        data: dict[str, typing.Any] = dataclasses.field(default_factory=dict)

    class KVConnectorPromMetrics:
        def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
            self._vllm_config = vllm_config
            self._gauge_cls = metric_types
            self._labelnames = labelnames
            self._per_engine_labelvalues = per_engine_labelvalues

        def observe(self, transfer_stats_data, engine_idx=0):
            raise NotImplementedError

    return {
        "KVConnectorStats": KVConnectorStats,
        "KVConnectorPromMetrics": KVConnectorPromMetrics,
        "init_logger": logging.getLogger,
        "PromMetricT": typing.TypeVar("PromMetricT"),
        "Tensor": type("Tensor", (), {}),
    }


def stubbed_imports(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level (not TYPE_CHECKING) imports of vllm.* and torch: {module: [names]}."""
    wanted: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            root = node.module.split(".")[0]
            if root in ("vllm", "torch"):
                wanted.setdefault(node.module, []).extend(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("vllm", "torch"):
                    assert alias.name == "torch", f"unexpected import {alias.name}"
                    wanted.setdefault("torch", []).append("Tensor")
    return wanted


def load(path: Path) -> types.ModuleType:
    source = path.read_text(encoding="utf-8-sig")
    wanted = stubbed_imports(ast.parse(source))
    shaped = _shaped_stubs()
    fakes: dict[str, types.ModuleType] = {}
    for modname, names in wanted.items():
        parts = modname.split(".")
        for i in range(1, len(parts) + 1):  # parent packages too
            fakes.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        for name in names:
            value = shaped.get(name) or type(name, (_Inert,), {})
            setattr(fakes[modname], name, value)
    name = f"multi_connector_under_test_{next(_counter)}"
    saved = {k: sys.modules.get(k) for k in [*fakes, name]}
    try:
        sys.modules.update(fakes)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def build(module: types.ModuleType):
    """MultiConnector.build_prom_metrics with MooncakeConnector + MooncakeStoreConnector children."""
    recorded: list[tuple[object, int]] = []

    class StoreMetrics(module.KVConnectorPromMetrics):
        def observe(self, transfer_stats_data, engine_idx=0):
            recorded.append((transfer_stats_data, engine_idx))

    class MooncakeConnector:  # has statistics, no Prometheus metrics (0.21.0 - 0.32.0)
        @classmethod
        def build_prom_metrics(cls, *args):
            return None

    class MooncakeStoreConnector:  # has both
        @classmethod
        def build_prom_metrics(cls, vllm_config, metric_types, labelnames, labelvalues):
            return StoreMetrics(vllm_config, metric_types, labelnames, labelvalues)

    children = {c.__name__: c for c in (MooncakeConnector, MooncakeStoreConnector)}
    module.KVConnectorFactory.get_connector_class = staticmethod(
        lambda ktc: children[ktc.kv_connector])
    vllm_config = types.SimpleNamespace(kv_transfer_config=module.KVTransferConfig(
        kv_connector="MultiConnector", engine_id="e0", kv_connector_extra_config={"connectors": [
            {"kv_connector": "MooncakeConnector", "kv_role": "kv_producer"},
            {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"},
        ]}))
    prom = module.MultiConnector.build_prom_metrics(vllm_config, {}, ["model_name"], {0: ["m"]})
    assert type(prom).__name__ == "MultiKVConnectorPromMetrics"
    assert list(prom._prom_metrics) == ["MooncakeStoreConnector"]
    return prom, recorded


def payload(arg: str) -> dict:
    mooncake = {"transfer_duration": [0.25], "bytes_transferred": [4096], "num_descriptors": [8]}
    store = {"num_put_requests": 3, "num_get_requests": 2, "put_bytes": [1 << 20]}
    if arg == pu.ARG_DATA:  # <= 0.29.0: each child's stats serialised as {"data": ...}
        return {"MooncakeConnector": {"data": mooncake}, "MooncakeStoreConnector": {"data": store}}
    return {"MooncakeConnector": mooncake, "MooncakeStoreConnector": store}


def expected_child_arg(stats, arg: str):
    return stats["data"] if arg == pu.ARG_DATA else stats


@pytest.fixture(scope="module")
def patched_files(release_cache, patch_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("patched")
    files = {}
    for version in AFFECTED:
        dest = out / f"{version}.py"
        run = pu.run_patch_file(releases.multi_connector_path(version), dest)
        assert run.output is not None, f"{version}: {run.describe()}"
        files[version] = dest
    return files


# ---------------------------------------------------------------- harness self-tests (no binary)

def test_stubs_leave_sys_modules_alone(release_cache):
    before = set(sys.modules)
    load(releases.multi_connector_path("0.29.0"))
    assert not any(m == "vllm" or m.startswith(("vllm.", "multi_connector_under_test"))
                   for m in set(sys.modules) - before)
    assert "torch" not in sys.modules or "torch" in before


@pytest.mark.parametrize("version", AFFECTED)
def test_original_aborts(release_cache, version):
    prom, recorded = build(load(releases.multi_connector_path(version)))
    data = payload(expected_arg(version))
    with pytest.raises(AssertionError) as err:
        prom.observe(data, 1)
    assert str(err.value) == EXPECTED_ASSERT
    # a payload of registered children only works in the original too
    prom.observe({"MooncakeStoreConnector": data["MooncakeStoreConnector"]}, 1)
    assert recorded == [(expected_child_arg(data["MooncakeStoreConnector"],
                                            expected_arg(version)), 1)]


@pytest.mark.parametrize("version", ["0.29.0", "0.30.0"])
def test_reference_patch_survives(release_cache, tmp_path, version):
    """The harness tells a fixed file from a broken one (hand patch, not the binary)."""
    src = tmp_path / "ref.py"
    src.write_text(pu.reference_patch(releases.multi_connector_path(version).read_text()))
    prom, recorded = build(load(src))
    data = payload(expected_arg(version))
    prom.observe(data, 3)
    assert recorded == [(expected_child_arg(data["MooncakeStoreConnector"], expected_arg(version)), 3)]


def test_upstream_fix_survives(release_cache):
    prom, recorded = build(load(releases.multi_connector_path("0.33.0")))
    data = payload(pu.ARG_PLAIN)
    prom.observe(data, 2)
    assert recorded == [(data["MooncakeStoreConnector"], 2)]


# ---------------------------------------------------------------- the binary's output

@pytest.mark.parametrize("version", AFFECTED)
def test_patched_survives(patched_files, version):
    arg = expected_arg(version)
    prom, recorded = build(load(patched_files[version]))
    data = payload(arg)
    prom.observe(data, 3)
    assert len(recorded) == 1, recorded
    got, engine_idx = recorded[0]
    assert got is expected_child_arg(data["MooncakeStoreConnector"], arg)
    assert engine_idx == 3
    # children without metrics are skipped whatever the order; registered ones are still observed
    recorded.clear()
    prom.observe(dict(reversed(list(data.items()))), 0)
    prom.observe({"MooncakeConnector": data["MooncakeConnector"]}, 0)
    prom.observe({}, 0)
    assert recorded == [(expected_child_arg(data["MooncakeStoreConnector"], arg), 0)]
