# One command for each of set-up, run, test, lint and bench. Every target sets up what it needs first.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := source scripts/env.sh &&

.PHONY: help setup up down test lint preview-prod bench status monitoring lock config-reference

help:
	@echo "make up     set everything up and deploy the dev stack to the local sandbox, then chat with it"
	@echo "make test   lint, unit tests and end-to-end tests against the sandbox"
	@echo "make down   destroy the dev stack and tear the sandbox and mirror down"
	@echo "make bench  benchmarks (after make up); writes bench/RESULTS.md"
	@echo "make status what each deployment does now and its drift (STACK=dev, ARGS=--json)"
	@echo "make monitoring  Prometheus targets, rules, a Grafana dashboard from the stack (STACK=dev, ARGS=--out DIR)"
	@echo "make lock   after changing a pin in pyproject.toml: resolve it afresh into constraints.txt"
	@echo "make config-reference  write docs/config-reference.md from the config models (after changing one)"

setup:
	@scripts/setup.sh

# up and test build the sandbox image during set-up, beside the engine.
up:
	@VLLM_FLEET_SETUP_SANDBOX=1 scripts/setup.sh
	@scripts/up.sh

down:
	@scripts/down.sh

lint: setup
	@$(ENV) $$VENV/ruff check . && $$VENV/ruff format --check . && $$VENV/mypy .

test:
	@VLLM_FLEET_SETUP_SANDBOX=1 scripts/setup.sh
	@scripts/test.sh

# Render the production stack without contacting its host (no SSH probe, commands never run in preview).
preview-prod: setup
	@scripts/preview-prod.sh

status:
	@$(ENV) $$VENV/python scripts/status.py --stack $${STACK:-dev} $(ARGS)

bench: setup
	@$(ENV) $$VENV/python -m bench.run $(ARGS)

monitoring:
	@$(ENV) $$VENV/python scripts/monitoring.py --stack $${STACK:-dev} $(ARGS)

# The config keys' page, from the models (tests/test_config_reference.py fails until it is rewritten).
config-reference: setup
	@$(ENV) $$VENV/python -m scripts.config_reference > docs/config-reference.md

# Every version make setup installs, resolved afresh from pyproject.toml's pins (scripts/lock.sh).
lock:
	@scripts/lock.sh
