"""The programs that run on each GPU server, next to systemd and vLLM, rather than on the controller.

One package, standard library only (vllm_parser also imports the host's own vLLM, hf_download
huggingface_hub), because it runs under whatever Python the host's vLLM venv has:
  contract    the shapes that cross the wire (plan, active record, claims, the survey, status) and every
              path on a host
  facts       one reading of the host: processes and their units, nvidia-smi, sockets, unit launches
  judgement   the one judgement of a swap, which the preview and the swap both call, and the one GPU-holder
              rule, which the GPU-release guard applies too
  console     a tool's progress lines (`say`, which ends the tool when its SSH session is gone), lists of names
  tools/      the tools' entry points, one module per tool, named after it (render/host_bundle.TOOLS):
              swap, survey, status, gpu_release_guard, wait_ready, model_sync, prewarm, vllm_args_check,
              node, node_watch, clean_shm, adapters, step. The rest of the package is the library they
              share (the swap's transaction, systemd, front_door; survey and status, the readings their
              tools print; model_files and hf_download; page_cache; vllm_parser, the host's own vLLM
              parser); no module of it imports host.tools.
render/host_bundle.py ships it as one archive with a launcher per tool (/usr/local/lib/vllm-fleet/),
and pipes the same archive into the host's python for the survey before anything is installed.
"""
