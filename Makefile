# redrive — make targets. `make dev` runs everything on an embedded broker;
# `make test` runs every test against a real Apache Kafka broker it starts
# (scripts/kafka.sh's version, KAFKA_VERSION overrides); `make test-oldest`
# the core end-to-end tests against the oldest version supported.
SHELL := /bin/bash
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
GO ?= go
PKGS := ./...

.PHONY: build image deploy-check test test-oldest test-fast dev kafka-up kafka-down lint fuzz flowcheck bench soak image-oci image-check clean

# The same command the Dockerfile runs.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/redrive ./cmd/redrive

# The container image (deploy/Dockerfile, context: the repository root).
IMAGE ?= redrive:$(VERSION)
image:
	@command -v docker >/dev/null 2>&1 || { echo "make image: docker is not installed (without Docker: make image-oci, with buildah or podman)" >&2; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "make image: no Docker engine is reachable (docker info failed): start dockerd or point DOCKER_HOST at one, or make image-oci (buildah or podman)" >&2; exit 1; }
	docker build -f deploy/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) .

# The same image without Docker and without a base image: deploy/Containerfile
# (FROM scratch) built by buildah or podman from `make build`'s binary and
# the host's CA bundle, staged in bin/image. OCI_FLAGS are the builder's
# global options (e.g. --storage-driver vfs --root DIR).
OCI_BUILDER ?= $(shell command -v buildah 2>/dev/null || command -v podman 2>/dev/null)
OCI_FLAGS ?=
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
image-oci: build
	@[ -n "$(OCI_BUILDER)" ] || { echo "make image-oci: neither buildah nor podman is installed (apt-get install buildah)" >&2; exit 1; }
	@[ -s "$(CA_BUNDLE)" ] || { echo "make image-oci: no CA bundle at $(CA_BUNDLE) (apt-get install ca-certificates, or set CA_BUNDLE)" >&2; exit 1; }
	rm -rf bin/image && mkdir -p bin/image && cp bin/redrive bin/image/redrive && cp $(CA_BUNDLE) bin/image/ca-certificates.crt
	$(OCI_BUILDER) $(OCI_FLAGS) build -f deploy/Containerfile --build-arg VERSION=$(VERSION) -t $(IMAGE) bin/image

# Builds the image with `make image-oci` into a throw-away store and checks
# it: non-root user, entrypoint, version and source labels, only the binary
# and the CA bundle inside, and `redrive version` run inside it.
image-check:
	bash scripts/image-check.sh

# The deploy/ checks alone: Dockerfile vs `make build`, kustomize builds
# decoded strictly, promtool, dashboard and alert metric names.
deploy-check:
	$(GO) test -count=1 ./deploy/...

# Both test targets pipe `go test -json` into scripts/testsummary: the
# usual ok/FAIL lines and failed tests' output as they come, then the tests
# that skipped and why (a missing tool skips outside CI), the totals, the
# slowest packages and the wall time. Either side failing fails the target.
TEST_TIMEOUT ?= 14m
SUMMARY := $(GO) run ./scripts/testsummary

# Starts the broker (or uses the one `make kafka-up` left running), runs the
# whole suite with the race detector against it, and stops the broker it
# started whatever the tests did.
test:
	@set -o pipefail; \
	started=1; bash scripts/kafka.sh status >/dev/null 2>&1 && started=0; \
	line=$$(bash scripts/kafka.sh up | tail -1) || exit 1; \
	eval "$$line"; \
	echo "testing against the real broker at $$KAFKA_BROKERS"; \
	start=$$(date +%s); \
	REDRIVE_TEST_BROKERS=$$KAFKA_BROKERS $(GO) test -json -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS) 2>&1 | \
	  $(SUMMARY) -start $$start -timeout $(TEST_TIMEOUT); \
	rc=$$?; \
	if [ $$started = 1 ]; then bash scripts/kafka.sh down; fi; \
	exit $$rc

# The core end-to-end tests against the oldest broker redrive supports for
# consumer groups (Kafka OLDEST_KAFKA_VERSION), on a broker of its own
# (OLDEST_KAFKA_DIR, beside the one `make test` uses), which it stops
# afterwards whatever the tests did. KAFKA_VERSION is exported so that the
# brokers the crash suite starts for itself are that version too. -skip
# '^TestShare' leaves out the share-group tests of these packages (their
# names start with TestShare): share groups need Kafka 4.2 or newer; and
# TestFlowCheck, whose seeds draw share scenarios too, is about redrive's
# invariants, not the broker's version: `make test` runs it.
OLDEST_KAFKA_VERSION ?= 4.1.1
OLDEST_KAFKA_DIR ?= /tmp/redrive-kafka-oldest
OLDEST_PKGS := ./cmd/redrive/e2e/crash/ ./cmd/redrive/e2e/eos/ ./processor/
test-oldest:
	@set -o pipefail; export KAFKA_VERSION=$(OLDEST_KAFKA_VERSION) REDRIVE_KAFKA_DIR=$(OLDEST_KAFKA_DIR); \
	line=$$(bash scripts/kafka.sh up | tail -1) || exit 1; \
	eval "$$line"; \
	echo "testing against Kafka $$KAFKA_VERSION at $$KAFKA_BROKERS"; \
	start=$$(date +%s); \
	REDRIVE_TEST_BROKERS=$$KAFKA_BROKERS $(GO) test -json -race -count=1 -timeout $(TEST_TIMEOUT) -skip '^TestShare|^TestFlowCheck$$' $(OLDEST_PKGS) 2>&1 | \
	  $(SUMMARY) -start $$start -timeout $(TEST_TIMEOUT); \
	rc=$$?; \
	bash scripts/kafka.sh down; \
	exit $$rc

