# hyperplan — the two commands a new machine needs:
#   make demo   start a planner and 8 agents on 127.0.0.1, show the fabric and nodes, place the
#               example jobs, stop everything (`hyperplan demo`)
#   make test   run the whole test suite
# Both first install the system packages the build needs (Debian/Ubuntu, via apt-get).

APT_PACKAGES := pkg-config libhwloc-dev libudev-dev bzip2 protobuf-compiler etcd-server \
  mpich libmpich-dev openmpi-bin libopenmpi-dev python3-mpi4py python3-prometheus-client prometheus chromium faketime \
  postgresql
CARGO ?= cargo

.PHONY: deps demo simulate test test-future bench lint ci

deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing system packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

demo: deps
	$(CARGO) build -q --workspace --bins
	$(CARGO) run -q -p hyperplan -- demo

simulate: deps
	$(CARGO) run -q -p hyperplan -- simulate --cluster examples/cluster.yaml --jobs examples/jobs.yaml

test: deps
	$(CARGO) test --workspace

# The core's and the planner's tests once more, five years ahead (libfaketime under each test
# binary; monotonic time left alone): no test may carry a date, no decision may read the wall
# clock. The etcd tests are left out: etcd, a Go program, keeps the real clock, and the
# certificates made at the fake date are not yet valid to it.
HOST_TRIPLE_VAR := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')
FUTURE := env FAKETIME_DONT_FAKE_MONOTONIC=1 CARGO_TARGET_$(HOST_TRIPLE_VAR)_RUNNER="faketime -f +1826d"
test-future: deps
	$(FUTURE) $(CARGO) test -p hyperplan-core --lib --tests
	$(FUTURE) $(CARGO) test -p hyperplan-planner --lib

bench: deps
	$(CARGO) bench --bench placement

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) fmt --all --check

ci: test test-future lint
