# baton: make demo runs the showcase, make test runs every test.
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: demo test test-race lint build bench bench-report fuzz clean soak

demo:
	$(GO) run ./cmd/worker demo

# Tests start their own throwaway PostgreSQL unless TEST_DATABASE_URL is set.
# e2e/ is a module of its own (the browser and fault-injection tests; their
# tools stay out of the library's module). Its fault-injection suite runs
# verbosely so its seeds and summary show.
test:
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -race ./internal/keepalive ./distributor ./partition
	cd bench && $(GO) test -count=1 ./...
	cd e2e && $(GO) test -count=1 $$($(GO) list ./... | grep -v '/faults$$')
	cd e2e && $(GO) test -count=1 -v ./faults

# The fault soak: SOAK_FAULTS process, network, database and operator faults
# (1,000 unless set: make soak SOAK_FAULTS=10000) on real workers, soak
# clients and scheduled jobs (1,000 take about 7 minutes on 2 cores), then
# the independent checks; its table ends the output. BATON_SEED=<seed>
# replays a run's schedule of faults; BATON_SOAK_HA=1 adds killed primaries
# of a three-node pg_auto_failover formation. make test runs a 40-fault
# slice of it. The timeout grows with the count.
SOAK_FAULTS ?= 1000
soak:
	cd e2e && BATON_SOAK=1 BATON_SOAK_FAULTS=$(SOAK_FAULTS) $(GO) test -count=1 -v \
		-timeout $$(( 30 + $(SOAK_FAULTS) / 50 ))m -run '^TestSoak$$' ./faults

# The suite's version-sensitive slice on one PostgreSQL major version:
# make test-pg PG=17 installs it if needed (scripts/install-pg.sh: 15 is
# Debian's, 16-18 come from npm) and runs the conformance suite, the
# distributor, internal/keepalive, leader, schedule, schema, console and horizon
# packages, the pricing golden vectors (plain, segments, held groups,
# re-rating), worker migrate and status, and the fault suite's faults on
# one server (no standby or pg_auto_failover: those stay on 15).
.PHONY: test-pg test-pg-install test-pg-packages test-pg-sim test-pg-golden test-pg-worker test-pg-faults
PG ?= 17
PG_PACKAGES = ./internal/taskstore ./internal/keepalive ./leader ./schedule ./schema ./distributor ./console ./horizon
PG_FAULTS = ^Test(SIGKILLAtRandomMoments|SIGSTOPPastLeaseThenSIGCONT|DatabaseRestart|LoadWhileRunning|GracefulStopAllThenRestart|ThroughPgBouncerTransactionPooling|HotContractSplitUnderFaults)$$
# Each step is a target of its own, so that make -k runs them all and
# reports every failure.
test-pg: test-pg-packages test-pg-sim test-pg-golden test-pg-worker test-pg-faults
# CI's slice on each newer major: the same without the console, horizon and
# schema packages (their statements are the status and migration ones that
# test-pg-worker runs), so that three majors fit beside the whole suite.
PG_CI_PACKAGES = ./internal/taskstore ./internal/keepalive ./leader ./schedule ./distributor
.PHONY: test-pg-ci test-pg-ci-packages
test-pg-ci: test-pg-ci-packages test-pg-sim test-pg-golden test-pg-worker test-pg-faults
test-pg-ci-packages: test-pg-install
	BATON_PG_VERSION=$(PG) $(GO) test -count=1 $(PG_CI_PACKAGES)
test-pg-install:
	scripts/install-pg.sh $(PG)
test-pg-packages: test-pg-install
	BATON_PG_VERSION=$(PG) $(GO) test -count=1 $(PG_PACKAGES)
test-pg-sim: test-pg-install
	BATON_PG_VERSION=$(PG) $(GO) test -count=1 -run 'Conformance|StoreContract' ./internal/sim
test-pg-golden: test-pg-install
	BATON_PG_VERSION=$(PG) $(GO) test -count=1 -run 'Golden' ./pricing/pricer ./pricing/rerate
test-pg-worker: test-pg-install
	BATON_PG_VERSION=$(PG) $(GO) test -count=1 -run 'Status|HostDatabase|RestoredOn' ./cmd/worker
test-pg-faults: test-pg-install
	cd e2e && BATON_PG_VERSION=$(PG) $(GO) test -count=1 -v -run '$(PG_FAULTS)' ./faults

test-race:
	$(GO) test -count=1 -race ./...
	cd e2e && $(GO) test -count=1 -race ./...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd bench && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd examples && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd e2e && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/worker ./cmd/worker

# bench/ is a module of its own (its plotting dependencies stay out of the
# library's module).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	cd bench && $(GO) test -run '^$$' -bench . -benchmem ./...

# Regenerates bench/results/ (report.md, plots, results.json); about 15
# minutes on 2 cores. cd bench && go run . -quick for a 2-minute smoke run.
bench-report:
	cd bench && $(GO) run .

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzPrice -fuzztime 60s ./pricing
	$(GO) test -run '^$$' -fuzz FuzzReadRecords -fuzztime 60s ./pricing/ingest
	$(GO) test -run '^$$' -fuzz FuzzReadTiers -fuzztime 60s ./pricing/ingest

clean:
	rm -rf bin
