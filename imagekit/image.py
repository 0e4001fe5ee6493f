"""Whole images from layers: one platform, or several under a Docker manifest list or an OCI
index, configs and manifests in the family's media types, pushed blobs first and the tag last.

    push(client, tag, {AMD64: [layer, ...], ARM64: [...]}, style="docker", env=[...])

STYLE: "docker" (a Docker list of Docker v2 manifests), "oci" (an OCI index of OCI manifests),
"single" (one manifest, the only platform given, OCI-typed) or "single-docker". Layers are
`imagekit.layer.Layer` objects; a platform's config lists their diff_ids and one history entry
each; a layer may also be built into a file (`imagekit.tree.TreeLayer`), which is uploaded from
there. Returns {"digest": the tag's manifest digest, "children": {platform key: digest},
"configs": {platform key: config JSON}}.
"""

import json

from imagekit import manifest
from imagekit.digest import sha256
from imagekit.media import DOCKER_LIST, OCI_INDEX, family

STYLES = ("docker", "oci", "single", "single-docker")


def config_for(platform, built, layers, env):
    """The image config of one platform: os, architecture, Env, diff_ids, one history entry a
    layer (created_by from the layer)."""
    cfg = {
        "architecture": platform.arch,
        "os": platform.os,
        "config": {"Env": list(env), "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": [b["diff_id"] for b in built]},
        "history": [{"created": "2026-01-01T00:00:00Z", "created_by": L.created_by} for L in layers],
    }
    if platform.variant:
        cfg["variant"] = platform.variant
    return cfg


def push(client, tag, platforms, style="oci", env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)):
    """Pushes the image (see the module's doc) with CLIENT (an `imagekit.registry.Client`)."""
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r} (one of {', '.join(STYLES)})")
    if style.startswith("single") and len(platforms) != 1:
        raise ValueError("a single-manifest image has exactly one platform")
    fam = "docker" if style in ("docker", "single-docker") else "oci"
    layer_mt, config_mt, manifest_mt = family(fam)
    children, configs, entries = {}, {}, []
    doc = None
    for platform, layers in platforms.items():
        built = [L.build() for L in layers]
        for b in built:
            if "path" in b:
                client.push_blob(path=b["path"], digest=b["digest"], size=b["size"])
            else:
                client.push_blob(b["blob"])
        cfg = config_for(platform, built, layers, env)
        cfg_bytes = json.dumps(cfg, separators=(",", ":")).encode()
        client.push_blob(cfg_bytes)
        m = manifest.image_manifest(
            manifest_mt, manifest.descriptor(config_mt, cfg_bytes),
            [manifest.descriptor(layer_mt, digest=b["digest"], size=b["size"] if "path" in b else len(b["blob"]))
             for b in built])
        doc = manifest.dump(m, docker_json=fam == "docker")
        digest = client.put_manifest(sha256(doc), doc, manifest_mt)
        children[platform.key] = digest
        configs[platform.key] = cfg
        entries.append(manifest.descriptor(manifest_mt, doc, platform=platform.descriptor()))
    if style.startswith("single"):
        top, top_mt = doc, manifest_mt
    else:
        top_mt = DOCKER_LIST if style == "docker" else OCI_INDEX
        top = manifest.dump(manifest.index(top_mt, entries), docker_json=style == "docker")
    return {"digest": client.put_manifest(tag, top, top_mt), "children": children,
            "configs": configs}
