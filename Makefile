# runner-patch: the README's commands. `make demo` runs the main job on a local fixture
# registry; `make test` runs every test (unit, registry integration, real-release proof,
# behavioural proof, and the real-engine check).

CARGO ?= cargo
PYTHON ?= python3
BIN := target/release/runner-patch

.PHONY: all build demo demo-stop test test-rust test-proof verify-engine bench lint fmt clean

all: build

build:
	$(CARGO) build --release --locked

demo: build
	bash scripts/demo.sh

demo-stop:
	$(PYTHON) fixtures/registry.py stop --dir .demo

test: test-rust test-proof verify-engine

test-rust: build
	$(CARGO) test --release --locked

test-proof: build
	RUNNER_PATCH_BIN=$(CURDIR)/$(BIN) $(PYTHON) -m pytest -q tests/proof

verify-engine: build
	bash tests/proof/verify_engine.sh

bench: build
	bash bench/run.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --locked --all-targets -- -D warnings
	actionlint -no-color examples/github-actions/patch-runner.yml

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	rm -rf .demo
