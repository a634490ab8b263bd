"""The programs that run on each GPU server, next to systemd and vLLM, rather than on the controller.

One package, standard library only (vllm-args-check also imports the host's own vLLM), because it runs
under whatever Python the host's vLLM venv has:
  contract    the shapes that cross the wire (plan, active record, claims, the survey, status) and every
              path on a host
  facts       one reading of the host: processes and their units, nvidia-smi, sockets, unit launches
  judgement   the one judgement of a swap, which the preview and the swap both call, and the one GPU-holder
              rule, which the GPU-release guard applies too
  console     a tool's progress lines (`say`, which ends the tool when its SSH session is gone), lists of names
  the tools   swap (transaction, systemd, front_door), survey, status, gpu_release_guard, wait_ready,
              model_sync (model_files: the manifest and hashes; hf_download: the Hub and `hf download`),
              prewarm (page_cache: the reader it and its copy use), vllm_args_check, node (a multi-node
              deployment's node: its check and activation), node_watch (the engine the head's model needs)
render/host_bundle.py ships it as one archive with a launcher per tool (/usr/local/lib/vllm-fleet/),
and pipes the same archive into the host's python for the survey before anything is installed.
"""
