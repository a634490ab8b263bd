"""How the engine reads the weights, picked from what the host says: `serving.loadFormat` and
`serving.safetensorsLoadStrategy` set to `auto` (the presets' default) are chosen here; a value the stack
sets is used as it is.

The facts, and what they decide (REFERENCE.md sections 3 and 6):
  - whether the page cache can hold the checkpoint: its size against 90% of the host's RAM (vLLM's own
    threshold for its automatic prefetch, which it takes of the RAM available when it loads). One it
    cannot hold is read from storage on every load, and reading it into the page cache first (prefetch)
    evicts itself. The pick reads MemTotal, not MemAvailable: it is rendered into the engine's launch, and
    MemAvailable moves with the page cache and with whatever runs beside the engine, so a checkpoint near
    the line would flip the pick from one preview to the next and restart the engine for nothing. The
    pre-warm and the forecast (models/forecast.py) read MemAvailable: they change nothing that runs;
  - the filesystem of the model's directory: vLLM prefetches by itself only on NFS and Lustre; on another
    network filesystem (VirtioFS, CIFS, CephFS, a FUSE mount) it must be asked to, and on a local disk
    the pre-warm already reads it;
  - the loaders' extras installed beside vLLM: `instanttensor` and `runai_model_streamer` read with their
    own concurrency and without the page cache, the way to read a checkpoint the page cache cannot hold;
  - the vLLM release: `prefetch` came with 0.17, InstantTensor's loader after it.
A fact the host does not report leaves vLLM's own default and is named in the reason. The facts are
the survey's (controller/forecast.load_facts); all of them stay put while the host does (its RAM, its
mounts, its packages), so an unchanged stack renders an unchanged launch. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from models.config import GIB_PER_GB, LoadStrategy
from models.vllm_flags import INSTANTTENSOR_FORMAT_SINCE, LOAD_STRATEGY_FLAG_SINCE, PREFETCH_STRATEGY_SINCE

AUTO = "auto"
# vLLM prefetches by itself (the strategy left at its default) on these (weight_utils.py: is_net_fs).
VLLM_PREFETCHES_ON = frozenset({"nfs", "nfs4", "lustre"})
# Network filesystems on which a lazy mmap reads scattered slices at a fraction of the storage's rate.
NETWORK_FILESYSTEMS = VLLM_PREFETCHES_ON | frozenset(
    {"virtiofs", "cifs", "smb3", "ceph", "glusterfs", "9p", "beegfs", "gpfs", "wekafs", "afs"}
)
# The share of the host's RAM a checkpoint may take for the page cache to hold it (vLLM's own 90%).
PAGE_CACHE_SHARE = 0.9
# The loaders that read without the page cache, best first: (--load-format, its extra's distribution).
DIRECT_LOADERS = (("instanttensor", "instanttensor"), ("runai_streamer", "runai_model_streamer"))


@dataclass(frozen=True)
class LoadFacts:
    """What the pick reads; None where the host did not report it."""

    checkpoint_gb: float
    mem_total_gib: float | None = None  # MemTotal (see above: never MemAvailable)
    filesystem: str | None = None
    extras: Mapping[str, str | None] | None = None  # distribution -> version (None: not installed)
    vllm_release: tuple[int, ...] | None = None
    model_path: str = "the model's directory"


@dataclass(frozen=True)
class LoadChoice:
    load_format: str | None  # None: vLLM's default (its own "auto")
    load_strategy: LoadStrategy | None  # None: vLLM's default (lazy, prefetching by itself on NFS/Lustre)
    why: tuple[str, ...]

    def describe(self) -> str:
        """ "--load-format X, --safetensors-load-strategy Y: because ..." as the preview says it."""
        shown = f"--load-format {self.load_format or 'auto (vLLM default)'}, --safetensors-load-strategy "
        shown += self.load_strategy.value if self.load_strategy is not None else "lazy (vLLM default)"
        return f"{shown}: {'; '.join(self.why)}"


def fits_page_cache(facts: LoadFacts) -> bool | None:
    if facts.mem_total_gib is None:
        return None
    return facts.checkpoint_gb * GIB_PER_GB <= PAGE_CACHE_SHARE * facts.mem_total_gib


def _size(facts: LoadFacts) -> str:
    return f"{facts.checkpoint_gb:g} GB ({facts.checkpoint_gb * GIB_PER_GB:.0f} GiB)"


def pick_format(facts: LoadFacts) -> tuple[str | None, str]:
    """--load-format for `auto`: a loader that reads without the page cache when the page cache cannot
    hold the checkpoint and its extra is installed; vLLM's default otherwise."""
    fits = fits_page_cache(facts)
    if fits is None:
        return None, "vLLM's default loader: the host's RAM is unknown, so whether the page cache holds it is too"
    ram = f"{_size(facts)} {'within' if fits else 'over'} {PAGE_CACHE_SHARE:.0%} of the host's {facts.mem_total_gib:.0f} GiB RAM"
    if fits:
        return None, f"vLLM's default loader: {ram}, so the page cache holds it (the pre-warm fills it)"
    if facts.extras is None:
        return None, f"vLLM's default loader: {ram}, and which loaders' extras the host has is unknown"
    for load_format, extra in DIRECT_LOADERS:
        version = facts.extras.get(extra)
        if version is None:
            continue
        release = facts.vllm_release
        if load_format == "instanttensor" and (release is None or release < INSTANTTENSOR_FORMAT_SINCE):
            continue  # a release that may not have its loader
        return load_format, f"{load_format}: {ram}, and {extra} {version} reads it without the page cache"
    return None, f"vLLM's default loader: {ram}, and neither instanttensor nor runai_model_streamer is installed"


