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
