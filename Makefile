# Every entry point a person or CI uses. `make help` lists them.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/convergeplane/converge/internal/version.Version=$(VERSION)
LDFLAGS += -X github.com/convergeplane/converge/internal/version.Revision=$(REVISION)
# The default suite stays well under 15 minutes on 2 cores; RACE=1 runs it
# under the race detector (slower: CI's one run of the suite).
RACE ?=
TEST_TIMEOUT ?= $(if $(RACE),40m,20m)
PKGS ?= ./...
# The AWS Lambda Runtime Interface Emulator, pinned; installed into bin/tools by the
# first `make test`, which hands it to the functions' end-to-end test.
RIE_VERSION ?= v0.0.0-20261030222936-bef5c4ba774d
RIE := bin/tools/aws-lambda-rie-$(RIE_VERSION)

.PHONY: help demo demo-quickstart demo-unhealthy demo-datadriven dev vectors test test-unit test-race test-docker build functions lint bench bench-demo bench-peers bench-sdks bench-scale soak chaos chaos-short fuzz mutate postgres clean check-sam infra-synth test-infra rehearse-aws image image-push test-image ui ui-types test-ui bench-ui chromium python-tools docs-viewer lint-openapi

help: ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

# The demo wipes its own data dir at each start (never the one `make dev` keeps).
DEMO_DATA_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/converge-demo

# The classic demo's bill of materials (small, large, updated) and its
# providers' transient failure rate (0 to below 1).
BOM ?= small
FAULT_RATE ?= 0

demo: build postgres ## the classic demo on an embedded Postgres, a fresh database each run (BOM=small|large|updated, FAULT_RATE=0.25)
	CONVERGE_DATA_DIR="$(DEMO_DATA_DIR)" ./bin/converge dev --reset --demo=classic --bom=$(BOM) --fault-rate=$(FAULT_RATE)

demo-quickstart: build postgres ## the smaller quickstart demo: a five-resource site
	CONVERGE_DATA_DIR="$(DEMO_DATA_DIR)" ./bin/converge dev --reset --demo=quickstart

# How long the unhealthy demo's cdn kind stays unready once the cdn parked.
READY_AFTER ?= 10s

demo-datadriven: build postgres ## composition as data: a stdcel root fanning out into stdterraform, stdstarlark and stdshell children (bin/stdprovider), then an updated spec (needs terraform on PATH)
	CONVERGE_DATA_DIR="$(DEMO_DATA_DIR)" ./bin/converge dev --reset --demo=datadriven

demo-unhealthy: build postgres ## the quickstart site with its cdn kind reporting not ready: the cdn parks, the buckets converge, then cdn turns ready (READY_AFTER=10s)
	CONVERGE_DATA_DIR="$(DEMO_DATA_DIR)" ./bin/converge dev --reset --demo=unhealthy --ready-after=$(READY_AFTER)

dev: build postgres ## run the control plane on an embedded Postgres (no demo)
	./bin/converge dev

# go test and golangci-lint print nothing while they compile, minutes on a
# cold build cache. compile first builds the packages and everything their
# tests import with go build -v, which names each package it compiles and
# none it finds in the cache: counted, that is progress on a cold cache and
# a single line on a warm one. $(1) is the target, $(2) build flags.
define compile
	@echo "$(1): compiling what the build cache lacks (a cold cache takes several minutes)"
	@set -o pipefail; pkgs=$$($(GO) list -deps -test -f '{{if and (not .Standard) .GoFiles}}{{.ImportPath}}{{end}}' $(PKGS) | grep -v ' \|\.test$$') || exit 1; \
	$(GO) build $(2) -v $$pkgs 2>&1 | awk 'function say() { print "  " n " package" (n == 1 ? "" : "s") " compiled" } \
	  /^[^ :]+$$/ { if (++n % 50 == 0) say(); next } { print } END { if (n % 50) say() }'
endef

test: postgres $(RIE) python-tools $(if $(NPM),docs-viewer) ## run the whole test suite against real Postgres and the Lambda emulator (installs them and the Python SDK's pytest and mypy if missing, builds the /docs viewer when npm is present; RACE=1: under the race detector)
	$(call compile,$@,$(if $(RACE),-race))
	AWS_LAMBDA_RIE="$(CURDIR)/$(RIE)" $(GO) test $(if $(RACE),-race) -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

