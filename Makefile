# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The demo needs only the runtime's dependencies (about 200 MB); the tests add their tools.
DEMO_STAMP := $(VENV)/.demo-stamp

.PHONY: demo demo-real test testbed manifests lint typecheck unit quick bench clean image vc-scheduler-image kube-scheduler-image image-tools browser

$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python -m simulation

# The same demo on the real control plane (kube-apiserver, etcd, kube-scheduler: make testbed).
demo-real: $(STAMP) testbed
	$(BIN)/python -m simulation --real

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@unformatted="$$(gofmt -l kube_scheduler_plugin volcano_adapter benchmarks/floor_extender_go)"; \
	  test -z "$$unformatted" || { echo "gofmt -w these: $$unformatted"; exit 1; }

typecheck: $(STAMP)
	$(BIN)/mypy --strict agent chip_drivers chip_topology contract deviceplugin_api dra_driver image infra scheduler_core simulation testbed tests benchmarks

# The real components the tests run (testbed/versions.toml), built from their Go modules into
# .testbed/bin; what is built for the pinned versions is skipped.
testbed: $(STAMP)
	$(BIN)/python -m testbed.build

# daemonset/ rendered from the Helm chart (charts/ascend-npu), its one source.
manifests: $(STAMP) testbed
	$(BIN)/python -m testbed.manifests

# What the image's build and its test need from Debian (docs/image.md): installed when missing.
IMAGE_TOOLS := mmdebstrap skopeo qemu-aarch64-static
image-tools:
	@for tool in $(IMAGE_TOOLS); do command -v $$tool >/dev/null || missing=1; done; \
		[ -z "$$missing" ] || { apt-get update -q && apt-get install -y -q mmdebstrap skopeo qemu-user-static; }

# The browser the NPU map's tests drive (tests/integration/test_npu_map_browser.py): Debian's
# chromium, through Playwright without its browser download; installed when missing, as root.
browser:
	@command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }

# The container image for amd64 and arm64 (docs/image.md), without a Docker daemon; as root.
image: $(STAMP) image-tools
	$(BIN)/python -m image.build

# Volcano v1.12.0's vc-scheduler with the in-process adapter, for the chart's
# volcano.adapterImage (amd64; docs/image.md); as root.
vc-scheduler-image: $(STAMP) image-tools testbed
	$(BIN)/python -m image.vc_scheduler

kube-scheduler-image: $(STAMP) testbed
	$(BIN)/python -m image.kube_scheduler

# The tests wait on processes (control planes, clusters, schedulers) far more than they compute:
# they run on workers sized to that waiting, not to the cores (docs/testing.md has the times), a
# file to a worker, the slowest tier first (tests/conftest.py); the 20 slowest tests are named.
PYTEST_WORKERS ?= 4
PYTEST := $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20

unit: $(STAMP) testbed
	$(PYTEST)

# Everything but the tests on the real control plane (tests/real); kustomize still renders.
quick: $(STAMP) testbed
	$(PYTEST) --ignore=tests/real

test: testbed image-tools browser lint typecheck unit

bench: $(STAMP)
	$(BIN)/python -m benchmarks.placement_speed
	$(BIN)/python -m benchmarks.trace_replay
	$(BIN)/python -m benchmarks.agent_plugin
	$(BIN)/python -m benchmarks.handshake
	$(BIN)/python -m benchmarks.extender
	$(BIN)/python -m benchmarks.products
	$(BIN)/python -m benchmarks.network_locality
	$(BIN)/python -m benchmarks.place_command
	$(BIN)/python -m benchmarks.vnpu

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis .testbed
