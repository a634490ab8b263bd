"""The stack config's rules that relate several keys: GPUs of a host, ports, units, rollout groups, nodes
of a multi-node deployment, memory and disk budgets, production pins.

Each rule takes the parsed config (models/config.py) and returns its errors; `stack_errors` runs them all
in a fixed order, and the loader (models/loader.py) refuses a config with any, every message on a line
of its own, each naming the key and the fix.
"""

from __future__ import annotations

from typing import TypeVar

from models.adapters import adapter_download_name
from models.config import DistributedBackend, StackConfig, StackTier
from models.host_keys import missing_host_key
from models.hosts import Host, Storage
from models.types import MAX_NAME_LENGTH, PINNED_REVISION
from models.vllm_flags import REMOVED_FLAGS, canonical_flag, vllm_release

# At least this share of the memory vLLM may use must stay free for the KV cache and activations.
KV_CACHE_HEADROOM = 0.10


def gpu_budget_gib(host: Host, gpu_count: int, utilization: float) -> float:
    return host.gpus.memory_gib * gpu_count * utilization


def _use_a_host(hosts: dict[str, Host], name: str) -> str:
    """The fix for a reference to a host the stack does not list."""
    if not hosts:
        return f"vllm-fleet:hosts is empty: add {name!r} there (name, address, gpus)"
    return f"use one of {sorted(hosts)} from vllm-fleet:hosts"


_Thing = TypeVar("_Thing")


def _claimed_before(claimed: dict[_Thing, str], thing: _Thing, deployment: str) -> str | None:
    """The other deployment that claimed `thing` (a GPU, port or unit of a host) first, or None: it is now
    `deployment`'s (or was already)."""
    owner = claimed.setdefault(thing, deployment)
    return owner if owner != deployment else None


def stack_errors(stack: StackConfig) -> list[str]:
    """Every rule's errors, in the order they are shown: unique names, storage, staging paths, production
    pins, deployments, rollout groups, multi-node deployments, disks."""
    errors: list[str] = []
    _unique(errors, "hosts", [h.name for h in stack.hosts])
    _unique(errors, "storage", [s.name for s in stack.storage])
    _unique(errors, "deployments", [d.name for d in stack.deployments])
    hosts = {h.name: h for h in stack.hosts}
    storage_by_host: dict[str, Storage] = {}
    for i, store in enumerate(stack.storage):
        if store.host not in hosts:
            errors.append(
                f"vllm-fleet:storage[{i}].host: unknown host {store.host!r}; {_use_a_host(hosts, store.host)}"
            )
        elif store.host in storage_by_host:
            errors.append(
                f"vllm-fleet:storage[{i}].host: host {store.host!r} already has storage "
                f"{storage_by_host[store.host].name!r}; give each host one storage entry"
            )
        else:
            storage_by_host[store.host] = store
    for i, host in enumerate(stack.hosts):
        shared = storage_by_host.get(host.name)
        staging = host.staging_path
        if staging is not None and shared is not None and _overlap(staging, shared.path):
            errors.append(
                f"vllm-fleet:hosts[{i}].stagingPath: {staging} overlaps the storage path {shared.path} of "
                f"{host.name!r}; the staging copy belongs on a host-local disk of its own (e.g. /local/vllm-staging)"
            )
    if stack.tier is StackTier.PRODUCTION:
        # With vllm-fleet:knownHostsFile, the hosts without a key of their own are checked once the file is
        # read (controller/known_hosts.py): its lines are not part of the config.
        if stack.known_hosts_file is None:
            errors.extend(missing_host_key(host, None) for host in stack.hosts if host.host_key is None)
        # Models and adapters alike: the key of each revision, and what to pin it to.
        revisions = [
            (
                f"models.{name}",
                model.revision,
                "the 40-hex commit sha so every host serves the same bytes "
                "(find it with `hf api` or on the model page's commit history)",
            )
            for name, model in stack.models.items()
        ] + [
            (f"adapters.{name}", adapter.revision, "the adapter's 40-hex commit sha, as for models")
            for name, adapter in stack.adapters.items()
        ]
        for key, revision, pin in revisions:
            if PINNED_REVISION.match(revision):
                continue
            if PINNED_REVISION.match(revision.lower()):
                # The Hub names commits in lowercase; an uppercase sha names no revision there.
                errors.append(
                    f"vllm-fleet:{key}.revision: {revision!r} is a commit sha in uppercase; write it in lowercase"
                )
            else:
                errors.append(
                    f"vllm-fleet:{key}.revision: {revision!r} is not a full commit sha (a branch, tag or short sha can "
                    f"move or be ambiguous); a production stack needs {pin}"
                )
    errors.extend(_deployment_errors(stack, hosts, storage_by_host))
    errors.extend(_rollout_errors(stack))
    errors.extend(_multi_node_errors(stack, hosts, storage_by_host))
    errors.extend(_disk_errors(stack))
    errors.extend(adapter_errors(stack))
    return errors


