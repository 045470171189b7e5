# gpud — build, test and demo. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
export CGO_ENABLED := 1
# go-nvml's headers use deprecated declarations; the warnings are noise.
# Setting CGO_CFLAGS replaces Go's default (-O2 -g), and go-sqlite3 adds no
# -O of its own: without -O2 here SQLite (state.db, accounting.db, the
# agents' outbox.db) was built unoptimised, ~2x its CPU per statement.
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations
BINARIES := gpud gpud-pmix gpusubmit gpuq sbatch
# Slurm's command names: links to gpuq, which acts by the name it runs as.
# sbatch is a program of its own (gpusubmit/quick says why).
GPUQ_NAMES := srun salloc squeue scancel sacct scontrol sinfo sacctmgr sprio sshare sreport
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
PKGS := ./...

.PHONY: help deps build install test test-clients test-chaos test-step-kills check bench-rest gen-slurmclient check-slurmclient fmt fix-fmt vet check-imports man check-man tidy-check demo bench bench-api bench-sched bench-controller bench-acct bench-sim bench-twin bench-sim-traces bench-goodput bench-fleet bench-fleet-burst bench-fleet-live bench-fleet-rate bench-fleet-heartbeats bench-ha bench-sbatch bench-slurm bench-flood clean

help: ## Show this help.
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## Build bin/gpud, bin/gpud-pmix, bin/gpusubmit, bin/gpuq and bin/sbatch, with Slurm's other names (squeue ...) linked to gpuq.
	@mkdir -p bin
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/gpud ./gpud
	@# gpud-pmix: a step's PMIx server on a node (srun --mpi=pmix), linked
	@# with OpenPMIx (libpmix-dev, make deps); the node execs it from here.
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/gpud-pmix ./gpud/pmi/pmixd
	@# The CLIs need no cgo: static binaries start faster (gpusubmit runs
	@# once per submission) and copy to login nodes as they are. The tag
	@# drops urfave/cli's markdown/man generation (man/gen has its own),
	@# whose blackfriday init cost about 0.45 ms of every run.
	CGO_ENABLED=0 $(GO) build -tags urfave_cli_no_docs -ldflags '$(LDFLAGS)' -o bin/gpusubmit ./gpusubmit
	CGO_ENABLED=0 $(GO) build -tags urfave_cli_no_docs -ldflags '$(LDFLAGS)' -o bin/gpuq ./gpuq
	@# sbatch: the one-shot submission path without the HTTP, TLS and CLI
	@# stacks (half the start of gpusubmit); it runs gpusubmit for the rest.
	@rm -f bin/sbatch # was a link to gpusubmit: go build would write through it
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o bin/sbatch ./gpusubmit/sbatch
	@for n in $(GPUQ_NAMES); do ln -sfn gpuq bin/$$n; done

install: build ## Install the binaries and Slurm's command names (links) into $(PREFIX)/bin (PREFIX=/usr/local), and $(SYSCONFDIR)/profile.d/gpud.sh (SYSCONFDIR=/etc) for login shells.
	install -d $(DESTDIR)$(PREFIX)/bin
	rm -f $(DESTDIR)$(PREFIX)/bin/sbatch # a link to gpusubmit before: install would write through it
	install -m 0755 bin/gpud bin/gpud-pmix bin/gpusubmit bin/gpuq bin/sbatch $(DESTDIR)$(PREFIX)/bin/
	@for n in $(GPUQ_NAMES); do ln -sfn gpuq $(DESTDIR)$(PREFIX)/bin/$$n; done
	@# Login shells (#!/bin/bash -l jobs, ssh) reset PATH: this puts a
	@# job's gpud tools first again, and PREFIX/bin on PATH when missing.
	install -d $(DESTDIR)$(SYSCONFDIR)/profile.d
	sed 's|@BINDIR@|$(PREFIX)/bin|g' etc/profile.d/gpud.sh > $(DESTDIR)$(SYSCONFDIR)/profile.d/gpud.sh
	chmod 0644 $(DESTDIR)$(SYSCONFDIR)/profile.d/gpud.sh

