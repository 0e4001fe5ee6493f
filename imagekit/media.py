"""Media types of the Docker v2 and OCI image formats, and platforms."""

DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
IN_TOTO = "application/vnd.in-toto+json"

INDEXES = (DOCKER_LIST, OCI_INDEX)
# Every manifest kind: distribution answers 404 for an OCI index unless the client accepts it.
ACCEPT = ", ".join([OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST])


def family(name):
    """(layer, config, manifest) media types of the family NAME ("docker" or "oci"): an image
    stays in one family, as podman and skopeo reject mixed ones."""
    if name == "docker":
        return DOCKER_LAYER, DOCKER_CONFIG, DOCKER_MANIFEST
    if name == "oci":
        return OCI_LAYER, OCI_CONFIG, OCI_MANIFEST
    raise ValueError(f"unknown image family {name!r} (docker or oci)")


class Platform:
    def __init__(self, os_, arch, variant=None):
        self.os, self.arch, self.variant = os_, arch, variant

    @property
    def key(self):
        return f"{self.os}/{self.arch}"

    def descriptor(self):
        """The `platform` object of an index entry."""
        d = {"architecture": self.arch, "os": self.os}
        if self.variant:
            d["variant"] = self.variant
        return d


AMD64 = Platform("linux", "amd64")
ARM64 = Platform("linux", "arm64", "v8")


def plat_name(p):
    """`os/arch[/variant]` of a platform object (an index entry's, or a config's)."""
    return "/".join(x for x in (p.get("os"), p.get("architecture"), p.get("variant")) if x)
