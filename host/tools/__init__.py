"""The host's tools: one module per tool of render/host_bundle.TOOLS, named after it, each with the `main()`
its launcher (/usr/local/lib/vllm-fleet/<tool>) runs. The rest of host/ is the library they share; no
module of it imports host.tools."""
