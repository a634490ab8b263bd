"""Ask the deployed model something through the stack's endpoint output, with the real OpenAI client.

It sends a key of the stack's `vllm-fleet:apiKeys` (the first client's, or --client's) and verifies TLS
against --ca-file (default: the sandbox's throwaway CA for an endpoint on this machine, else the
system's trust store)."""

from __future__ import annotations

import argparse
import json
import sys

from scripts.api_client import client, default_ca_file, stack_api_key
from scripts.pulumi_cli import pulumi


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--prompt", default="Say hello to the fleet.")
    parser.add_argument("--client", default=None, help="whose key of vllm-fleet:apiKeys to send")
    parser.add_argument("--ca-file", default=None, help="CA to verify the front door's certificate against")
    args = parser.parse_args()
    outputs = json.loads(pulumi("stack", "output", "deployments", "--json", "--stack", args.stack, check=True).stdout)
    api_key = stack_api_key(args.stack, args.client)
    for name, deployment in outputs.items():
        endpoint = deployment["endpoint"]
        ca_file = args.ca_file or default_ca_file(endpoint)
        openai = client(endpoint, api_key, ca_file, timeout=60, max_retries=2)
        reply = openai.chat.completions.create(
            model=deployment["servedModelName"],
            messages=[{"role": "user", "content": args.prompt}],
            max_tokens=16,
            temperature=0,
        )
        text = reply.choices[0].message.content
        print(f"{name} ({deployment['servedModelName']} at {deployment['endpoint']}): {args.prompt!r} -> {text!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