def pick_strategy(facts: LoadFacts, load_format: str | None) -> tuple[LoadStrategy | None, str]:
    """--safetensors-load-strategy for `auto`: prefetch where a network filesystem holds a checkpoint the
    page cache can hold and vLLM would not prefetch by itself; vLLM's default otherwise."""
    if load_format not in (None, "auto", "safetensors", "hf"):
        return None, f"vLLM's default strategy: {load_format} reads the files itself"
    release = facts.vllm_release
    if release is not None and release < LOAD_STRATEGY_FLAG_SINCE:
        return None, f"no strategy flag: vLLM {'.'.join(map(str, release))} predates it"
    fits = fits_page_cache(facts)
    fs = facts.filesystem
    if fs is None:
        return None, f"vLLM's default strategy: the filesystem of {facts.model_path} is unknown"
    if fs not in NETWORK_FILESYSTEMS:
        return None, f"vLLM's default strategy: {facts.model_path} is on {fs}, a local filesystem"
    if fits is None:
        return None, f"vLLM's default strategy: {fs} is a network filesystem, but the host's RAM is unknown"
    if not fits:
        return None, f"lazy: {fs}, but the page cache cannot hold it, and a prefetch would evict itself"
    if fs in VLLM_PREFETCHES_ON:
        return None, f"vLLM's default strategy: on {fs} it prefetches a checkpoint the page cache holds by itself"
    if release is None or release < PREFETCH_STRATEGY_SINCE:
        known = "an unknown vLLM release" if release is None else f"vLLM {'.'.join(map(str, release))}"
        return None, f"vLLM's default strategy: prefetch would suit {fs}, but {known} may not have it (0.17 on)"
    return LoadStrategy.PREFETCH, f"prefetch: {fs} is a network filesystem vLLM does not prefetch from by itself"


def pick_loader(facts: LoadFacts, load_format: str | None, load_strategy: LoadStrategy | None) -> LoadChoice:
    """The launch's loader: the stack's values, where it sets them (anything but `auto`), else the pick."""
    why: list[str] = []
    if load_format in (None, AUTO):
        load_format, reason = pick_format(facts)
        why.append(reason)
    elif load_format is not None:
        why.append(f"--load-format {load_format}: set in the stack")
    strategy: LoadStrategy | None
    if load_strategy in (None, LoadStrategy.AUTO):
        strategy, reason = pick_strategy(facts, load_format)
        why.append(reason)
    else:
        strategy = load_strategy
        if strategy is not None:
            why.append(f"--safetensors-load-strategy {strategy.value}: set in the stack")
    return LoadChoice(load_format, strategy, tuple(why))
