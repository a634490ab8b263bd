"""What nvidia-smi says of a machine's GPUs and how they are linked, for the device records: the model,
UUID and PCIe link of each GPU (`--query-gpu`), the matrix of `nvidia-smi topo -m`, the NVLink links of
`nvidia-smi nvlink --status` and a few fields of `nvidia-smi -q` (the form factor is not a query field).
Pure parsers over the text, tested in tests/test_tp8_load.py; `gpu_facts()` runs the commands.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from bench.device.load_rate import command as run
from host.facts import parse_csv, run_nvidia_smi

GPU_QUERY = [
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "power.max_limit",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
]


def parse_gpus(text: str) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=<GPU_QUERY> --format=csv,noheader,nounits`."""
    return parse_csv(text, GPU_QUERY)


def _cells(line: str) -> list[str]:
    # nvidia-smi separates the matrix with tabs; a copy that lost them has runs of spaces instead.
    parts = line.split("\t") if "\t" in line else re.split(r" {2,}", line)
    return [part.strip() for part in parts]


def parse_topo(text: str) -> dict[str, Any]:
    """`nvidia-smi topo -m`: each pair of GPUs' connection (X, NV#, PIX, PXB, PHB, NODE, SYS) and each
    GPU's CPU and NUMA affinity; the legend and the NIC rows are left out."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if _cells(line)[0] == "" and "GPU0" in line), None)
    if header is None:
        raise ValueError("nvidia-smi topo -m printed no matrix")
    columns = [c for c in _cells(lines[header]) if c]
    gpus: list[str] = []
    links: dict[str, str] = {}
    affinity: dict[str, dict[str, str]] = {}
    for line in lines[header + 1 :]:
        if line.startswith("Legend"):
            break
        cells = _cells(line)
        row = cells[0]
        if not re.fullmatch(r"GPU\d+", row):
            continue
        gpus.append(row)
        for column, cell in zip(columns, cells[1:], strict=False):
            if re.fullmatch(r"GPU\d+", column) and column != row:
                links[f"{row}-{column}"] = cell
            elif column in ("CPU Affinity", "NUMA Affinity"):
                affinity.setdefault(row, {})[column] = cell
    return {"gpus": gpus, "links": links, "affinity": affinity}


def nvlink_between_all(topo: dict[str, Any]) -> bool | None:
    """Whether every pair of GPUs is joined by NVLink (NV#); None with fewer than two GPUs."""
    if len(topo["gpus"]) < 2:
        return None
    return all(re.fullmatch(r"NV\d+", kind) is not None for kind in topo["links"].values())


def parse_nvlink_status(text: str) -> dict[str, dict[str, int]]:
    """`nvidia-smi nvlink --status`: per GPU, its active links (a rate) and inactive ones."""
    found: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        gpu = re.match(r"GPU (\d+):", line)
        if gpu:
            current = found.setdefault(gpu.group(1), {"active": 0, "inactive": 0})
            continue
        link = re.match(r"\s+Link \d+: (.*)$", line)
        if link and current is not None:
            current["inactive" if "inactive" in link.group(1).lower() else "active"] += 1
    return found


QUERY_FIELDS = ("Product Name", "Product Brand", "Product Architecture", "Board Part Number", "Minor Number", "Bus Id")


def parse_query(text: str) -> list[dict[str, str]]:
    """`nvidia-smi -q`: a few top-level fields of each GPU's section (the first value of each name)."""
    gpus: list[dict[str, str]] = []
    for line in text.splitlines():
        if re.match(r"GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d", line):
            gpus.append({})
            continue
        name, colon, value = line.partition(":")
        if gpus and colon and name.strip() in QUERY_FIELDS and name.strip() not in gpus[-1]:
            gpus[-1][name.strip()] = value.strip()
    return gpus


def form_factor(names: Sequence[str], nvlink: bool | None) -> str:
    """SXM or PCIe, from what nvidia-smi says: a PCIe card's name says so (`H100 PCIe`, `H200 NVL`), and
    SXM modules are joined by NVLink."""
    if any("PCIe" in name or name.rstrip().endswith(" NVL") for name in names):
        return "PCIe"
    if nvlink:
        return "SXM (NVLink between every pair of GPUs)"
    return "unknown"


def gpu_slug(name: str) -> str:
    """`NVIDIA H100 80GB HBM3` -> `h100`: the model in a record's file name."""
    match = re.search(r"\b([A-Z]{1,3}\d{2,4}[A-Za-z]?)\b", name.replace("NVIDIA", ""))
    return match.group(1).lower() if match else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def gpu_facts() -> dict[str, Any]:
    """The GPUs' table, their links and form factor, with the raw text the judgements came from."""
    query_error = None
    try:
        rows = parse_gpus(run_nvidia_smi([f"--query-gpu={','.join(GPU_QUERY)}", "--format=csv,noheader,nounits"]))
    except (RuntimeError, ValueError, OSError) as error:  # a field this driver does not know, or no nvidia-smi
        rows, query_error = [], str(error)
    topo_text = run("nvidia-smi", "topo", "-m")
    try:
        topo: dict[str, Any] = parse_topo(topo_text)
    except ValueError as error:
        topo = {"gpus": [], "links": {}, "affinity": {}, "error": str(error)}
    nvlink_text = run("nvidia-smi", "nvlink", "--status")
    names = [r["name"] for r in rows]
    nvlink = nvlink_between_all(topo)
    return {
        "count": len(rows),
        "names": names,
        "uuids": [r["uuid"] for r in rows],
        "table": rows,
        "query_error": query_error,
        "query": parse_query(run("nvidia-smi", "-q")),
        "form_factor": form_factor(names, nvlink),
        "nvlink_between_all_pairs": nvlink,
        "topo": topo,
        "topo_matrix": topo_text,
        "nvlink_links": parse_nvlink_status(nvlink_text),
        "nvlink_status": nvlink_text[:20000],
        "driver": run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").splitlines()[:1],
    }
