# ZOSCII MQ: developer entry points.
#
#   make images    build the images offline (wheelhouse, local bases if needed)
#   make up        images, then start the stack and wait until it is healthy; the first
#                  time, make the operator's token (secrets/admin-token) and print it
#   make down      stop and remove the containers (the data volume is kept;
#                  `make down DOWN_ARGS=-v` deletes it too)
#   make logs      follow the logs          make ps    show the containers
#   make test      lint, images, then every test (unit, integration, end-to-end)
#   make test-unit the tests that need no containers; make test-e2e only the e2e ones
#   make bench     benchmarks against this machine's ceilings, the framework floor and,
#                  with ZOSCII_BENCH_ORIGINAL=<dir>, the original; make bench-quick is short
#   make profile   py-spy of one api worker while 8 clients publish (docs/benchmarks.md);
#                  PROFILE_ARGS='--durability interval' for the other durability mode
#
# Variables (command line or environment):
#   PROJECT=zoscii           compose project name (containers zoscii_api_1, volume zoscii_zoscii_data)
#   IMAGE_TAG=dev            tag of zoscii/{proxy,api,live,replikate,claireup,statissa}
#   COMPOSE_FILES=-f docker-compose.yml     variants are overrides added after it, e.g.
#                            '-f docker-compose.yml -f deploy/compose.bind.yml' (data in a host
#                            directory), and/or '-f deploy/compose.replikate.yml' (a jobs file)
#   UP_TIMEOUT=240           seconds `make up` waits for all containers to be healthy
#   BASE=auto|public|local   base image choice of deploy/images.sh
#   ENV_FILE=.env  ADMIN_TOKEN_FILE=secrets/admin-token   where make up keeps the settings
#                            and the operator's token (deploy/up.sh)

SHELL := /bin/bash

PROJECT ?= zoscii
IMAGE_TAG ?= dev
COMPOSE_FILES ?= -f docker-compose.yml
UP_TIMEOUT ?= 240
DOWN_ARGS ?=
export IMAGE_TAG

# `docker compose` (v2) when the CLI has it, else docker-compose (v1.29).
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_CMD = $(COMPOSE) -p $(PROJECT) --project-directory . $(COMPOSE_FILES)

.PHONY: help images wheelhouse base-images up down logs ps

help:
	@sed -n '2,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

# ---- images and stack (deploy/) ---------------------------------------------------

wheelhouse:
	deploy/wheelhouse.sh

base-images:
	deploy/base/build-base.sh all

images:
	deploy/images.sh

# deploy/up.sh: the operator's token when none is configured (printed once), up -d,
# wait until healthy, then where everything is.
up: images
	@UP_TIMEOUT=$(UP_TIMEOUT) deploy/up.sh $(COMPOSE_CMD)

down:
	$(COMPOSE_CMD) down $(DOWN_ARGS)

logs:
	$(COMPOSE_CMD) logs -f --tail=100

ps:
	$(COMPOSE_CMD) ps

# ---- tests --------------------------------------------------------------------------
# `make test` is what CI runs (.ci/run): lint, the images (when a Docker engine answers),
# then one pytest run over everything. Without an engine the e2e tests report themselves
# skipped with the reason; they never pass silently.

VENV ?= .venv
# Bytecode, and pytest's assertion-rewritten test modules, are cached in the venv
# ($(PYCACHE)), never beside the sources, even where PYTHONDONTWRITEBYTECODE is set:
# without a cache every run rewrites each test module and plugin package again (about
# 5 s of a fast-tier run's collection) and every service subprocess compiles the sources.
# What tests compile in temporary directories (tests/cli/test_packaging's venv) is
# dropped from it before a run, so it does not grow run after run.
PYCACHE := $(abspath $(VENV))/pycache
PYTEST = TESTCONTAINERS_RYUK_DISABLED=true PYTHONDONTWRITEBYTECODE= \
  PYTHONPYCACHEPREFIX=$(PYCACHE) $(VENV)/bin/pytest

.PHONY: venv lint test test-unit test-e2e e2e-images bench bench-quick

# The tools and every service's dependencies (pinned), then zosciimq and the seven
# services as editable packages: tests and benchmarks import them as installed, no
# sys.path or PYTHONPATH (services/<svc>/pyproject.toml, README "Installing").
SERVICES := api replikate claireup statissa phpmq zmq live
$(VENV)/.installed: requirements-dev.txt pyproject.toml $(SERVICES:%=services/%/pyproject.toml)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
	$(VENV)/bin/pip install -q --disable-pip-version-check -e . $(SERVICES:%=-e services/%)
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

