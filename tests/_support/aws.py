"""AWS credentials for tests: botocore's standard chain pointed at a fake, and nothing else."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from proctor.testing import FakeBedrockServer

_CHAIN = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)


def isolated_aws(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Callable[[FakeBedrockServer], None]:
    """Clear the chain (no host profile, no metadata service); the returned function
    sets a fake's credentials and region in the environment."""
    for name in _CHAIN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def use(fake: FakeBedrockServer) -> None:
        for name, value in fake.environ().items():
            monkeypatch.setenv(name, value)

    return use