test-race: ## the suite under the race detector: make test RACE=1
	$(MAKE) test RACE=1

# The edit-run loop's tier: no PostgreSQL, browser or emulator, and go
# test's cache is kept, so a package whose code did not change is not run
# again. scripts/unit-packages.sh finds the packages.
test-unit: python-tools ## the fast tier: every package whose tests need no PostgreSQL, browser or Lambda emulator (~25 s warm, less when little changed)
	$(GO) test $$(./scripts/unit-packages.sh)

# Opt-in: the Docker client and testcontainers are compiled in only under
# -tags testcontainers, so the default suite never needs Docker.
DOCKER_PKGS ?= ./integration/ ./cmd/converge/...

test-docker: ## the integration suite on Postgres and LocalStack containers (testcontainers-go); skipped where no Docker engine answers
	@mkdir -p bin/tools && $(GO) build -tags testcontainers -o bin/tools/dockerping ./internal/testkit/awstest/dockerping
	@if ! reason=$$(bin/tools/dockerping 2>&1); then \
		echo "test-docker: skipped: $$reason"; exit 0; fi; \
	CONVERGE_TEST_DOCKER=1 $(GO) test -tags testcontainers -count=1 -timeout $(TEST_TIMEOUT) $(DOCKER_PKGS)

# The web console (ui/, see ui/README.md): npm builds it into ui/site/dist,
# which the next go build of converge embeds. Without npm, converge embeds a
# page saying how to build it, so Go alone still builds everything.
NPM := $(shell command -v npm 2>/dev/null)
UI_DIST := ui/site/dist/index.html
UI_SRC := $(shell find ui/src ui/public -type f 2>/dev/null) ui/index.html ui/vite.config.ts ui/tsconfig.json ui/package.json

ui: $(UI_DIST) docs-viewer ## build the web console into ui/site/dist (npm ci, then vite build) and the /docs viewer, embedded by the next go build

ui/node_modules/.package-lock.json: ui/package-lock.json
	cd ui && npm ci --no-audit --no-fund

$(UI_DIST): ui/node_modules/.package-lock.json $(UI_SRC)
	cd ui && npm run build

# The API reference viewer at /docs (ui/apidocs): Swagger UI's prebuilt files from npm
# (swagger-ui-dist, pinned by its lock file; --ignore-scripts skips its telemetry
# dependency's install script) beside ui/apidocs/src's page, copied into
# ui/apidocs/site/dist, which the next go build embeds; without it /docs says how to
# build it. `make test` and `make ui` build it when npm is present.
APIDOCS_DIST := ui/apidocs/site/dist/index.html

docs-viewer: $(APIDOCS_DIST) ## build the API reference viewer served at /docs into ui/apidocs/site/dist (npm ci of swagger-ui-dist), embedded by the next go build

ui/apidocs/node_modules/.package-lock.json: ui/apidocs/package-lock.json
	cd ui/apidocs && npm ci --ignore-scripts --no-audit --no-fund