deps: ## Install containerd, runc, busybox-static, gcc, MPICH, Open MPI and OpenPMIx when missing (Debian, root).
	@./scripts/deps.sh

# Packages that start no goroutine (TestNoRacePackagesStartNoGoroutine
# in gpud/imports_test.go checks it) run without -race: the detector can
# find nothing in them and makes them 10-25 times slower (gpud/sim's FGD
# runs of the production scheduler: 6 s become 140 s).
NORACE_PKGS := ./gpud/sched/... ./gpud/sim/... ./gpud/plot/...
# The end-to-end packages (gpud/e2e/*: one per area) take the binaries
# make build just made (GPUD_E2E_BIN) instead of each linking its own, in
# a go test of their own beside the unit packages': they start at once
# instead of queueing behind the unit packages' -race builds, and the
# longest area bounds the run.
E2E_PKGS := ./gpud/e2e/...
test: deps build ## Run every test: unit (with -race), real containerd integration and end-to-end (needs root).
	@unit=$$($(GO) list $(PKGS) | grep -v -x -F "$$($(GO) list $(NORACE_PKGS) $(E2E_PKGS))"); \
	export GPUD_E2E_BIN=$(CURDIR)/bin; \
	$(GO) test -count=1 -timeout 20m $(NORACE_PKGS) & norace=$$!; \
	$(GO) test -race -count=1 -timeout 20m -p 2 $(E2E_PKGS) & e2e=$$!; \
	$(GO) test -race -count=1 -timeout 20m $$unit; rc=$$?; \
	wait $$norace || rc=1; wait $$e2e || rc=1; exit $$rc

test-step-kills: deps ## Kill -9 either node agent during a 2-host step (network namespaces), restart it 10s later: 10 runs for each node; STEP_KILLS=N for another count (root).
	GPUD_TEST_STEP_KILLS=$${STEP_KILLS:-10} $(GO) test -count=1 -timeout 90m -run 'TestMultiHostSteps/AgentKill' -v ./gpud/e2e/multihost/

test-clients: deps ## Run real Slurm clients unchanged against gpud standalone: Snakemake's --slurm executor and Toil's Slurm batch system (installs Debian's snakemake and toil when missing; root).
	@command -v snakemake >/dev/null || { echo "test-clients: installing snakemake"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq snakemake; }
	@command -v _toil_worker >/dev/null || { echo "test-clients: installing toil"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq toil; }
	GPUD_TEST_CLIENTS=1 $(GO) test -count=1 -timeout 30m -run 'TestSnakemakeSlurm|TestToilSlurm' -v ./gpud/e2e/clients/

test-chaos: deps ## Run the chaos suite (root, ~10 min): three HA controllers, three nodes and a login host in network namespaces under a steady workload while links are cut and processes killed; a checker then reads accounting, outputs and the clients' log (docs/ha.md). CHAOS_RUNS=leadercut:10,firstack:20,agentkill:10 runs issue 25's measurements instead (up to an hour on a loaded machine), CHAOS_RUNS=clock the clock fault alone.
	GPUD_CHAOS=1 GPUD_CHAOS_RUNS=$(CHAOS_RUNS) GPUD_CHAOS_REPORT=$(CURDIR)/chaos-report $(GO) test -count=1 -timeout 90m -run 'TestChaos' -v ./gpud/e2e/chaos/

check: fmt vet check-imports check-man tidy-check check-slurmclient ## Run every static check.

fmt: ## Fail if any file needs gofmt.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

fix-fmt: ## Rewrite files with gofmt.
	gofmt -w $$(git ls-files '*.go')

vet: deps ## go vet every package (deps first: gpud-pmix's cgo needs OpenPMIx's headers).
	$(GO) vet $(PKGS)

