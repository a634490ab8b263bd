"""The programs that run on each GPU server, next to systemd and vLLM, rather than on the controller.

Each module is a single-file tool using only the standard library (and, for vllm-args-check, the host's
own vLLM), because it runs under whatever Python the host's vLLM venv has. `components/render.py` ships
each file by path (HOST_TOOLS) to /usr/local/lib/vllm-fleet/<tool> with the host's tools step; the
tests under tests/host/ import them as this package.
"""
