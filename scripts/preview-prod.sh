#!/usr/bin/env bash
# `make preview-prod`: what `pulumi preview --diff` of the production stack would show, on any clone,
# without contacting its host (judged against the reference server's survey as REFERENCE.md describes it)
# and without touching the repository: the program runs from a copy in a
# temporary folder, with a throwaway local backend and a throwaway passphrase (the offline preview
# encrypts nothing of value), so no salt is written into Pulumi.prod.yaml and no real state is needed.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "$0")/env.sh"
cd "$VLLM_FLEET_ROOT"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r Pulumi.yaml Pulumi.prod.yaml __main__.py components controller models host render "$work/"
ln -s "$VLLM_FLEET_ROOT/.venv" "$work/.venv"
mkdir -p "$work/state"
# A preview stores no state: only the final snapshot is made (docs/fleets.md, "Previewing a fleet").
export PULUMI_SKIP_CHECKPOINTS=true
# The throwaway backend holds nothing anyone shares: opt out of the production stack's shared-backend rule.
export PULUMI_BACKEND_URL="file://$work/state" PULUMI_CONFIG_PASSPHRASE=offline-preview-only VLLM_FLEET_OFFLINE=1
export VLLM_FLEET_SINGLE_OPERATOR=1
cd "$work"
pulumi stack init prod --non-interactive >/dev/null
# What the server runs, as REFERENCE.md describes it (tests/fixtures/reference-server/survey.json): the
# preview judges the take-over against it (units replaced, model ids before and after, the downtime).
export VLLM_FLEET_SURVEY_FILE="$VLLM_FLEET_ROOT/tests/fixtures/reference-server/survey.json"
pulumi preview --stack prod --diff --non-interactive
