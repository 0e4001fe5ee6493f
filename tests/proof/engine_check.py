#!/usr/bin/env python3
"""Drive the real vLLM metrics path with a given multi_connector.py; run it with the venv's python.

    "$(tests/proof/engine_venv.sh)" tests/proof/engine_check.py FILE --expect abort|ok

FILE is loaded under the real module name `vllm.distributed.kv_transfer.kv_connector.v1.
multi_connector` before anything imports it (the installed package is not modified and no
bytecode is written). Then, as a vLLM 0.29.0 deployment with a MultiConnector of MooncakeConnector
(statistics, no metrics) and MooncakeStoreConnector (both) does:

  1. the real PrometheusStatLogger is built (it builds KVConnectorProm ->
     MultiConnector.build_prom_metrics and registers the scheduler gauges);
  2. real MooncakeKVConnectorStats / MooncakeStoreConnectorStats record a transfer and a store
     operation, are grouped in a MultiKVConnectorStats, and the scheduler's SchedulerStats
     payload (`kv_connector_stats=stats.data`) goes through vLLM's msgpack encoder/decoder, as
     from the engine core to the front end (this is what wraps each child as {"data": ...});
  3. PrometheusStatLogger.record() is called, which calls KVConnectorProm.observe(payload, 0).

--expect abort: the upstream AssertionError must be raised.
--expect ok:    no error; the mooncake-store samples are non-zero and the gauges
                vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc
                are registered with the recorded values.
Exit 0 when the expectation holds, 1 when it does not, 2 when the check could not run.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import os
import sys
import time
import types
from pathlib import Path

MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.multi_connector"
PARENT = MODULE.rsplit(".", 1)[0]
EXPECTED_ASSERT = ("MooncakeConnector is not contained in the list of registered connectors "
                   "with Prometheus metrics support: dict_keys(['MooncakeStoreConnector'])")
GAUGES = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc")
STORE_PREFIX = "vllm:mooncake_store_"


def say(msg: str) -> None:
    print(f"engine_check: {msg}", flush=True)


def load_file_as_module(path: Path) -> types.ModuleType:
    sys.dont_write_bytecode = True
    parent = importlib.import_module(PARENT)
    if MODULE in sys.modules:
        raise RuntimeError(f"{MODULE} was imported before it could be replaced")
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MODULE]
        raise
    setattr(parent, "multi_connector", module)
    return module


def samples(text: str, prefix: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path, help="the multi_connector.py to run")
    ap.add_argument("--expect", choices=["abort", "ok"], required=True)
    args = ap.parse_args()

    src = args.file.resolve()
    text = src.read_text(encoding="utf-8-sig")
    call_form = ('stats_data["data"]' if 'observe(stats_data["data"], engine_idx)' in text
                 else "stats_data" if "observe(stats_data, engine_idx)" in text else None)
    say(f"file {src} sha256={hashlib.sha256(src.read_bytes()).hexdigest()[:16]} "
        f"child call passes {call_form}")

    if call_form != 'stats_data["data"]':
        say("this check drives vLLM 0.29.x, whose front end hands each child {'data': ...}; "
            "FILE must be a 0.29.0-shaped multi_connector.py")
        return 2
    started = time.monotonic()
    try:
        module = load_file_as_module(src)
    except Exception as exc:  # noqa: BLE001
        say(f"FILE could not be loaded as {MODULE}: {exc!r}")
        return 2
    import prometheus_client
    import vllm
    from vllm.config.kv_transfer import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.stats import (
        MooncakeKVConnectorStats)
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.metrics import (
        MooncakeStoreConnectorStats)
    from vllm.v1.metrics.loggers import PrometheusStatLogger
    from vllm.v1.metrics.stats import SchedulerStats
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
    say(f"vllm {vllm.__version__} imported in {time.monotonic() - started:.1f}s; "
        f"{MODULE} is {module.__file__}")
    if not vllm.__version__.startswith("0.29."):
        say(f"the venv must hold vLLM 0.29.x, not {vllm.__version__}")
        return 2

    ktc = KVTransferConfig(
        kv_connector="MultiConnector", kv_role="kv_producer",
        kv_connector_extra_config={"connectors": [
            {"kv_connector": "MooncakeConnector", "kv_role": "kv_producer"},
            {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_producer"},
        ]})
    # PrometheusStatLogger reads only these parts of a VllmConfig (0.29.0 loggers.py); a real
    # VllmConfig would need a model's config from a hub.
    vllm_config = types.SimpleNamespace(
        kv_transfer_config=ktc,
        model_config=types.SimpleNamespace(served_model_name="proof-model", max_model_len=4096,
                                           is_diffusion=False),
        observability_config=types.SimpleNamespace(show_hidden_metrics=False,
                                                   kv_cache_metrics=False),
        speculative_config=None, lora_config=None)
    stat_logger = PrometheusStatLogger(vllm_config, [0])
    multi_prom = stat_logger.kv_connector_prom.prom_metrics
    if type(multi_prom) is not module.MultiKVConnectorPromMetrics:
        say(f"KVConnectorProm did not use FILE's classes: {type(multi_prom)}")
        return 2
    registered = sorted(multi_prom._prom_metrics)
    say(f"KVConnectorProm built from FILE; children with Prometheus metrics: {registered}")

    # What a prefill engine's scheduler gathers after one successful Mooncake transfer.
    mooncake = MooncakeKVConnectorStats()
    mooncake.record_transfer(0.012, 1 << 20, 16)
    store = MooncakeStoreConnectorStats()
    store.record_operation("save_put", 0.004, 8, num_bytes=1 << 16)
    stats = module.MultiKVConnectorStats()
    stats["MooncakeConnector"] = mooncake
    stats["MooncakeStoreConnector"] = store
    sched = SchedulerStats(num_running_reqs=3, num_waiting_reqs=2, kv_cache_usage=0.25,
                           kv_connector_stats=stats.data)
    sched = MsgpackDecoder(SchedulerStats).decode(MsgpackEncoder().encode(sched))
    payload = sched.kv_connector_stats
    say("payload after the engine-core -> front-end hop: "
        + ", ".join(f"{k}: {sorted(v)}" for k, v in payload.items()))

    error = None
    try:
        stat_logger.record(scheduler_stats=sched, iteration_stats=None, engine_idx=0)
    except Exception as exc:  # noqa: BLE001 - reported below
        error = exc
    metrics = prometheus_client.generate_latest().decode()
    store_samples = {k: v for k, v in samples(metrics, STORE_PREFIX).items()
                     if not k.split("{")[0].endswith("_created")}
    gauges = {g: samples(metrics, g + "{") for g in GAUGES}
    say(f"record(): {type(error).__name__ + ': ' + str(error) if error else 'no error'}")
    say(f"non-zero mooncake-store samples: {sum(1 for v in store_samples.values() if v)}"
        f" of {len(store_samples)}")
    for g, vals in gauges.items():
        say(f"{g}: {list(vals.values()) or 'NOT REGISTERED'}")

    failures = []
    if args.expect == "abort":
        if not isinstance(error, AssertionError):
            failures.append(f"expected AssertionError, got {error!r}")
        elif str(error) != EXPECTED_ASSERT:
            failures.append(f"AssertionError message differs: {str(error)!r}")
    else:
        if error is not None:
            failures.append(f"expected no error, got {error!r}")
        if not any(store_samples.values()):
            failures.append("no non-zero mooncake-store samples")
        wanted = {"vllm:num_requests_running": 3.0, "vllm:num_requests_waiting": 2.0,
                  "vllm:kv_cache_usage_perc": 0.25}
        for g, value in wanted.items():
            if list(gauges[g].values()) != [value]:
                failures.append(f"{g}: expected [{value}], got {list(gauges[g].values())}")
        if registered != ["MooncakeStoreConnector"]:
            failures.append(f"unexpected registered children {registered}")

    for f in failures:
        say(f"FAIL: {f}")
    say(f"{'PASS' if not failures else 'FAIL'} (--expect {args.expect})")
    return 1 if failures else 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    sys.exit(main())
