use super::*;
use crate::patch::outcome::Outcome;

fn spec() -> PatchSpec {
    interface().spec
}

/// The patched bytes and shape, or a panic naming what was decided instead.
fn patched(d: FileDecision) -> (Vec<u8>, String) {
    match d.patched {
        Some((shape, bytes)) => (bytes, shape),
        None => panic!("expected patched, got {d:?}"),
    }
}

const DATA: &str = "class MultiKVConnectorPromMetrics(KVConnectorPromMetrics):\n    def observe(self, transfer_stats_data, engine_idx=0):\n        for connector_id, stats_data in transfer_stats_data.items():\n            assert connector_id in self._prom_metrics, (\n                f\"{connector_id} is not contained in the list of registered connectors \"\n                f\"with Prometheus metrics support: {self._prom_metrics.keys()}\"\n            )\n            self._prom_metrics[connector_id].observe(stats_data[\"data\"], engine_idx)\n\n\nx = 1\n";

#[test]
fn patches_data_shape_and_keeps_argument_form() {
    let (bytes, shape) = patched(spec().decide(DATA.as_bytes()));
    assert_eq!(shape, "assert-then-index");
    let out = String::from_utf8(bytes).expect("utf8");
    assert!(out.contains("            prom_metrics = self._prom_metrics.get(connector_id)\n"));
    assert!(
        out.contains("                prom_metrics.observe(stats_data[\"data\"], engine_idx)\n")
    );
    assert!(!out.contains("assert connector_id"));
    assert!(out.ends_with("\n\nx = 1\n"));
    assert_eq!(
        spec().decide(out.as_bytes()).outcome,
        Outcome::AlreadyPatched
    );
}

#[test]
fn plain_shape_keeps_plain_argument() {
    let src = DATA.replace("stats_data[\"data\"], engine_idx", "stats_data, engine_idx");
    let (bytes, _) = patched(spec().decide(src.as_bytes()));
    let out = String::from_utf8(bytes).expect("utf8");
    assert!(out.contains("prom_metrics.observe(stats_data, engine_idx)"));
    assert!(!out.contains("[\"data\"]"));
}

#[test]
fn crlf_and_bom_are_kept() {
    let src = format!("\u{FEFF}{}", DATA.replace('\n', "\r\n"));
    let (bytes, _) = patched(spec().decide(src.as_bytes()));
    assert!(bytes.starts_with(b"\xEF\xBB\xBF"));
    let out = String::from_utf8(bytes[3..].to_vec()).expect("utf8");
    assert_eq!(out.matches('\n').count(), out.matches("\r\n").count());
    assert!(out.contains("prom_metrics.get(connector_id)\r\n"));
}

#[test]
fn refuses_mixed_endings_altered_message_and_duplicates() {
    let mixed = DATA.replacen('\n', "\r\n", 1);
    assert_eq!(spec().decide(mixed.as_bytes()).outcome, Outcome::Refused);
    let altered = DATA.replace("with Prometheus metrics support", "with metrics");
    assert_eq!(spec().decide(altered.as_bytes()).outcome, Outcome::Refused);
    let twice = format!("{DATA}{DATA}");
    let d = spec().decide(twice.as_bytes());
    assert!(
        d.outcome == Outcome::Refused && d.reason.contains("ambiguous"),
        "{d:?}"
    );
}

#[test]
fn upstream_fix_and_old_files_are_not_affected() {
    let fixed = "class MultiKVConnectorPromMetrics:\n    def observe(self, d, engine_idx=0):\n        for connector_id, stats_data in d.items():\n            prom_metrics = self._prom_metrics.get(connector_id)\n            if prom_metrics is not None:\n                prom_metrics.observe(stats_data, engine_idx)\n";
    assert_eq!(
        spec().decide(fixed.as_bytes()).outcome,
        Outcome::NotAffected
    );
    let old = "class MultiConnector:\n    pass\n";
    assert_eq!(spec().decide(old.as_bytes()).outcome, Outcome::NotAffected);
}

#[test]
fn marker_with_altered_block_is_refused() {
    let (bytes, _) = patched(spec().decide(DATA.as_bytes()));
    let tampered = String::from_utf8(bytes)
        .expect("utf8")
        .replace("if prom_metrics is not None:", "if prom_metrics:");
    assert_eq!(spec().decide(tampered.as_bytes()).outcome, Outcome::Refused);
}

#[test]
fn guard_refuses_overriding_subclass_only() {
    let s = spec();
    let g = &s.guards[0];
    let plain = "class AscendMultiConnector(MultiConnector, X):\n    def __init__(self):\n        super().__init__()\n\n    def get_finished(self):\n        return None\n";
    assert_eq!(s.check_guard(g, plain.as_bytes()), None);
    let over = format!("{plain}\n    def observe(self, d, engine_idx=0):\n        pass\n");
    assert!(s.check_guard(g, over.as_bytes()).is_some());
    let later = format!("{plain}\n\ndef observe():\n    pass\n");
    assert_eq!(s.check_guard(g, later.as_bytes()), None);
}

