# runner-patch: the README's commands. `make demo` runs the main job on a local fixture
# registry; `make test` runs every test (unit, registry integration, real-release proof,
# behavioural proof, and the real-engine check).

CARGO ?= cargo
PYTHON ?= python3
BIN := target/release/runner-patch
# `make dist`: a static Linux binary. For arm64, on an arm64 machine:
#   make dist DIST_TARGET=aarch64-unknown-linux-gnu DIST_ARCH=arm64
DIST_TARGET ?= x86_64-unknown-linux-gnu
DIST_ARCH ?= amd64
DIST_BIN := dist/runner-patch-linux-$(DIST_ARCH)
# `make image`: the tool's own image (buildah, no daemon), from what `make dist` left in dist/.
IMAGE ?= localhost/runner-patch
PLATFORMS ?= linux/$(DIST_ARCH)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
REVISION := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)

.PHONY: all build dist image demo demo-stop test test-rust test-proof test-proof-wheels verify-engine bench lint fmt clean

all: build

build:
	$(CARGO) build --release --locked

# Static (glibc linked in, no OpenSSL: rustls), stripped; `--target` keeps RUSTFLAGS off build
# scripts and proc macros, which must stay dynamic.
dist:
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --profile dist --locked --target $(DIST_TARGET)
	mkdir -p dist
	cp target/$(DIST_TARGET)/dist/runner-patch $(DIST_BIN).tmp
	mv $(DIST_BIN).tmp $(DIST_BIN)
	cd dist && sha256sum runner-patch-linux-$(DIST_ARCH) > runner-patch-linux-$(DIST_ARCH).sha256
	file $(DIST_BIN)

# A manifest list $(IMAGE):$(VERSION) with one image per platform in $(PLATFORMS) (each also
# tagged $(IMAGE):$(VERSION)-linux-<arch>); push it with
# `buildah manifest push --all $(IMAGE):$(VERSION) docker://REGISTRY/NAME:$(VERSION)`.
image: dist
	cp /etc/ssl/certs/ca-certificates.crt dist/ca-certificates.crt
	-buildah manifest rm $(IMAGE):$(VERSION) >/dev/null 2>&1
	for p in $(PLATFORMS); do \
		buildah build --quiet --platform "$$p" --manifest $(IMAGE):$(VERSION) \
			--tag $(IMAGE):$(VERSION)-$$(echo "$$p" | tr / -) \
			--build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
			-f Containerfile . || exit 1; \
	done
	buildah manifest inspect $(IMAGE):$(VERSION) >/dev/null
	@echo "image $(IMAGE):$(VERSION) ($(PLATFORMS))"

demo: build
	bash scripts/demo.sh

demo-stop:
	$(PYTHON) -m fixtures.registry stop --dir .demo

test: test-rust test-proof verify-engine

# The release tests (tests/it/release.rs) check what `make dist` and `make image` built.
test-rust: build image
	RUNNER_PATCH_REQUIRE_DIST=1 $(CARGO) test --release --locked

test-proof: build
	RUNNER_PATCH_BIN=$(CURDIR)/$(BIN) $(PYTHON) -m pytest -q tests/proof

# The `wheels` kind judged by pip in chroots of the unpacked images (part of test-proof too;
# needs root). The Python root and the lock writers are cached after the first run.
test-proof-wheels: build
	RUNNER_PATCH_BIN=$(CURDIR)/$(BIN) $(PYTHON) -m pytest -q tests/proof/test_wheels_harness.py \
		tests/proof/test_wheels_pip.py tests/proof/test_wheels_refusals.py \
		tests/proof/test_wheels_lifecycle.py tests/proof/test_wheels_locks.py \
		tests/proof/test_requirements_harness.py tests/proof/test_requirements_route.py \
		tests/proof/test_requirements_refusals.py tests/proof/test_requirements_lock.py \
		tests/proof/test_post_operations_packages.py tests/proof/test_compile_route.py

verify-engine: build
	bash tests/proof/verify_engine.sh

bench: build
	$(CARGO) build --release --locked --example layer_bench
	bash bench/run.sh

# The structure check runs last: it reports import cycles, long files and functions, and
# docs/architecture.md out of step with src/ (docs/architecture.md, "The structure check").
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --locked --all-targets -- -D warnings
	actionlint -no-color examples/github-actions/patch-runner.yml examples/github-actions/patch-with-action.yml examples/github-actions/build-wheels-for-a-patch.yml tests/workflows/action-local.yml
	$(PYTHON) scripts/doclinks.py --self-test
	$(PYTHON) scripts/doclinks.py
	$(PYTHON) scripts/structure.py --self-test
	$(PYTHON) scripts/structure.py

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	rm -rf .demo dist
