"""Ask the deployed model something through the stack's endpoint output, with the real OpenAI client."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from openai import OpenAI


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--prompt", default="Say hello to the fleet.")
    args = parser.parse_args()
    outputs = json.loads(
        subprocess.run(
            ["pulumi", "stack", "output", "deployments", "--json", "--stack", args.stack],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    for name, deployment in outputs.items():
        client = OpenAI(base_url=deployment["endpoint"], api_key="unused", timeout=60, max_retries=2)
        reply = client.chat.completions.create(
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