$(APIDOCS_DIST): ui/apidocs/node_modules/.package-lock.json $(wildcard ui/apidocs/src/*)
	rm -rf ui/apidocs/site/dist && mkdir -p ui/apidocs/site/dist
	cd ui/apidocs/node_modules/swagger-ui-dist && cp swagger-ui-bundle.js swagger-ui.css LICENSE NOTICE ../../site/dist/
	cp ui/apidocs/src/docs.js ui/apidocs/src/index.html ui/apidocs/site/dist/

# redocly lint (npm @redocly/cli, pinned in tools/redocly) of ui/openapi.json, the
# document the code builds without kinds (TestStaticOpenAPI keeps it current), with
# Redocly's recommended rules as redocly.yaml adjusts them. An error fails.
lint-openapi: tools/redocly/node_modules/.package-lock.json ## redocly lint of the OpenAPI document (ui/openapi.json) with the recommended rules and redocly.yaml (installs Redocly CLI into tools/redocly)
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true tools/redocly/node_modules/.bin/redocly lint --config redocly.yaml ui/openapi.json

tools/redocly/node_modules/.package-lock.json: tools/redocly/package-lock.json
	cd tools/redocly && npm ci --ignore-scripts --no-audit --no-fund

# The console's API types: control/api's TestStaticOpenAPI writes the API's
# OpenAPI document without kinds to ui/openapi.json (and, in make test,
# fails when it is stale); openapi-typescript makes ui/src/api-types.ts of
# it (and, in make test-ui, check-types fails when that is stale).
# The conformance vectors (protocol/vectors/README.md) are generated from the
# dispatcher's code; TestVectorsCurrent, in make test, fails when they are stale.
vectors: ## regenerate the protocol's conformance vectors in protocol/vectors from the dispatcher's code
	$(GO) run ./protocol/vectorgen -out protocol/vectors

ui-types: ui/node_modules/.package-lock.json ## regenerate ui/openapi.json from the API's code, then the console's TypeScript types from it
	UPDATE_OPENAPI=1 $(GO) test -count=1 -run '^TestStaticOpenAPI$$' ./control/api/
	cd ui && npm run --silent types

build: $(if $(NPM),ui) ## build converge (with the console when npm is present), conctl, stdprovider and the example providers into bin/
	@mkdir -p bin
	@$(if $(NPM),,echo "build: npm is missing: converge will serve pages saying how to build the console (make ui) and the /docs viewer (make docs-viewer)")
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/converge ./cmd/conctl ./cmd/stdprovider ./examples/...

# The converge OCI image, built without Docker by internal/image (go-containerregistry):
# for each of IMAGE_PLATFORMS a static converge (CGO_ENABLED=0, the console embedded,
# Go's time zone data in it through -tags timetzdata) on an empty base with Mozilla's
# CA roots, the nonroot user (65532) and no shell, into the OCI layout bin/image/oci
# (one image index). Its dates are SOURCE_DATE_EPOCH, else the commit's time, and the
# binaries carry no VCS stamp (-buildvcs=false; the revision is the image's label), so
# one commit builds the same bytes wherever it is checked out.
# RDS_CA_BUNDLE (a file or an https URL) goes in at /etc/ssl/certs/rds-global-bundle.pem,
# infra/'s sslrootcert; where it cannot be had the image is built without it, with a
# warning, and image-push refuses it unless IMAGE_ALLOW_NO_RDS_CA=1.
IMAGE_PLATFORMS ?= linux/arm64 linux/amd64
IMAGE_SOURCE ?= https://github.com/convergeplane/converge
RDS_CA_BUNDLE ?= https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE ?=
IMAGE_ALLOW_NO_RDS_CA ?=

image: ui ## build the converge OCI image (linux/arm64 and linux/amd64, no Docker) into bin/image/oci (RDS_CA_BUNDLE=file or URL, SOURCE_DATE_EPOCH)
	@set -e; rm -rf bin/image; mkdir -p bin/image; bins=; for p in $(IMAGE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; out=bin/image/converge-$$os-$$arch; echo "image: $$out"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -buildvcs=false -tags timetzdata -ldflags "-s -w $(LDFLAGS)" -o $$out ./cmd/converge; \
	  bins="$$bins -binary $$p=$$out"; done; \
	$(GO) run ./internal/image build -out bin/image/oci $$bins -version "$(VERSION)" -source "$(IMAGE_SOURCE)" \
	  -revision "$(IMAGE_REVISION)" -created "$(SOURCE_DATE_EPOCH)" -rds-ca "$(RDS_CA_BUNDLE)"

image-push: ## push the image make image wrote to IMAGE=<registry>/<repo>:<tag> (IMAGE_PASSWORD, e.g. from aws ecr get-login-password, else the docker keychain)
	@[ -n "$(IMAGE)" ] || { echo "image-push: IMAGE=<registry>/<repo>:<tag> is required" >&2; exit 1; }
	$(GO) run ./internal/image push -layout bin/image/oci -image "$(IMAGE)" $(if $(IMAGE_ALLOW_NO_RDS_CA),-allow-no-rds-ca)

test-image: postgres image ## make image, then its test: the config, the files, no shell, a static binary, and the amd64 binary run from it (converge version, converge dev to /readyz)
	IMAGE_LAYOUT="$(CURDIR)/bin/image/oci" $(GO) test -count=1 -timeout 15m -run '^TestImage$$' -v ./internal/image/

# The Lambda functions in functions/: one zip per function and architecture for the
# provided.al2023 runtime, the executable named bootstrap inside. lambda.norpc drops
# aws-lambda-go's legacy RPC mode, which provided runtimes never use.
FUNCTION_ARCHS ?= arm64 amd64

# A Python function (a folder with handler.py) is pure Python: one zip of its folder,
# symlinks resolved (its converge_provider is sdk/python's), for either architecture.
# A Node function (a folder with package.json) is pure JavaScript too: its files, symlinks
# resolved, and node_modules holding its runtime dependencies, the TypeScript SDK among
# them as npm pack makes it (built, without its dev dependencies), in one <name>.zip.
functions: ## build each Lambda function in functions/ into bin/functions/<name>-<arch>.zip (a Python or Node one into <name>.zip)
	@command -v zip >/dev/null || { echo "make functions: zip is missing (apt-get install zip)" >&2; exit 1; }
	@set -e; mkdir -p bin/functions; for dir in functions/*/; do name=$$(basename "$$dir"); \
	  if [ -f "$$dir/package.json" ]; then out="$(CURDIR)/bin/functions/$$name.zip"; rm -f "$$out"; \
	    stage=$$(mktemp -d); find "$$dir" -maxdepth 1 -type f -o -maxdepth 1 -type l | grep -v node_modules | xargs -I{} cp -L {} "$$stage/"; \
	    (cd sdk/typescript && npm ci --no-audit --no-fund >/dev/null && npm pack --silent --pack-destination "$$stage" >/dev/null); \
	    (cd "$$stage" && npm pkg set "dependencies.@convergeplane/provider-sdk=file:./$$(ls *.tgz)" && \
	      npm install --omit=dev --no-package-lock --no-audit --no-fund >/dev/null && rm -f *.tgz .gitignore package-lock.json && zip -q -r -X "$$out" .); \
	    rm -rf "$$stage"; echo "bin/functions/$$name.zip"; continue; fi; \
	  if [ -f "$$dir/handler.py" ]; then out="$(CURDIR)/bin/functions/$$name.zip"; rm -f "$$out"; \
	    (cd "$$dir" && zip -q -r -X "$$out" . -x '*__pycache__*'); echo "bin/functions/$$name.zip"; continue; fi; \
	  for arch in $(FUNCTION_ARCHS); do out="bin/functions/$$name-$$arch"; \
	    CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -tags lambda.norpc -trimpath -ldflags "-s -w" -o "$$out/bootstrap" "./$$dir"; \
	    rm -f "$$out.zip"; (cd "$$out" && zip -q -X "../$$name-$$arch.zip" bootstrap); echo "$$out.zip"; \
	  done; done

# The AWS Lambda Runtime Interface Emulator (see RIE above).
$(RIE):
	@mkdir -p bin/tools
	@echo "installing the Lambda emulator $(RIE_VERSION) into bin/tools (once; a minute or two)"
	GOBIN="$(CURDIR)/bin/tools" $(GO) install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)
	mv bin/tools/aws-lambda-rie $@

