"""vllm-fleet: read the stack config, validate it, and build hosts, storage, downloads and services."""

from __future__ import annotations

import os
from pathlib import Path

import pulumi
from pulumi.runtime import config as runtime_config

from components import cordon, host_survey
from components.access import build_access, read_access
from components.deploy_report import DeployReport, DeployReportArgs
from components.front_door import FrontDoor, FrontDoorArgs
from components.host import GpuHost, GpuHostArgs
from components.model_download import ModelDownload, ModelDownloadArgs
from components.remote import CORDONED_STEPS, HostUnreachable, probe_all
from components.storage import SharedStorage, SharedStorageArgs
from components.vllm_service import VllmService, VllmServiceArgs
from models.backend import refusal
from models.config import StackTier
from models.loader import (
    CONTROLLER_KEYS,
    KNOWN_KEYS,
    SECRET_KEYS,
    STRUCTURED_KEYS,
    ConfigError,
    parse_stack_config,
    read_key_file,
)
from render.launch import load_strategy_note

config = pulumi.Config("vllm-fleet")
raw: dict[str, object] = {
    key: config.get_object(key) if key in STRUCTURED_KEYS else config.get(key)
    for key in (*KNOWN_KEYS, *CONTROLLER_KEYS)
    if config.get(key) is not None
}
# Keys this program does not read are typos; pass them on so the loader names them.
for full_key in {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}:
    namespace, _, key = full_key.partition(":")
    if namespace == "vllm-fleet" and key not in raw and key not in SECRET_KEYS:
        raw[key] = "<unknown>"
for key in SECRET_KEYS:
    # Present but not encrypted: the loader refuses it with the command that fixes it.
    if not runtime_config.is_config_secret(f"vllm-fleet:{key}") and config.get(key) is not None:
        raw[key] = "<plaintext>"
try:
    stack = parse_stack_config(raw)
except ConfigError as error:
    # Nothing has been registered yet: the preview stops here with the key, the value and the fix.
    raise pulumi.RunError(f"invalid stack config (Pulumi.{pulumi.get_stack()}.yaml):\n{error}") from None

SURVEY_CACHE = Path(".cache") / "survey"
# A production stack's secrets must not be encrypted with the dev sandbox's passphrase, which
# scripts/env.sh sets by default and this repository publishes.
DEV_PASSPHRASE = "vllm-fleet-dev-sandbox"
stack_file = Path(f"Pulumi.{pulumi.get_stack()}.yaml")
uses_passphrase = stack_file.is_file() and "encryptionsalt:" in stack_file.read_text()
if (
    stack.tier is StackTier.PRODUCTION
    and uses_passphrase
    and os.environ.get("PULUMI_CONFIG_PASSPHRASE") == DEV_PASSPHRASE
):
    raise pulumi.RunError(
        f"vllm-fleet:tier is production, but {stack_file} is encrypted with the dev sandbox's passphrase "
        "(the default of scripts/env.sh, published in this repository): export PULUMI_CONFIG_PASSPHRASE with a "
        "passphrase of your own before `pulumi stack init`, or use a cloud secrets provider "
        "(`pulumi stack change-secrets-provider`)"
    )
# A production stack's state must be where every operator sees it and its lock holds (models/backend.py).
if (backend_refusal := refusal(stack.tier, os.environ)) is not None:
    raise pulumi.RunError(backend_refusal)

# VLLM_FLEET_OFFLINE=1 renders without touching any host: previews of stacks this machine must not reach.
offline = os.environ.get("VLLM_FLEET_OFFLINE") == "1"
key_file = config.get("sshPrivateKeyFile")
secret_key = config.get_secret("sshPrivateKey")
if key_file is not None:
    try:
        # The key's text also serves the host survey, which runs before any resource exists.
        key_text = read_key_file("sshPrivateKeyFile", key_file, "it generates the key")
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
    private_key: pulumi.Input[str] = pulumi.Output.secret(key_text)
elif secret_key is not None:
    key_text = runtime_config.get_config("vllm-fleet:sshPrivateKey") or ""
    private_key = secret_key
elif offline:
    key_text = ""
    private_key = pulumi.Output.secret("")  # never used: an offline run connects to nothing
else:
    raise pulumi.RunError(
        "vllm-fleet:sshPrivateKey is not set: run `pulumi config set --secret vllm-fleet:sshPrivateKey < KEYFILE` "
        "(or set vllm-fleet:sshPrivateKeyFile to a key file on this machine)"
    )
hf_token = config.get_secret("hfToken")
access = read_access(config, stack)
resolved = stack.resolved_deployments()
for rd in resolved:
    load_note = load_strategy_note(rd)
    if load_note is not None:
        pulumi.log.warn(load_note)