fn interface() -> ShapesPatch {
    let p = crate::patch::catalogue::builtin()
        .expect("builtin patches load")
        .into_iter()
        .find(|p| p.meta().id == "multiconnector-observe")
        .expect("multiconnector-observe is built in");
    p.downcast::<ShapesPatch>().expect("a shapes patch").clone()
}

#[test]
fn interface_decides_as_the_engine_and_hides_bytecode() {
    use crate::patch::kind::PatchKind;
    use crate::patch::tree::mem::Mem;
    use crate::patch::verdict::Change;
    let dir = "usr/lib/python3/dist-packages/vllm/distributed/kv_transfer/kv_connector/v1";
    let img = Mem(
        [
            (
                format!("{dir}/multi_connector.py"),
                DATA.as_bytes().to_vec(),
            ),
            (
                format!("{dir}/__pycache__/multi_connector.cpython-312.pyc"),
                vec![0],
            ),
            (format!("{dir}/__pycache__/base.cpython-312.pyc"), vec![0]),
        ]
        .into_iter()
        .collect(),
        None,
    );
    let v = interface().decide(&img);
    assert_eq!(v.outcome, Outcome::Patched, "{v:?}");
    let changes = v.changes;
    let (bytes, _) = patched(spec().decide(DATA.as_bytes()));
    assert!(matches!(&changes[0], Change::Write(e) if *e.content == bytes && e.mode == 0o640));
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(
        matches!(&changes[1], Change::Whiteout(p) if p.ends_with("__pycache__/multi_connector.cpython-312.pyc"))
    );

    let mut two = Mem(img.0.clone(), None);
    two.0.insert(
        "vllm-workspace/vllm/vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py"
            .into(),
        DATA.as_bytes().to_vec(),
    );
    assert!(
        matches!(interface().decide(&two), v if v.outcome == Outcome::Refused && v.reason.contains("2 copies"))
    );
    let mut guarded = Mem(img.0.clone(), None);
    guarded.0.insert(
        "x/vllm_ascend/distributed/kv_transfer/ascend_multi_connector.py".into(),
        b"class AscendMultiConnector(MultiConnector):\n    def observe(self, d, engine_idx=0):\n        pass\n".to_vec(),
    );
    assert!(
        matches!(interface().decide(&guarded), v if v.outcome == Outcome::Refused && v.reason.contains("Ascend"))
    );
    let empty = Mem(Default::default(), None);
    assert_eq!(interface().decide(&empty).outcome, Outcome::Refused);
}

#[test]
fn several_files_are_decided_together() {
    use crate::patch::kind::PatchKind;
    use crate::patch::tree::mem::Mem;
    let toml = r##"
id = "two"
title = "t"
target = "pkg/a.py"
package = "pkg"
affected = ">=0"
mtime = "2026-01-01T00:00:00Z"
marker = "# two"
[[shape]]
name = "a"
find = "bug_a()"
replace = """
# two
fix_a()
"""
[[file]]
target = "pkg/b.py"
marker = "# two (b)"
[[file.shape]]
name = "b"
find = "bug_b()"
replace = """
# two (b)
fix_b()
"""
"##;
    let load = |t: &str| {
        ShapesPatch::load(&crate::patch::source::Source {
            text: t,
            origin: "two/patch.toml",
            folder: None,
        })
    };
    let p = load(toml).expect("loads");
    assert_eq!(p.targets(), ["pkg/a.py", "pkg/b.py"]);
    let view = |a: &str, b: &str| {
        Mem(
            [
                ("r/pkg/a.py".to_owned(), a.as_bytes().to_vec()),
                ("r/pkg/b.py".to_owned(), b.as_bytes().to_vec()),
            ]
            .into_iter()
            .collect(),
            None,
        )
    };
    let v = p.decide(&view("bug_a()\n", "x\nbug_b()\n"));
    assert_eq!(v.outcome, Outcome::Patched, "expected patched, got {v:?}");
    let written: Vec<&str> = v.changes.iter().map(|c| c.path()).collect();
    assert_eq!(written, ["r/pkg/a.py", "r/pkg/b.py"]);
    assert_eq!(
        p.decide(&view("# two\nfix_a()\n", "# two (b)\nfix_b()\n"))
            .outcome,
        Outcome::AlreadyPatched
    );
    let half = p.decide(&view("# two\nfix_a()\n", "bug_b()\n"));
    assert!(
        half.outcome == Outcome::Refused && half.reason.starts_with("partly applied"),
        "{half:?}"
    );
    assert!(load(&toml.replace("[[file.shape]]", "[[nope]]")).is_err());
}