# golangci-lint, pinned; installed into bin/tools by the first `make lint`.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := bin/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)

lint: $(GOLANGCI_LINT) ## no tracked binaries or big files (scripts/check-tracked.sh), no measured figures in code comments (scripts/check-comment-figures.sh), then golangci-lint (.golangci.yml: gofmt, go vet, staticcheck, errcheck, revive, gocritic, nolintlint), and go vet of bench/peers (its own module)
	./scripts/check-tracked.sh
	./scripts/check-comment-figures.sh
	$(call compile,$@)
	@echo "lint: golangci-lint run ./... (its first run analyses every package: a few minutes)"
	$(GOLANGCI_LINT) run ./...
	@echo "lint: go vet of bench/peers (compiled, never run, by CI)"
	cd bench/peers && $(GO) vet ./...

$(GOLANGCI_LINT):
	@mkdir -p bin/tools
	@echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into bin/tools (once; several minutes)"
	GOBIN="$(CURDIR)/bin/tools" $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/tools/golangci-lint $@

bench: postgres ## benchmarks: engine, API apply, dispatch (figures are ratios to baselines in the same run)
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./integration/ ./dispatch/...
	$(GO) test -run '^$$' -bench BenchmarkApply -benchtime 5s -timeout 20m ./control/api/
	$(GO) test -run '^$$' -bench . -benchmem ./webhooksdk/ ./control/schema/ ./providers/stdio/