def _deployment_errors(stack: StackConfig, hosts: dict[str, Host], storage_by_host: dict[str, Storage]) -> list[str]:
    errors: list[str] = []
    claimed_gpus: dict[tuple[str, int], str] = {}
    claimed_ports: dict[tuple[str, int], str] = {}
    claimed_units: dict[tuple[str, str], str] = {}
    for i, dep in enumerate(stack.deployments):
        key = f"vllm-fleet:deployments[{i}]"
        host = hosts.get(dep.host)
        if host is None:
            errors.append(f"{key}.host: unknown host {dep.host!r}; {_use_a_host(hosts, dep.host)}")
            continue
        if dep.host not in storage_by_host:
            errors.append(
                f"{key}.host: host {dep.host!r} has no storage; add an entry to vllm-fleet:storage "
                "for it so the model has somewhere to live"
            )
        model = stack.models.get(dep.model)
        if model is None:
            errors.append(
                f"{key}.model: unknown model {dep.model!r}; add it to vllm-fleet:models "
                f"or use one of {sorted(stack.models)}"
            )
            continue
        serving = dep.overrides.apply(model.serving)
        # A multi-node deployment uses the same GPU indices on every node (checked by _multi_node_errors).
        for node in (n for n in dep.node_names if n in hosts):
            if hosts[node].gpus.count == 0:
                # Not one line per index: the head's CPU rule below says it once; a node's is said here.
                if node != dep.host and dep.gpus:
                    errors.append(
                        f"{key}.gpus: node {node!r} has no GPUs (hosts[].gpus.count: 0); a multi-node deployment "
                        "runs on hosts with GPUs"
                    )
                continue
            for gpu in dep.gpus:
                if gpu >= hosts[node].gpus.count:
                    errors.append(
                        f"{key}.gpus: GPU {gpu} does not exist on host {node!r}, which has "
                        f"{hosts[node].gpus.count} (indices 0-{hosts[node].gpus.count - 1}); fix the index or "
                        "hosts[].gpus.count"
                    )
                if (owner := _claimed_before(claimed_gpus, (node, gpu), dep.name)) is not None:
                    errors.append(
                        f"{key}.gpus: GPU {gpu} of host {node!r} is already given to deployment "
                        f"{owner!r}; two deployments cannot share a GPU, pick free indices"
                    )
        for port, field in ((dep.port, "port"), *((p, "backendPorts") for p in dep.engine_ports)):
            if (port_owner := _claimed_before(claimed_ports, (dep.host, port), dep.name)) is not None:
                errors.append(
                    f"{key}.{field}: port {port} of host {dep.host!r} is already used by deployment "
                    f"{port_owner!r} (its port or backendPorts); choose another port"
                )
        needed = serving.tensor_parallel * serving.pipeline_parallel
        if host.gpus.count > 0 and needed > len(dep.gpus) * len(dep.node_names) and not dep.nodes:
            errors.append(
                f"{key}.gpus: tensorParallel {serving.tensor_parallel} x pipelineParallel "
                f"{serving.pipeline_parallel} = {needed} GPUs, but the deployment is given "
                f"{len(dep.gpus)} ({list(dep.gpus)}); list at least {needed} GPUs (twice as many allow "
                f"blue/green swaps) or change models.{dep.model}.serving / deployments[{i}].overrides"
            )
        if host.gpus.count == 0 and (dep.gpus or needed != 1):
            errors.append(
                f"{key}.gpus: host {host.name!r} has no GPUs (hosts[].gpus.count: 0); a CPU deployment "
                "takes gpus: [] and tensorParallel 1"
            )
        if host.gpus.count > 0 and dep.gpus:
            budget = gpu_budget_gib(host, needed, serving.gpu_memory_utilization)
            limit = budget * (1 - KV_CACHE_HEADROOM)
            if model.size_gib > limit:
                errors.append(
                    f"{key}.model: {dep.model} needs about {model.size_gib:.0f} GiB for its weights "
                    f"(models.{dep.model}.sizeGb {model.size_gb:g}), but {needed} x "
                    f"{host.gpus.memory_gib:g} GiB x gpuMemoryUtilization {serving.gpu_memory_utilization:g} "
                    f"= {budget:.0f} GiB leaves less than {KV_CACHE_HEADROOM:.0%} for the KV cache "
                    f"(limit {limit:.0f} GiB); give it more GPUs or a smaller quantization"
                )
        release = vllm_release(host.runtime.vllm_version)
        for arg in serving.extra_args:
            removed = REMOVED_FLAGS.get(canonical_flag(arg))
            if release is not None and removed is not None and release >= removed[0]:
                source = (
                    f"deployments[{i}].overrides.extraArgs"
                    if dep.overrides.extra_args is not None
                    else f"models.{dep.model}.serving.extraArgs"
                )
                errors.append(
                    f"vllm-fleet:{source}: {arg!r} was removed in vLLM {'.'.join(map(str, removed[0]))}, and host "
                    f"{host.name!r} runs vLLM {host.runtime.vllm_version} (hosts[].runtime.vllmVersion); "
                    f"{removed[1]}"
                )
        resolved_unit = dep.unit_name or "vllm-" + dep.model.replace(".", "")
        if (unit_owner := _claimed_before(claimed_units, (dep.host, resolved_unit), dep.name)) is not None:
            errors.append(
                f"{key}.unitName: unit {resolved_unit}.service on host {dep.host!r} is already "
                f"used by deployment {unit_owner!r}; set deployments[{i}].unitName"
            )
    return errors


