"""Read, check and alter provenance at a registry with plain HTTP, independently of runner-patch.

    python3 -m tests.support.provenance inspect --registry ADDR --repository REPO --digest SUBJECT
        Lists the referrers of SUBJECT through the referrers tag schema (`sha256-<hex>` tag, an OCI
        index), fetches every in-toto artifact, checks each blob's digest, and validates each
        statement with the in-toto-attestation package (Statement v1 and SLSA provenance v1 models,
        parsed strictly: an unknown field is an error). Prints one JSON object.
    python3 -m tests.support.provenance alter --registry ADDR --repository REPO --digest SUBJECT --how HOW
        HOW is subject | original | layer (a changed digest in the statement, pushed as a new
        artifact that replaces the old one in the referrers index) or missing (the index lists none).
        Prints {"index", "previous"}: the new index digest and the old index's text.
    python3 -m tests.support.provenance restore --registry ADDR --repository REPO --digest SUBJECT --index TEXT
        Puts an index (the "previous" of alter) back under the referrers tag.
    python3 -m tests.support.provenance sign --registry ADDR --repository REPO --digest SUBJECT
        Pushes a cosign-style signature (simple signing payload, `sha256-<hex>.sig` tag).
"""

import argparse
import base64
import json
import sys

from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import resource_descriptor_pb2, statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

from imagekit.digest import sha256
from imagekit.media import IN_TOTO as INTOTO
from imagekit.media import OCI_CONFIG, OCI_EMPTY, OCI_INDEX, OCI_MANIFEST
from imagekit.registry import Client


def manifest(reg, ref):
    """The manifest's bytes, or None when the registry has none under REF."""
    found = reg.manifest(ref, missing_ok=True)
    return None if found is None else found[1]


def put_blob(reg, data):
    """Pushes DATA as a blob (unless it is there); returns its digest."""
    reg.push_blob(data)
    return sha256(data)


def referrers_tag(digest):
    return "sha256-" + digest.split(":", 1)[1]


def validate(statement_bytes):
    """Strict parse into the in-toto models, plus the checks their validators make."""
    st = json_format.Parse(statement_bytes.decode(), statement_pb2.Statement())
    Statement.copy_from_pb(st).validate()
    doc = json.loads(statement_bytes)
    prov = json_format.ParseDict(doc["predicate"], provenance_pb2.Provenance())
    if st.predicate_type != "https://slsa.dev/provenance/v1":
        raise ValueError(f"predicateType {st.predicate_type}")
    bd, rd = prov.build_definition, prov.run_details
    if not bd.build_type or not rd.builder.id:
        raise ValueError("buildType and builder.id are required")
    if not bd.external_parameters:
        raise ValueError("externalParameters is required")
    for r in list(bd.resolved_dependencies) + list(rd.byproducts):
        ResourceDescriptor.copy_from_pb(r).validate()
        for alg, value in r.digest.items():
            if alg == "sha256" and (len(value) != 64 or value != value.lower()):
                raise ValueError(f"{r.name}: sha256 {value!r} is not 64 lowercase hex digits")
    json_format.ParseDict(doc["subject"][0], resource_descriptor_pb2.ResourceDescriptor())
    return doc


def inspect(reg, subject):
    index = manifest(reg, referrers_tag(subject))
    out = {"subject": subject, "index": None, "artifacts": []}
    if index is None:
        return out
    idx = json.loads(index)
    out["index"] = idx
    for d in idx.get("manifests", []):
        if d.get("artifactType") != INTOTO:
            continue
        mb = manifest(reg, d["digest"])
        m = json.loads(mb)
        if len(mb) != d["size"]:
            raise RuntimeError(f"descriptor size {d['size']} != manifest size {len(mb)}")
        cfg = m["config"]
        if cfg["mediaType"] != OCI_EMPTY or reg.blob(cfg["digest"]) != b"{}" or cfg["size"] != 2:
            raise RuntimeError(f"artifact {d['digest']} config is not the empty descriptor: {cfg}")
        (layer,) = m["layers"]
        sb = reg.blob(layer["digest"])
        out["artifacts"].append({"digest": d["digest"], "descriptor": d, "manifest": m,
                                 "statement_digest": layer["digest"], "statement": validate(sb)})
    return out


def alter(reg, subject, how):
    before = manifest(reg, referrers_tag(subject))
    idx = json.loads(before)
    if how == "missing":
        idx["manifests"] = []
    else:
        (d,) = [d for d in idx["manifests"] if d.get("artifactType") == INTOTO]
        m = json.loads(manifest(reg, d["digest"]))
        st = json.loads(reg.blob(m["layers"][0]["digest"]))
        fake = "0" * 64
        if how == "subject":
            st["subject"][0]["digest"]["sha256"] = fake
        elif how == "original":
            st["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"]["sha256"] = fake
        elif how == "layer":
            st["predicate"]["runDetails"]["byproducts"][0]["digest"]["sha256"] = fake
        else:
            raise SystemExit(f"unknown --how {how}")
        sb = json.dumps(st, separators=(",", ":")).encode()
        m["layers"][0]["digest"] = put_blob(reg, sb)
        m["layers"][0]["size"] = len(sb)
        mb = json.dumps(m, separators=(",", ":")).encode()
        reg.put_manifest(sha256(mb), mb, OCI_MANIFEST)
        d["digest"], d["size"] = sha256(mb), len(mb)
    ib = json.dumps(idx, separators=(",", ":")).encode()
    reg.put_manifest(referrers_tag(subject), ib, OCI_INDEX)
    return {"index": sha256(ib), "previous": before.decode()}


def restore(reg, subject, index):
    reg.put_manifest(referrers_tag(subject), index.encode(), OCI_INDEX)
    return {"index": sha256(index.encode())}


def sign(reg, subject):
    payload = json.dumps({"critical": {"identity": {"docker-reference": "runner"},
                                       "image": {"docker-manifest-digest": subject},
                                       "type": "cosign container image signature"},
                          "optional": None}, separators=(",", ":")).encode()
    layer = put_blob(reg, payload)
    cfg = json.dumps({"architecture": "", "os": "", "config": {}, "rootfs": {"type": "layers",
                      "diff_ids": [layer]}}, separators=(",", ":")).encode()
    m = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
         "config": {"mediaType": OCI_CONFIG, "size": len(cfg),
                    "digest": put_blob(reg, cfg)},
         "layers": [{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json", "size": len(payload),
                     "digest": layer,
                     "annotations": {"dev.cosignproject.cosign/signature":
                                     base64.b64encode(b"not a real signature").decode()}}]}
    mb = json.dumps(m, separators=(",", ":")).encode()
    tag = referrers_tag(subject) + ".sig"
    reg.put_manifest(tag, mb, OCI_MANIFEST)
    return {"tag": tag, "digest": sha256(mb)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=("inspect", "alter", "restore", "sign"))
    ap.add_argument("--registry", required=True)
    ap.add_argument("--repository", required=True)
    ap.add_argument("--digest", required=True)
    ap.add_argument("--how")
    ap.add_argument("--index")
    a = ap.parse_args()
    reg = Client(a.registry, a.repository)
    if a.command == "inspect":
        out = inspect(reg, a.digest)
    elif a.command == "alter":
        out = alter(reg, a.digest, a.how)
    elif a.command == "restore":
        out = restore(reg, a.digest, a.index)
    else:
        out = sign(reg, a.digest)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