# The Python SDK's checks (sdk/python, run by its Go test) use Debian's python3
# with its pytest and mypy, installed with apt (as root) when missing: PyPI is
# not needed.
python-tools:
	@/usr/bin/python3 -c 'import pytest, mypy' 2>/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pytest python3-mypy >/dev/null; } || \
	  { echo "python-tools: /usr/bin/python3 lacks pytest or mypy and cannot install them (run as root, or apt-get install python3-pytest python3-mypy)" >&2; exit 1; }

# A browser for the console's tests: Debian's chromium, installed with apt
# (as root) when no Chromium or Chrome is on PATH.
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  { echo "chromium: no Chromium found and cannot install one (run as root, or apt-get install chromium)" >&2; exit 1; }

test-ui: postgres ui chromium ## the console's tests: its API types are current, its server parts, then end to end in a real headless Chromium (builds the console, installs chromium)
	cd ui && npm run --silent check-types
	$(GO) test -count=1 -timeout 10m -run 'Console|EventStream|IdleStream|Topology|FilesAlwaysHaveAnIndex|DocsViewer' ./ui/ ./control/api/ ./integration/

# Outside `make test-ui`: 100,000 resources and the large BOM take minutes.
bench-ui: postgres ui chromium ## the console's performance figures in a real Chromium (100k resources, the 5,400-node graph, idle cost)
	CONSOLE_BENCH=1 $(GO) test -count=1 -timeout 30m -run TestConsolePerformance -v ./integration/

# Outside `make test`: it builds and runs the classic provider and takes minutes.
bench-demo: postgres ## the classic demo's large BOM against as many no-op leaves, same run (issue #15)
	$(GO) test -run '^$$' -bench BenchmarkClassicDemo -benchtime 1x -timeout 45m ./integration/

# Each SDK's serving overhead per task, single and batch of 32, the Go SDK's
# beside the TypeScript and Python SDKs' in the same run (internal/sdkbench;
# an SDK whose bench server does not exist is skipped). The TypeScript SDK is
# built first when it is there. SDKBENCH_FLAGS: e.g. -rounds 9 -singles 5000.
SDKBENCH_FLAGS ?=

bench-sdks: ## each SDK's serving overhead per task (HTTP, single and batch of 32) beside the Go SDK's, same run (SDKBENCH_FLAGS)
	@if [ -f sdk/typescript/package.json ]; then \
	  cd sdk/typescript && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run --silent build --if-present; fi
	$(GO) run ./internal/sdkbench $(SDKBENCH_FLAGS)

# The peer benchmark (issue #41): River beside the engine on the same server,
# alternated pairs. bench/peers is its own module, so River is no dependency
# of the product. PEERS_FLAGS: e.g. -peers.pairs=5, -peers.sweep.
PEERS_FLAGS ?=

bench-peers: postgres ## River (no-op and a signed-POST worker) beside the engine's leaves and HTTP paths, same server, alternated pairs, the issue's goal ratios (PEERS_FLAGS)
	cd bench/peers && $(GO) test -run '^$$' -bench Peers -benchtime 1x -timeout 30m . $(PEERS_FLAGS)

# The million (issue #13): SCALE_N leaves through the bulk API, converged over
# HTTP with batched deliveries by a real converge process.
SCALE_N ?= 1000000
SCALE_MAX_BATCH ?= 32

bench-scale: postgres ## 1M leaves created through the bulk API and converged over HTTP, batched (SCALE_N, SCALE_MAX_BATCH)
	SCALE_N=$(SCALE_N) SCALE_MAX_BATCH=$(SCALE_MAX_BATCH) $(GO) test -run '^$$' -bench BenchmarkScale -benchtime 1x -timeout 3h ./integration/