def _rollout_errors(stack: StackConfig) -> list[str]:
    errors: list[str] = []
    first: dict[str, tuple[int, int]] = {}
    for i, dep in enumerate(stack.deployments):
        if dep.rollout is None:
            continue
        j, limit = first.setdefault(dep.rollout.group, (i, dep.rollout.max_unavailable))
        if limit != dep.rollout.max_unavailable:
            errors.append(
                f"vllm-fleet:deployments[{i}].rollout.maxUnavailable: {dep.rollout.max_unavailable} differs "
                f"from {limit} of deployments[{j}] in group {dep.rollout.group!r}; give the group one value"
            )
    return errors


def _multi_node_errors(stack: StackConfig, hosts: dict[str, Host], storage_by_host: dict[str, Storage]) -> list[str]:
    errors: list[str] = []
    for i, dep in enumerate(stack.deployments):
        if not dep.nodes:
            continue
        key = f"vllm-fleet:deployments[{i}].nodes"
        model = stack.models.get(dep.model)
        if dep.nodes[0] != dep.host or len(dep.nodes) < 2 or len(set(dep.nodes)) != len(dep.nodes):
            errors.append(
                f"{key}: {list(dep.nodes)} must list two or more different hosts, the head first, and the head "
                f"is deployments[{i}].host ({dep.host!r})"
            )
            continue
        unknown = [n for n in dep.nodes if n not in hosts]
        if unknown:
            errors.append(f"{key}: unknown host(s) {unknown}; {_use_a_host(hosts, unknown[0])}")
            continue
        for node in dep.nodes:
            if hosts[node].cluster is None:
                errors.append(
                    f"{key}: host {node!r} has no hosts[].cluster (address and interface of the private network "
                    "the nodes reach each other on); add it"
                )
            if node not in storage_by_host:
                errors.append(f"{key}: host {node!r} has no storage; every node loads the model from its own")
            elif dep.host in storage_by_host and storage_by_host[node].path != storage_by_host[dep.host].path:
                errors.append(
                    f"{key}: storage path {storage_by_host[node].path} of {node!r} differs from "
                    f"{storage_by_host[dep.host].path} of the head {dep.host!r}; every node must see the model "
                    "at the same path"
                )
        if dep.distributed_backend is DistributedBackend.RAY:
            errors.append(
                f"vllm-fleet:deployments[{i}].distributedBackend: ray is not built yet (no Ray on the sandbox to "
                "test it against); use mp, vLLM's own multi-node engine"
            )
        gpu_counts = {hosts[n].gpus.count for n in dep.nodes if n in hosts}
        if len(gpu_counts) > 1:
            errors.append(f"{key}: the nodes have different GPU counts {sorted(gpu_counts)}; use equal hosts")
        if model is None:
            continue
        serving = dep.overrides.apply(model.serving)
        total = serving.tensor_parallel * serving.pipeline_parallel
        if total != len(dep.gpus) * len(dep.nodes):
            errors.append(
                f"vllm-fleet:deployments[{i}].gpus: tensorParallel {serving.tensor_parallel} x pipelineParallel "
                f"{serving.pipeline_parallel} = {total} GPUs must equal {len(dep.gpus)} GPUs per node x "
                f"{len(dep.nodes)} nodes; list {total // len(dep.nodes) if total % len(dep.nodes) == 0 else '?'} "
                "GPUs per node (a multi-node deployment swaps stop-start, so no spare ones)"
            )
    return errors