# Contacting a host while the program runs makes an unreachable one fail fast, in previews too, and
# lets the preview name what already runs there (hand-made units, stray GPU processes).
CORDONED_STEPS.clear()  # filled by the steps declared below (a fresh module in every real run)
# A cordoned host is not contacted at all: it may be down for repair.
reachable = [h for h in stack.hosts if not h.cordon]
# Per deployment, the drift-repair count its activation renders (components/host_survey.repairs).
repairs: dict[str, int] = {}
for host_config in stack.hosts:
    if host_config.cordon:
        pulumi.log.info(f"host {host_config.name!r} is cordoned: not contacted, no step runs there")
# All hosts at once; an error names every host that failed.
if not offline:
    try:
        probe_all(reachable)
        surveys = host_survey.survey_all(pulumi.get_stack(), reachable, resolved, key_text, SURVEY_CACHE)
    except (HostUnreachable, host_survey.SurveyFailed) as error:
        raise pulumi.RunError(str(error)) from None
    conflicts: list[str] = []
    for host_config in reachable:
        on_host = [rd for rd in resolved if rd.host.name == host_config.name]
        found = surveys[host_config.name]
        errors, notes = host_survey.assess(pulumi.get_stack(), host_config, on_host, found)
        for rd in on_host:
            repairs[rd.deployment.name] = host_survey.repairs(pulumi.get_stack(), rd, found)
            if repairs[rd.deployment.name] > int(
                found.get("active", {}).get(f"{pulumi.get_stack()}.{rd.deployment.name}", {}).get("repairs") or 0
            ):
                pulumi.log.warn(
                    f"deployment {rd.deployment.name!r}: {rd.unit_name} on host {host_config.name!r} is missing or was "
                    "edited by hand; this update activates the stack's unit again"
                )
        for note in notes:
            pulumi.log.warn(note)
        for forecast in host_survey.forecasts(pulumi.get_stack(), host_config, on_host, found):
            pulumi.log.info(forecast)
        conflicts += errors
    if conflicts:
        raise pulumi.RunError(
            "what runs on the hosts conflicts with the stack; nothing was changed:\n" + "\n".join(conflicts)
        )

hosts = {h.name: GpuHost(h.name, GpuHostArgs(host=h, private_key=private_key)) for h in stack.hosts}
front_doors = {name: FrontDoor(f"{name}-front-door", FrontDoorArgs(host=host)) for name, host in hosts.items()}
access_steps = build_access(access, resolved, pulumi.get_stack(), hosts, front_doors)
storages = {
    s.name: SharedStorage(
        s.name,
        SharedStorageArgs(
            storage=s,
            host=hosts[s.host],
            kept_dirs=stack.kept_dirs_on(s.name),
        ),
    )
    for s in stack.storage
}
downloads: dict[tuple[str, str], ModelDownload] = {}
for store in stack.storage:
    for model_name in stack.wanted_models_on(store.name):
        downloads[(store.name, model_name)] = ModelDownload(
            f"{store.name}-{model_name}",
            ModelDownloadArgs(
                model_name=model_name,
                model=stack.models[model_name],
                storage=storages[store.name],
                hf_endpoint=stack.hf_endpoint,
                hf_token=hf_token,
            ),
        )
services: dict[str, VllmService] = {}
waits_for = stack.rollout_waits_for()
for rd in resolved:
    services[rd.deployment.name] = VllmService(
        rd.deployment.name,
        VllmServiceArgs(
            deployment=rd,
            stack=pulumi.get_stack(),
            host=hosts[rd.host.name],
            download=downloads[(rd.storage.name, rd.model_name)],
            front_door=front_doors[rd.host.name],
            hf_token=hf_token,
            # Config order puts a group's earlier members first, so the one waited for exists already.
            after=[services[waits_for[rd.deployment.name]]] if rd.deployment.name in waits_for else [],
            nodes=[
                (hosts[node.name], downloads[(stack.storage_for_host(node.name).name, rd.model_name)])
                for node in rd.node_hosts[1:]
            ],
            access=access_steps[rd.deployment.name],
            repairs=repairs.get(rd.deployment.name, 0),
        ),
    )
# What each deployment serves after the deploy.
reports = {
    rd.deployment.name: DeployReport(
        f"{rd.deployment.name}-report",
        DeployReportArgs(
            deployment=rd, stack=pulumi.get_stack(), host=hosts[rd.host.name], service=services[rd.deployment.name]
        ),
    )
    for rd in resolved
}
for host_config in stack.hosts:
    if host_config.cordon:
        cordon.check_removals(host_config, CORDONED_STEPS.get(host_config.name, set()))

pulumi.export(
    "deployments",
    {
        name: {
            "endpoint": s.endpoint,
            "servedModelName": s.served_model_name,
            "unitName": s.unit_name,
            "modelPath": s.model_path,
            "launch": s.launch,
            "report": reports[name].numbers,
            "status": reports[name].status,
        }
        for name, s in services.items()
    },
)
pulumi.export(
    "storage",
    {name: {"path": s.path, "bytesUsed": s.bytes_used, "bytesFree": s.bytes_free} for name, s in storages.items()},
)
pulumi.export("hosts", {name: h.facts for name, h in hosts.items()})
