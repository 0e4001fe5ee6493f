import os

import pytest

from tests.proof import proofutil, releases


@pytest.fixture(scope="session")
def release_cache():
    """The real upstream files; downloads whatever is missing from the cache (two at a time)."""
    return releases.fetch()


@pytest.fixture(scope="session")
def patch_bin():
    path = proofutil.binary()
    if not path.is_file():
        pytest.fail(f"runner-patch binary not found at {path}: run `cargo build --release` "
                    f"or set RUNNER_PATCH_BIN")
    return path


class WheelsWorld:
    """What every wheels proof test shares: a registry, the test wheels, the fixture layers,
    a plain HTTP server of wheels for locks that name a `url`."""

    def __init__(self, work, addr, registry_dir, served, url):
        from tests.proof import wheelimg, wheelset
        self.work, self.addr, self.registry_dir, self.served, self.url = work, addr, registry_dir, served, url
        self.wheels = work / "wheels"
        wheelset.write(wheelset.installed_wheels(), self.wheels)
        self.layers = wheelimg.Layers(work, self.wheels)


@pytest.fixture(scope="session")
def as_root():
    """The wheels proof runs pip in chroots and unpacks images as root: skipped, saying so,
    for any other user (CI runs as root)."""
    import os

    if os.geteuid() != 0:
        pytest.skip("the wheels proof needs root (chroot into unpacked images); CI runs it as root")


@pytest.fixture(scope="session")
def wheels_world(tmp_path_factory, as_root):
    from fixtures import registry as fixture_registry
    from tests.proof.pylock import WheelServer

    work = tmp_path_factory.mktemp("wheels")
    registry_dir = work / "registry"
    registry_dir.mkdir()
    served = work / "served"
    served.mkdir()
    addr, _ = fixture_registry.start(registry_dir)
    try:
        with WheelServer(served) as url:
            yield WheelsWorld(work, addr, registry_dir, served, url)
    finally:
        fixture_registry.stop(registry_dir)


class ReqWorld:
    """What every requirements-route proof test shares: the wheels proof's world, the index of
    `tests.proof.reqset` (all modes "ok" between tests), and the requirements layer per
    architecture (what the route's cases start from)."""

    def __init__(self, wheels_world, work, index):
        from tests.proof import reqset
        self.wheels_world, self.work, self.index = wheels_world, work, index
        self.present = {a: reqset.present_layer(wheels_world, a, work / a) for a in ("amd64", "arm64")}

    def push(self, repo: str, tag: str, arches=("amd64", "arm64"), env=None) -> dict:
        """The fixture image at REPO:TAG: Python root, pip's installed layer, the requirements
        layer; Env reqset.ENV unless ENV is given."""
        from tests.proof import reqset
        w = self.wheels_world
        return w.layers.push(w.addr, repo, tag, arches=arches, style="oci" if len(arches) > 1 else "single",
                             extra=lambda a: [self.present[a]], env=reqset.ENV if env is None else env)


@pytest.fixture(scope="session")
def req_world(wheels_world, tmp_path_factory):
    from tests.proof import pyindex, reqset

    from tests.proof import uvjudge

    work = tmp_path_factory.mktemp("requirements")
    # The tool's uv is the judge's (pinned), and this machine's uv settings never apply.
    saved = {k: os.environ.get(k) for k in ("RUNNER_PATCH_UV", "UV_NO_CONFIG")}
    os.environ.update(RUNNER_PATCH_UV=str(uvjudge.uv()), UV_NO_CONFIG="1")
    try:
        with pyindex.Index(reqset.write(work / "index")) as index:
            yield ReqWorld(wheels_world, work, index)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture()
def index(req_world):
    """The session's index, its modes "ok" again after the test."""
    yield req_world.index
    req_world.index.modes.update({k: "ok" for k in req_world.index.modes})
