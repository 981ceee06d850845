# Every entry point a person or CI uses. `make help` lists them.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/convergeplane/converge/internal/version.Version=$(VERSION)
# The default suite stays well under 20 minutes on 2 cores.
TEST_TIMEOUT ?= 20m
PKGS ?= ./...

.PHONY: help demo dev test test-race test-docker build lint bench soak postgres clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

# The demo wipes its own data dir at each start (never the one `make dev` keeps).
DEMO_DATA_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/converge-demo

demo: build postgres ## run the control plane on an embedded Postgres with the demo provider (a fresh database each run)
	CONVERGE_DATA_DIR="$(DEMO_DATA_DIR)" ./bin/converge dev --reset --demo

dev: build postgres ## run the control plane on an embedded Postgres (no demo)
	./bin/converge dev

test: postgres ## run the whole test suite against real Postgres (installs it if missing)
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

test-race: postgres ## the suite under the race detector (slower)
	$(GO) test -race -count=1 -timeout 40m $(PKGS)

# Opt-in: the Docker client and testcontainers are compiled in only under
# -tags testcontainers, so the default suite never needs Docker.
DOCKER_PKGS ?= ./integration/ ./cmd/converge/...

test-docker: ## the integration suite on Postgres and LocalStack containers (testcontainers-go); skipped where no Docker engine answers
	@mkdir -p bin/tools && $(GO) build -tags testcontainers -o bin/tools/dockerping ./internal/awstest/dockerping
	@if ! reason=$$(bin/tools/dockerping 2>&1); then \
		echo "test-docker: skipped: $$reason"; exit 0; fi; \
	CONVERGE_TEST_DOCKER=1 $(GO) test -tags testcontainers -count=1 -timeout $(TEST_TIMEOUT) $(DOCKER_PKGS)

build: ## build converge, conctl and the example provider into bin/
	@mkdir -p bin
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/converge ./cmd/conctl ./examples/...

# golangci-lint, pinned; installed into bin/tools by the first `make lint`.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := bin/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)

lint: $(GOLANGCI_LINT) ## golangci-lint (.golangci.yml: gofmt, go vet, staticcheck, errcheck, revive, gocritic, nolintlint)
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	@mkdir -p bin/tools
	GOBIN="$(CURDIR)/bin/tools" $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/tools/golangci-lint $@

bench: postgres ## benchmarks: engine, API apply, dispatch (figures are ratios to baselines in the same run)
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./integration/ ./dispatch/...
	$(GO) test -run '^$$' -bench BenchmarkApply -benchtime 5s -timeout 20m ./control/api/
	$(GO) test -run '^$$' -bench . -benchmem ./webhooksdk/ ./control/schema/

postgres: ## make sure PostgreSQL server binaries are installed (apt-get as root if not)
	@./scripts/ensure-postgres.sh >/dev/null

clean: ## remove build output
	rm -rf bin