check-imports: ## Enforce the package import allow-list and the runtime import names (gpud/imports_test.go), keep bin/sbatch free of the HTTP, TLS and CLI stacks, and make test's no-race packages free of goroutines.
	$(GO) test -count=1 -run 'TestImportBoundaries|TestSbatchLinksNoHTTPStack|TestRuntimeImportNames|TestNoRacePackagesStartNoGoroutine' ./gpud

man: ## Regenerate the man pages in man/.
	$(GO) run ./man/gen -out man

check-man: ## Fail if the committed man pages are stale.
	$(GO) test -count=1 ./man/...

tidy-check: ## Fail if go.mod/go.sum are not tidy.
	@# go mod tidy -diff changes nothing and exits 1 with the diff when
	@# untidy: no backup copies (fixed /tmp names raced between checkouts).
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum not tidy: run go mod tidy"; exit 1; }

bench-rest: ## Slurm's REST API beside /v1 and beside Debian's Slurm 22.05 slurmrestd: job/submit from 8 clients, GET jobs over 10,000 jobs (root).
	./scripts/bench-rest-vs.sh

# Slurm's OpenAPI documents (test data beside the repository, GPL-2.0:
# validated against and generated from, never copied into gpud).
SLURM_OPENAPI_DIR ?= $(CURDIR)/../shared/slurm-openapi
SLURM_CLIENT_VERSIONS := 45 42

gen-slurmclient: ## Generate the test clients of Slurm's REST API (gpud/slurmrest/slurmclient) from Slurm's documents with oapi-codegen.
	@for v in $(SLURM_CLIENT_VERSIONS); do \
		mkdir -p gpud/slurmrest/slurmclient/v00$$v && \
		$(GO) tool oapi-codegen -config gpud/slurmrest/slurmclient/oapi-codegen.yaml -package v00$$v \
			-o gpud/slurmrest/slurmclient/v00$$v/client.gen.go $(SLURM_OPENAPI_DIR)/openapi_spec_v$$v.json || exit 1; \
	done

check-slurmclient: ## Fail if the generated Slurm REST clients differ from what gen-slurmclient makes (SKIP without Slurm's documents, except in CI).
	@if [ ! -f $(SLURM_OPENAPI_DIR)/openapi_spec_v45.json ]; then \
		if [ -n "$$CI" ]; then echo "check-slurmclient: Slurm's OpenAPI documents not found in $(SLURM_OPENAPI_DIR)"; exit 1; fi; \
		echo "check-slurmclient: SKIP: Slurm's OpenAPI documents not found in $(SLURM_OPENAPI_DIR) (set SLURM_OPENAPI_DIR)"; exit 0; fi; \
	tmp=$$(mktemp -d /tmp/gpud-slurmclient.XXXXXX); trap 'rm -rf $$tmp' EXIT; \
	for v in $(SLURM_CLIENT_VERSIONS); do \
		$(GO) tool oapi-codegen -config gpud/slurmrest/slurmclient/oapi-codegen.yaml -package v00$$v \
			-o $$tmp/v00$$v.go $(SLURM_OPENAPI_DIR)/openapi_spec_v$$v.json || exit 1; \
		cmp -s $$tmp/v00$$v.go gpud/slurmrest/slurmclient/v00$$v/client.gen.go || { echo "gpud/slurmrest/slurmclient/v00$$v is stale: run make gen-slurmclient"; exit 1; }; \
	done

demo: ## Install what is missing, start a 2-node simulated H100 cluster, run an example job, show queue and accounting.
	./scripts/demo.sh

bench: bench-api bench-sched bench-controller bench-acct bench-sim bench-sim-traces bench-fleet bench-fleet-burst bench-fleet-live bench-fleet-rate bench-fleet-heartbeats bench-ha ## Run the benchmarks that print the issues' figures.

bench-flood: ## Issue 24's Must-show (root): 5 min of one client's bad-token flood on the TCP port; another user's sbatch/squeue p50/p99 idle and under it, and state file growth (GPUD_BENCH_FLOOD_SECS to shorten).
	$(GO) test -run '^$$' -bench BadTokenFlood -benchtime 1x -timeout 60m -v ./gpud/e2e/security/ | grep -E 'badtoken_test|Benchmark|ok|FAIL'