# The chaos suite (issue #14, docs/operations.md "Chaos suite"): real converge
# processes, PostgreSQL and a faulty provider, killed, restarted and cut off
# while CHAOS_RESOURCES converge; CHAOS_SEED=N replays a run's fault schedule.
CHAOS_RESOURCES ?= 3000
CHAOS_SEED ?=

chaos: postgres ## the chaos suite, ~10 min: a clean run, then one under faults, then its invariants (CHAOS_RESOURCES, CHAOS_SEED)
	CHAOS=1 CHAOS_RESOURCES=$(CHAOS_RESOURCES) CHAOS_SEED=$(CHAOS_SEED) $(GO) test -count=1 -v -run 'TestChaos$$' -timeout 40m ./chaos/

chaos-short: postgres ## the chaos suite for CI, under 5 min: 600 resources, every fault type once (CHAOS_SEED)
	CHAOS=1 CHAOS_SHORT=1 CHAOS_SEED=$(CHAOS_SEED) $(GO) test -count=1 -v -run 'TestChaos$$' -timeout 15m ./chaos/

# cfn-lint checks template.yaml (expanding the SAM transform itself) and the
# plain CloudFormation scripts/sam-translate.py makes of it with
# aws-sam-translator, in bin/sam/, each with the rules of
# scripts/cfn-lint-rules/ (every function: tracing, log group with retention,
# on-failure destination, reserved concurrency, alarms; cfn-lint-serverless's
# Lambda rules, which are not installable here), whose own test then breaks
# the translation one setting at a time. Warnings fail too: both
# templates have none, and one to accept goes in the template's cfn-lint
# Metadata with its reason. `make test` checks template.yaml's IAM.
SAM_LINT = cfn-lint --non-zero-exit-code warning --append-rules scripts/cfn-lint-rules --
check-sam: ## cfn-lint template.yaml and its aws-sam-translator translation (bin/sam/template.json) with the serverless rules of scripts/cfn-lint-rules (skipped with a message where either is absent)
	@if ! command -v cfn-lint >/dev/null; then echo "check-sam: SKIPPED, cfn-lint is not installed (pip install cfn-lint)"; exit 0; fi; \
	$(SAM_LINT) template.yaml || exit 1; echo "check-sam: template.yaml passes cfn-lint $$(cfn-lint --version | cut -d' ' -f2) and scripts/cfn-lint-rules"; \
	if ! python3 -c 'import samtranslator, cfnlint' 2>/dev/null; then echo "check-sam: translation SKIPPED, python3 cannot import aws-sam-translator and cfn-lint (pip install cfn-lint, which brings both)"; exit 0; fi; \
	mkdir -p bin/sam && python3 scripts/sam-translate.py template.yaml >bin/sam/template.json && $(SAM_LINT) bin/sam/template.json || exit 1; \
	echo "check-sam: bin/sam/template.json (aws-sam-translator $$(python3 -c 'import samtranslator; print(samtranslator.__version__)')) passes cfn-lint and scripts/cfn-lint-rules"; \
	python3 scripts/test-cfn-lint-rules.py bin/sam/template.json

# infra/ is its own Go module (the CDK bindings are ~280 MB): `make build` and
# `make test` never compile it. The app runs through jsii, which needs Node.
# Synthesis here needs no cdk CLI: the app writes the cloud assembly itself.
INFRA_CERT ?= arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-0000-0000-000000000000
INFRA_DOMAIN ?= converge.example.com
# A stand-in ECR image URI: synthesis and cfn-lint never pull it (deploy with
# -c imageUri=… of the image make image built and you pushed).
INFRA_IMAGE ?= 123456789012.dkr.ecr.us-east-1.amazonaws.com/converge:synth
INFRA_REGION ?= us-east-1
PROVIDER_ZIP := bin/functions/quickstart-arm64.zip
# jsii prints a banner on every run that Node 20, this machine's, is past its
# end of life; it works, and the banner buried each CI log's real output.
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1