# The suite on the embedded kfake broker: fast, no Java.
test-fast:
	@set -o pipefail; start=$$(date +%s); \
	$(GO) test -json -count=1 -timeout 10m $(PKGS) 2>&1 | $(SUMMARY) -start $$start -timeout 10m

dev:
	$(GO) run ./cmd/redrive dev

# Port 9092 when it is free, the address the examples name. The last line
# is one redrive reads: eval "$$(make -s kafka-up)" sets it in your shell.
kafka-up:
	@line=$$(KAFKA_PORT=$${KAFKA_PORT:-9092} bash scripts/kafka.sh up | tail -1) || exit 1; \
	echo "$$line"; \
	echo "export REDRIVE_BROKERS=$${line#KAFKA_BROKERS=}"

kafka-down:
	@bash scripts/kafka.sh down

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# A short run of every fuzz target (FUZZTIME each).
FUZZTIME ?= 10s
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list 'Fuzz.*' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# The randomized checker of the processor's invariants (docs/testing.md,
# "The flow checker"): SEEDS new scenarios from FLOWCHECK_FIRST (default:
# drawn from the clock and printed), FLOWCHECK_PARALLEL at a time, with
# -race, against the real broker (started and stopped like `make test`'s).
# A failure prints its seed and the command that replays it. `make test`
# runs the fixed seeds of processor/flowcheck_test.go.
SEEDS ?= 20
FLOWCHECK_PARALLEL ?= 4
flowcheck:
	@set -o pipefail; \
	started=1; bash scripts/kafka.sh status >/dev/null 2>&1 && started=0; \
	line=$$(bash scripts/kafka.sh up | tail -1) || exit 1; \
	eval "$$line"; \
	REDRIVE_TEST_BROKERS=$$KAFKA_BROKERS FLOWCHECK_SEEDS=$(SEEDS) FLOWCHECK_FIRST=$(FLOWCHECK_FIRST) \
	  $(GO) test -race -count=1 -timeout 60m -parallel $(FLOWCHECK_PARALLEL) -run '^TestFlowCheck$$' ./processor/; \
	rc=$$?; \
	if [ $$started = 1 ]; then bash scripts/kafka.sh down; fi; \
	exit $$rc

# Benchmarks against the real broker, side by side with the raw franz-go
# ceiling measured in the same run: one table (see BENCHMARKS.md). Each
# scenario runs in a test process of its own (peak RSS is its own).
BENCH_RECORDS ?= 500000
BENCH_SCALE_RECORDS ?= 300000
BENCH_SLOW_RECORDS ?= 30000
BENCH_DEADLETTERS ?= 1000000
bench:
	@set -o pipefail; \
	started=1; bash scripts/kafka.sh status >/dev/null 2>&1 && started=0; \
	line=$$(bash scripts/kafka.sh up | tail -1) || exit 1; \
	eval "$$line"; \
	REDRIVE_TEST_BROKERS=$$KAFKA_BROKERS $(GO) run ./bench -records $(BENCH_RECORDS) -scale-records $(BENCH_SCALE_RECORDS) \
	  -slow-records $(BENCH_SLOW_RECORDS) -deadletters $(BENCH_DEADLETTERS); \
	rc=$$?; \
	if [ $$started = 1 ]; then bash scripts/kafka.sh down; fi; \
	exit $$rc

# Soak: the real `redrive process` binary (`make build`'s) for SOAK_DURATION
# at SOAK_RATE requests/s (1 % permanent, 10 % transient, 5 % not-ready
# answers) against a broker of its own (REDRIVE_KAFKA_DIR=$(SOAK_KAFKA_DIR),
# not the one `make test` uses), which it stops afterwards; prints RSS,
# goroutines, open files, lateness p99, lost and duplicates (BENCHMARKS.md,
# "Soak"). Not part of `make test`.
SOAK_DURATION ?= 30m
SOAK_RATE ?= 500
SOAK_KAFKA_DIR ?= /tmp/redrive-kafka-soak
soak: build
	@set -o pipefail; export REDRIVE_KAFKA_DIR=$(SOAK_KAFKA_DIR); \
	line=$$(bash scripts/kafka.sh up | tail -1) || exit 1; \
	eval "$$line"; \
	REDRIVE_TEST_BROKERS=$$KAFKA_BROKERS $(GO) run ./bench/soak -bin bin/redrive -duration $(SOAK_DURATION) -rate $(SOAK_RATE) $(SOAK_FLAGS); \
	rc=$$?; \
	bash scripts/kafka.sh down; \
	exit $$rc

clean:
	rm -rf bin .dev
