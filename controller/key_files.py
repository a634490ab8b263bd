"""Key files that the stack's `...File` keys name on this machine (the SSH key, the TLS key), read before
any resource exists."""

from __future__ import annotations

import pulumi

from models.loader import ConfigError, read_key_file


def key_file_text(config: pulumi.Config, key: str, made_by: str) -> str | None:
    """The text of the file that vllm-fleet:`key` names, or None when the key is not set; a missing file
    stops the preview with the key and the fix (the sandbox makes its own: `made_by` says what)."""
    value = config.get(key)
    if value is None:
        return None
    try:
        return read_key_file(key, value, made_by)
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
