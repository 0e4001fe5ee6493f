"""Descriptors, image manifests and indexes as JSON values, and their bytes in the styles real
tools write: Docker's CLI and daemon indent by 3 spaces, BuildKit and OCI tools write compact
JSON. Digests are taken over these bytes, so a tool that re-serialises JSON changes them."""

import json
import sys

from imagekit.digest import sha256


def descriptor(media_type, data=None, *, digest=None, size=None, **more):
    """{"mediaType", "size", "digest", **MORE} of DATA, or of a blob known by DIGEST and SIZE."""
    if data is not None:
        digest, size = sha256(data), len(data)
    return {"mediaType": media_type, "size": size, "digest": digest, **more}


def image_manifest(media_type, config, layers):
    """An image manifest from the config's and the layers' descriptors."""
    return {"schemaVersion": 2, "mediaType": media_type, "config": config, "layers": layers}


def index(media_type, manifests):
    """An index (OCI) or manifest list (Docker) of the given descriptors."""
    return {"schemaVersion": 2, "mediaType": media_type, "manifests": manifests}


def dump(obj, docker_json):
    """OBJ's bytes: indented by 3 as `docker manifest push` and the daemon write them, or compact
    as BuildKit does."""
    if docker_json:
        return json.dumps(obj, indent=3).encode()
    return json.dumps(obj, separators=(",", ":")).encode()


def dump_like(obj, original):
    """OBJ serialised the way the bytes ORIGINAL were written (compact, or indented by 2/3/4/tab),
    so that an edit changes nothing but what it edits."""
    styles = [dict(separators=(",", ":"))] + [dict(indent=i) for i in (3, 2, 4, "\t")]
    parsed = json.loads(original)
    for style in styles:
        for ascii_ in (False, True):
            for nl in ("", "\n"):
                if (json.dumps(parsed, ensure_ascii=ascii_, **style) + nl).encode() == original:
                    return (json.dumps(obj, ensure_ascii=ascii_, **style) + nl).encode()
    print("imagekit: warning: unknown JSON style, writing compact JSON", file=sys.stderr)
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