e2e-images:
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images; \
	 else echo "make: no Docker engine answers: e2e tests will be reported skipped"; fi

test: lint e2e-images
	rm -rf "$(PYCACHE)$${TMPDIR:-/tmp}"
	$(PYTEST) tests

# The fast tier: no containers (nor Docker at all), no test marked slow (a module marked
# slow as a whole is not even imported: tests/conftest.py), a twentieth of each property's
# examples (tests/support/tiers.py), temporary files on tmpfs where there is one (its
# tests fsync a lot; durability on a disk is for the slow tier's crash and power-loss
# tests), on three processes (pytest-xdist: most of the tier's time is waiting for leases,
# servers and timeouts, which overlap: on this 2-core machine, idle, 61-62 s on two, 42-45
# on three, no better on four). `make test` runs all of it, in full, in one process, on
# the disk.
test-unit: venv
	tmp=$$(test -d /dev/shm -a -w /dev/shm && echo /dev/shm || echo "$${TMPDIR:-/tmp}"); \
	  rm -rf "$(PYCACHE)$$tmp" && \
	  TMPDIR=$$tmp $(PYTEST) tests --ignore=tests/e2e -m "not slow" --hypothesis-profile=fast \
	  -n 3

test-e2e: venv e2e-images
	$(PYTEST) tests/e2e

# ---- benchmarks -----------------------------------------------------------------------

# bench/tools.sh installs wrk (and, with ZOSCII_BENCH_ORIGINAL=<dir of the original PHP
# server>, nginx, php-fpm and php-curl) with apt-get when missing and root; never fails.
bench: venv
	@sh bench/tools.sh
	$(VENV)/bin/python -m bench.run

bench-quick: venv
	@sh bench/tools.sh
	$(VENV)/bin/python -m bench.run --quick

# Faults and attacks (issue 27): replication through eight WAN-fault scenarios of 20,000
# messages (bench/wan_faults.py, about 15 minutes), then the attack run against the api
# and the PHPMQ gateway (bench/attack_run.py); each prints its figures as JSON lines.
.PHONY: bench-faults
bench-faults: venv
	$(VENV)/bin/python -m bench.wan_faults $(WAN_ARGS)
	$(VENV)/bin/python -m bench.attack_run $(ATTACK_ARGS)

# statissa over 100k and 1M generated files: local[*], a two-worker Spark cluster (needs
# the images), a Python scan and find, in alternating rounds (docs/benchmarks.md,
# "statissa at scale"). SCALE_ARGS passes more: e.g. '--ten-million --dir /mnt/big --keep'
# (10M needs 10M free inodes there; never part of make test).
.PHONY: bench-statissa-scale
bench-statissa-scale: venv
	$(VENV)/bin/python -m bench.spark_scale $(SCALE_ARGS)

# The ZeroMQ gateway's targets (services/zmq/README.md): zpipes chunks/s durable, PUB/SUB
# fan-out, memory with 1,000 open pipes. ZMQ_BENCH_ARGS='--rounds 5 --seconds 5 --dir /mnt/disk'.
.PHONY: bench-zmq
bench-zmq: venv
	$(VENV)/bin/python -m bench.zmq_bench $(ZMQ_BENCH_ARGS)

# The PHPMQ gateway's targets (issue 24): the real client's send of 10,000 x 1 KB until
# durable, consume+ack with 8 consumers, each beside the api's framed batch, in
# alternating rounds. PHPMQ_BENCH_ARGS='--dir /mnt/disk --rounds 5' (--dir: the disk
# measured; default $TMPDIR).
.PHONY: bench-phpmq
bench-phpmq: venv
	$(VENV)/bin/python -m bench.phpmq_bench $(PHPMQ_BENCH_ARGS)

# py-spy of one api worker under 10 s of publishing from 8 clients (docs/benchmarks.md,
# "Profiling"). PROFILE_ARGS passes more: e.g. '--durability interval --data-dir /mnt/disk'.
PROFILE_ARGS ?=
.PHONY: profile
profile: venv
	@sh bench/tools.sh
	@test -x $(VENV)/bin/py-spy || $(VENV)/bin/pip install -q --disable-pip-version-check py-spy
	$(VENV)/bin/python -m bench.profile_publish $(PROFILE_ARGS)