def _disk_errors(stack: StackConfig) -> list[str]:
    errors: list[str] = []
    for i, store in enumerate(stack.storage):
        dirs: dict[str, str] = {}
        for name in stack.wanted_models_on(store.name):
            directory = f"{store.path}/{stack.models[name].dir}"
            if directory in dirs:
                errors.append(
                    f"vllm-fleet:models.{name}.dir: {directory} is also the directory of {dirs[directory]} on "
                    f"storage {store.name!r}; give each model a dir of its own"
                )
            dirs.setdefault(directory, name)
            hf_home = store.effective_hf_home
            if hf_home == directory or hf_home.startswith(directory + "/") or directory.startswith(hf_home + "/"):
                errors.append(
                    f"vllm-fleet:models.{name}.dir: {directory} overlaps the Hugging Face home {hf_home} "
                    f"(storage[{i}].hfHome); give the model another dir"
                )
        # Adapters count too: they sit on the storage beside the models, by their downloads' names
        # (StackConfig.downloads_on). Their sizes are read here, not their downloads built: an adapter whose
        # name is too long for its directory has no download, and adapter_errors says so.
        sizes = {m: stack.models[m].size_gb for m in stack.wanted_models_on(store.name)}
        sizes.update(
            {adapter_download_name(a): stack.adapters[a].size_gb for a in stack.wanted_adapters_on(store.name)}
        )
        total = sum(sizes.values())
        usable = store.capacity_gb - store.free_margin_gb
        if total > usable:
            listing = ", ".join(f"{m} {size:g} GB" for m, size in sizes.items())
            errors.append(
                f"vllm-fleet:storage[{i}].capacityGb: models kept on {store.name!r} need "
                f"{total:g} GB ({listing}) but capacity {store.capacity_gb:g} GB minus margin "
                f"{store.free_margin_gb:g} GB leaves {usable:g} GB; set keep: false on a model "
                "no deployment serves, or add capacity"
            )
    return errors


def _overlap(a: str, b: str) -> bool:
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _unique(errors: list[str], key: str, names: list[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            errors.append(f"vllm-fleet:{key}[{i}].name: {name!r} is used twice; names must be unique")
        seen.add(name)


def adapter_errors(stack: StackConfig) -> list[str]:
    """LoRA adapters: each listed one exists, fits the model the deployment serves, has a name no client
    could mean as the model, and the engine is launched to serve as many as are listed."""
    errors: list[str] = []
    # Its files go in a directory named after it (adapter-<name>), which must be a name itself.
    longest = MAX_NAME_LENGTH - len(adapter_download_name(""))
    for name, adapter in stack.adapters.items():
        if len(name) > longest:
            errors.append(
                f"vllm-fleet:adapters.{name}: the name is {len(name)} characters; at most {longest}, as its files go "
                f"in {adapter_download_name('<name>')}, a name of at most {MAX_NAME_LENGTH} characters"
            )
        for base in adapter.bases:
            if base not in stack.models:
                errors.append(
                    f"vllm-fleet:adapters.{name}.bases: {base!r} is no key of vllm-fleet:models; name the models "
                    "the adapter was trained on"
                )
    for i, dep in enumerate(stack.deployments):
        key = f"vllm-fleet:deployments[{i}].adapters"
        model = stack.models.get(dep.model)
        if not dep.adapters or model is None:
            continue
        if len(set(dep.adapters)) != len(dep.adapters):
            errors.append(f"{key}: {list(dep.adapters)} lists an adapter twice; list each once")
        for name in dep.adapters:
            listed = stack.adapters.get(name)
            if listed is None:
                errors.append(f"{key}: {name!r} is no key of vllm-fleet:adapters; declare it there (repo, revision)")
            elif dep.model not in listed.bases:
                errors.append(
                    f"{key}: adapter {name!r} is a LoRA adapter of {', '.join(listed.bases)} "
                    f"(vllm-fleet:adapters.{name}.bases), not of {dep.model}, which this deployment serves; "
                    f"remove it from the list or add {dep.model} to its bases if it was trained for it"
                )
            if name in dep.served_names:
                errors.append(
                    f"{key}: adapter {name!r} is also a name the deployment serves its model as (servedModelName "
                    "/ alsoServedAs); clients could not tell them apart: rename one"
                )
        lora = dep.overrides.apply(model.serving).lora
        if lora is None:
            errors.append(
                f"{key}: the engine is not launched for LoRA; set vllm-fleet:models.{dep.model}.serving.lora "
                f"(or vllm-fleet:deployments[{i}].overrides.lora), e.g. {{maxLoras: 4, maxLoraRank: 16}} "
                "(one restart; adapters come and go without one after it)"
            )
        elif len(set(dep.adapters)) > lora.adapters_held:
            errors.append(
                f"{key}: {len(set(dep.adapters))} adapters but the engine holds {lora.adapters_held} at once "
                "(serving.lora.maxCpuLoras, else maxLoras); raise it or list fewer"
            )
        if dep.nodes:
            errors.append(f"{key}: a deployment across hosts (nodes) cannot serve adapters yet; serve them on one host")
    return errors
