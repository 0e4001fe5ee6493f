use super::*;

fn spec() -> PatchSpec {
    crate::patches::builtin()
        .expect("builtin patches load")
        .into_iter()
        .find(|p| p.id == "multiconnector-observe")
        .expect("multiconnector-observe is built in")
}

const DATA: &str = "class MultiKVConnectorPromMetrics(KVConnectorPromMetrics):\n    def observe(self, transfer_stats_data, engine_idx=0):\n        for connector_id, stats_data in transfer_stats_data.items():\n            assert connector_id in self._prom_metrics, (\n                f\"{connector_id} is not contained in the list of registered connectors \"\n                f\"with Prometheus metrics support: {self._prom_metrics.keys()}\"\n            )\n            self._prom_metrics[connector_id].observe(stats_data[\"data\"], engine_idx)\n\n\nx = 1\n";

#[test]
fn patches_data_shape_and_keeps_argument_form() {
    let d = spec().decide(DATA.as_bytes());
    let Decision::Patched { bytes, shape } = d else {
        panic!("expected patched, got {d:?}")
    };
    assert_eq!(shape, "assert-then-index");
    let out = String::from_utf8(bytes).expect("utf8");
    assert!(out.contains("            prom_metrics = self._prom_metrics.get(connector_id)\n"));
    assert!(
        out.contains("                prom_metrics.observe(stats_data[\"data\"], engine_idx)\n")
    );
    assert!(!out.contains("assert connector_id"));
    assert!(out.ends_with("\n\nx = 1\n"));
    assert_eq!(spec().decide(out.as_bytes()), Decision::AlreadyPatched);
}

#[test]
fn plain_shape_keeps_plain_argument() {
    let src = DATA.replace("stats_data[\"data\"], engine_idx", "stats_data, engine_idx");
    let Decision::Patched { bytes, .. } = spec().decide(src.as_bytes()) else {
        panic!("expected patched")
    };
    let out = String::from_utf8(bytes).expect("utf8");
    assert!(out.contains("prom_metrics.observe(stats_data, engine_idx)"));
    assert!(!out.contains("[\"data\"]"));
}

#[test]
fn crlf_and_bom_are_kept() {
    let src = format!("\u{FEFF}{}", DATA.replace('\n', "\r\n"));
    let Decision::Patched { bytes, .. } = spec().decide(src.as_bytes()) else {
        panic!("expected patched")
    };
    assert!(bytes.starts_with(b"\xEF\xBB\xBF"));
    let out = String::from_utf8(bytes[3..].to_vec()).expect("utf8");
    assert_eq!(out.matches('\n').count(), out.matches("\r\n").count());
    assert!(out.contains("prom_metrics.get(connector_id)\r\n"));
}

#[test]
fn refuses_mixed_endings_altered_message_and_duplicates() {
    let mixed = DATA.replacen('\n', "\r\n", 1);
    assert!(matches!(
        spec().decide(mixed.as_bytes()),
        Decision::Refused { .. }
    ));
    let altered = DATA.replace("with Prometheus metrics support", "with metrics");
    assert!(matches!(
        spec().decide(altered.as_bytes()),
        Decision::Refused { .. }
    ));
    let twice = format!("{DATA}{DATA}");
    let d = spec().decide(twice.as_bytes());
    assert!(
        matches!(&d, Decision::Refused { reason } if reason.contains("ambiguous")),
        "{d:?}"
    );
}

#[test]
fn upstream_fix_and_old_files_are_not_affected() {
    let fixed = "class MultiKVConnectorPromMetrics:\n    def observe(self, d, engine_idx=0):\n        for connector_id, stats_data in d.items():\n            prom_metrics = self._prom_metrics.get(connector_id)\n            if prom_metrics is not None:\n                prom_metrics.observe(stats_data, engine_idx)\n";
    assert!(matches!(
        spec().decide(fixed.as_bytes()),
        Decision::NotAffected { .. }
    ));
    let old = "class MultiConnector:\n    pass\n";
    assert!(matches!(
        spec().decide(old.as_bytes()),
        Decision::NotAffected { .. }
    ));
}

#[test]
fn marker_with_altered_block_is_refused() {
    let Decision::Patched { bytes, .. } = spec().decide(DATA.as_bytes()) else {
        panic!("expected patched")
    };
    let tampered = String::from_utf8(bytes)
        .expect("utf8")
        .replace("if prom_metrics is not None:", "if prom_metrics:");
    assert!(matches!(
        spec().decide(tampered.as_bytes()),
        Decision::Refused { .. }
    ));
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
    let text = crate::patches::BUILTIN
        .iter()
        .find(|(f, _)| *f == "multiconnector-observe")
        .map(|(_, t)| *t)
        .expect("built in");
    ShapesPatch::load(text, "patches/multiconnector-observe/patch.toml").expect("loads")
}

#[test]
fn interface_decides_as_the_engine_and_hides_bytecode() {
    use crate::patch::testview::Mem;
    use crate::patch::{Change, PatchKind, Verdict};
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
    let Verdict::Patched { changes, .. } = interface().decide(&img) else {
        panic!("expected patched")
    };
    let Decision::Patched { bytes, .. } = spec().decide(DATA.as_bytes()) else {
        panic!("engine patches")
    };
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
        matches!(interface().decide(&two), Verdict::Refused { reason } if reason.contains("2 copies"))
    );
    let mut guarded = Mem(img.0.clone(), None);
    guarded.0.insert(
        "x/vllm_ascend/distributed/kv_transfer/ascend_multi_connector.py".into(),
        b"class AscendMultiConnector(MultiConnector):\n    def observe(self, d, engine_idx=0):\n        pass\n".to_vec(),
    );
    assert!(
        matches!(interface().decide(&guarded), Verdict::Refused { reason } if reason.contains("Ascend"))
    );
    let empty = Mem(Default::default(), None);
    assert!(matches!(
        interface().decide(&empty),
        Verdict::Refused { .. }
    ));
}

#[test]
fn several_files_are_decided_together() {
    use crate::patch::testview::Mem;
    use crate::patch::{PatchKind, Verdict};
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
    let p = ShapesPatch::load(toml, "two/patch.toml").expect("loads");
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
    match p.decide(&view("bug_a()\n", "x\nbug_b()\n")) {
        Verdict::Patched { changes, .. } => {
            let written: Vec<&str> = changes.iter().map(|c| c.path()).collect();
            assert_eq!(written, ["r/pkg/a.py", "r/pkg/b.py"]);
        }
        other => panic!("expected patched, got {other:?}"),
    }
    assert!(matches!(
        p.decide(&view("# two\nfix_a()\n", "# two (b)\nfix_b()\n")),
        Verdict::AlreadyPatched { .. }
    ));
    let half = p.decide(&view("# two\nfix_a()\n", "bug_b()\n"));
    assert!(
        matches!(&half, Verdict::Refused { reason } if reason.starts_with("partly applied")),
        "{half:?}"
    );
    assert!(ShapesPatch::load(&toml.replace("[[file.shape]]", "[[nope]]"), "t").is_err());
}