bench-sbatch: build ## sbatch in a shell loop (one submitter, held jobs): submissions/s over a few runs, and sbatch's start cost.
	./scripts/bench-sbatch.sh

bench-slurm: build ## gpud beside Slurm 22.05 (Debian's slurm-wlm, a throwaway cluster under /tmp) in one run: sbatch loop, scancel 5,000, squeue 10,000, sacct -P 100,000 (Slurm's with a throwaway MariaDB + slurmdbd when installed).
	./scripts/bench-slurm-vs.sh

bench-api: build ## Submissions/s (API, 8 clients; gpusubmit loop), gpuq latency at 100k jobs, job throughput vs bare containerd.
	./scripts/bench.sh

bench-sched: ## Scheduler core: full cycle at 100k jobs x 10k nodes, incremental submit/end, placements, MIG.
	$(GO) test -run '^$$' -bench . -benchmem ./gpud/sched/...

bench-controller: ## Controller at 100k pending jobs: full and event cycles, heap per pending job.
	$(GO) test -run '^$$' -bench Controller100k -benchtime 3x ./gpud/controller/

bench-acct: ## Accounting: usage-sample inserts, acct and report over 1M jobs, checkpoint sealing.
	$(GO) test -run '^$$' -bench . -benchtime 3x ./accounting/
	$(GO) test -run '^$$' -bench . ./checkpoint/

bench-sim: ## Simulator: the FGD paper's table on Alibaba openb and its --compare plots (README; needs ../shared/traces).
	./scripts/bench-sim.sh

# The twin's bars (issue 32; docs/simulator.md): the fidelity run at
# TWIN_JOBS jobs on a live controller, replayed job by job, and the replay
# of TWIN_RECORDS synthetic accounting records on 1,000 nodes. On the
# 2-core dev machine at the defaults: about 5 minutes for the fidelity run
# (4 min 48 s at load 8-12), 3.5 minutes for the replay alone, 10-27 under
# load; make test runs 400 jobs.
TWIN_JOBS ?= 50000
TWIN_RECORDS ?= 1000000
bench-twin: ## Simulator twin: fidelity against a live controller (TWIN_JOBS, default 50,000: ~5 min) and replay speed (TWIN_RECORDS on 1,000 nodes: 3.5-27 min).
	GPUD_TWIN_JOBS=$(TWIN_JOBS) $(GO) test -count=1 -timeout 0 -run 'TestTwinMatchesController$$' -v ./gpud/controller/
	GPUD_TWIN_SPEED_RECORDS=$(TWIN_RECORDS) $(GO) test -count=1 -timeout 0 -run 'TestTwinSpeed$$' -v ./gpud/simulate/

bench-sim-traces: ## Simulator: the queueing traces too (Lublin, KTH-SP2, Philly through sched.Schedule).
	BENCH_SIM_TRACES=1 ./scripts/bench-sim.sh

# Issue 29's goodput study (docs/health.md): Meta's Llama 3 failure rate and
# causes injected into the whole Philly trace, gpud's health policy against
# whole-node drain, seeds GOODPUT_SEEDS. About 10 minutes a seed on the loaded
# 2-core dev machine.
GOODPUT_SEEDS ?= 1..3
bench-goodput: build ## Simulator: goodput under Meta's failure rates on the Philly trace, per-GPU drain + expedite + checkpoint-first vs whole-node drain (needs ../shared/traces).
	nice -n 10 bin/gpud simulate --trace ../shared/traces/gpu/philly-rfold/philly_trace.csv --cluster 311x8 \
		--failures meta --seed $(GOODPUT_SEEDS)