infra-synth: ## synthesize the CDK stack into infra/cdk.out and cfn-lint it (INFRA_CERT, INFRA_DOMAIN, INFRA_IMAGE, INFRA_REGION)
	@placeholder=false; if [ ! -f $(PROVIDER_ZIP) ]; then placeholder=true; \
	  echo "infra-synth: $(PROVIDER_ZIP) is absent (make functions builds it): synthesizing with the placeholder provider"; fi; \
	cd infra && rm -rf cdk.out && CDK_OUTDIR=cdk.out CDK_DEFAULT_REGION=$(INFRA_REGION) \
	  CDK_CONTEXT_JSON="{\"certificateArn\":\"$(INFRA_CERT)\",\"domainName\":\"$(INFRA_DOMAIN)\",\"imageUri\":\"$(INFRA_IMAGE)\",\"placeholderProvider\":\"$$placeholder\"}" \
	  $(GO) run .
	@if command -v cfn-lint >/dev/null; then cfn-lint --non-zero-exit-code error infra/cdk.out/Converge.template.json && echo "infra-synth: infra/cdk.out/Converge.template.json passes cfn-lint"; \
	else echo "infra-synth: cfn-lint SKIPPED (not installed)"; fi

test-infra: ## the CDK stack's assertion tests (slow to compile cold; not part of make test)
	cd infra && $(GO) test -count=1 -timeout 20m ./...

# deploy/observability (its README): the Grafana dashboard and the
# Prometheus rules, parsed with Prometheus' own rulefmt and PromQL parser in
# a module of their own, which keeps prometheus/prometheus out of the
# product's go.mod. It also checks metrics.txt lists every metric they name
# (UPDATE=1 rewrites it); make test's TestObservabilityMetricsServed finds
# each in a running converge's /metrics.
.PHONY: test-observability
test-observability: ## parse deploy/observability's rules and dashboard with Prometheus' parsers; metrics.txt lists the metrics they name (UPDATE=1 rewrites it)
	cd deploy/observability && $(GO) test -count=1 $(if $(UPDATE),-run TestMetricsList -update) ./...

# The deploy rehearsed offline (infra/rehearse/README.md): the CDK stack,
# synthesized by the test with infra-synth's context but a certificate moto
# issues, and template.yaml through scripts/sam-translate.py, created,
# updated and deleted in moto_server's CloudFormation. Function packages
# from `make functions` when built, placeholders otherwise. REHEARSE_REPORT
# gets the table of resource types moto did and did not create.
REHEARSE_REPORT ?= infra/rehearse-report.md

rehearse-aws: ## deploy, update and delete the CDK and SAM stacks in moto_server's CloudFormation, checking each resource through its API (~20 s warm)
	cd infra && REHEARSE_AWS=1 REHEARSE_REPORT="$(abspath $(REHEARSE_REPORT))" \
	  REHEARSE_CDK_CONTEXT='{"domainName":"$(INFRA_DOMAIN)","imageUri":"$(INFRA_IMAGE)","placeholderProvider":"$(if $(wildcard $(PROVIDER_ZIP)),false,true)"}' \
	  $(GO) test -count=1 -timeout 15m -v -run '^TestRehearseAWS$$' ./rehearse/

# Native Go fuzzing (issue #14): every target in scripts/fuzz.sh, one
# `go test -fuzz` each, FUZZTIME each (17 targets: about 4 minutes at 10s).
FUZZTIME ?= 10s

fuzz: ## run every fuzz target for FUZZTIME each (default 10s; targets listed in scripts/fuzz.sh)
	GO="$(GO)" FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

# The black-box mutation run (issue #14): MUTATE_N mutated requests against a
# live API server on a real database.
MUTATE_N ?= 10000

mutate: postgres ## MUTATE_N (10000) mutated requests against a live API server: no 5xx, problem documents, nothing written by a refusal
	MUTATE_N=$(MUTATE_N) $(GO) test -count=1 -timeout 30m -run '^TestMutation$$' -v ./control/api/

postgres: ## make sure PostgreSQL server binaries are installed (apt-get as root if not)
	@./scripts/ensure-postgres.sh >/dev/null

clean: ## remove build output
	rm -rf bin