# A modest fleet that finishes in a few minutes on a 2-core machine; docs/fleet.md
# has the flags of the big runs (1,000 nodes x 8 GPUs with 100,000 jobs;
# 10,000 nodes heartbeating at 10 s).
FLEET_FLAGS ?= --nodes 200 --gpus-per-node 8 --jobs 20000 --submitters 8 --job-duration 2s --heartbeat 5s --usage-interval 10s --hold 30s
bench-fleet: build ## Fleet harness: 200 simulated nodes x 8 GPUs, 20,000-job burst over TLS to a real controller; plot in bench-fleet.svg.
	nice -n 10 bin/gpud loadtest $(FLEET_FLAGS) --plot bench-fleet.svg

# Issue 15's Must-show runs (docs/fleet.md), one target each. 8,000 GPUs each
# holding a job for --job-duration start at most 8,000/duration jobs/s in steady
# state: 3-s jobs allow 2,667/s, above issue 31's 2,000/s (the 5-s jobs used up to
# session 14 capped both bursts at 1,600/s, below the target they measured).
FLEET_1000 := --nodes 1000 --gpus-per-node 8 --submitters 8 --job-duration 3s --heartbeat 5s --usage-interval 10s --ramp 20s --sched-interval 5s --procs 2

bench-fleet-burst: build ## 1,000 nodes x 8 GPUs, 100,000 jobs queued then started (aim >= 1,000 starts/s sustained); plot (starts/s, queue depth, p50/p99 submit->start) in bench-fleet-burst.svg.
	nice -n 10 bin/gpud loadtest $(FLEET_1000) --jobs 100000 --preload --memory-outbox --plot bench-fleet-burst.svg

bench-fleet-live: build ## 1,000 nodes x 8 GPUs, 20,000-job live burst with GPUs free (aim p99 submit->start < 1 s).
	nice -n 10 bin/gpud loadtest $(FLEET_1000) --jobs 20000

bench-fleet-rate: build ## 1,000 nodes x 8 GPUs, 20,000 jobs offered at 2,000 submissions/s from 64 clients, GPUs free (open loop; aim: all acknowledged and started at 2,000/s, p99 submit->start < 100 ms counted from when each job was due).
	nice -n 10 bin/gpud loadtest $(FLEET_1000) --jobs 20000 --submitters 64 --rate 2000

bench-fleet-heartbeats: build ## 10,000 nodes heartbeating every 10 s, agents in 4 processes (aim: controller under one core, none DOWN).
	nice -n 10 bin/gpud loadtest --nodes 10000 --memory-outbox --jobs 0 --heartbeat 10s --hold 120s --ramp 120s --procs 4

.PHONY: bench-images
bench-images: ## Images (issue 27): cold start of a 1 GiB image from a private registry, submit->running, beside ctr image pull + ctr run; warm start beside the host image; a job that waited longer than its pull (prefetched) beside one whose image was cached (root; GPUD_BENCH_IMAGE_MIB to resize).
	$(GO) test -run '^$$' -bench 'ImageStart' -benchtime 1x -timeout 30m -v ./gpud/e2e/jobs/ | grep -E 'images_bench_test|Benchmark|ok|FAIL'

.PHONY: bench-revocation
bench-revocation: ## Revocation (issue 24): gpuq reconfigure to the first refusal at every step listener of a 10-node standalone, p50/p99/max over 10 revocations (root).
	$(GO) test -run '^$$' -bench 'RevocationLatency10Nodes' -benchtime 10x -timeout 20m ./gpud/e2e/security/

bench-ha: ## HA (issue 16): submissions/s from 8 clients, 3-member Raft group vs single controller; failover time over 20 leader stops.
	$(GO) test -run '^$$' -bench 'SubmitParallel8$$' -benchtime 5000x ./gpud/server/
	$(GO) test -run '^$$' -bench 'SubmitParallel8HA' -benchtime 5000x ./gpud/ha/
	$(GO) test -run '^$$' -bench 'Failover' -benchtime 20x ./gpud/ha/

clean: ## Remove build outputs.
	rm -rf bin
