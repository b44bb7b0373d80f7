"""Secrets recognised and masked by the one mechanism every writer shares (``llmb.redaction``):
by a variable's name and inside any value (issue 21, items 3 and 8). The end-to-end attack, a real
run whose environment holds them, is in tests/test_provenance.py; the refusals are here."""

from __future__ import annotations

import pytest
from llmb import http_safety
from llmb.redaction import credential_in, is_secret_name, mask
from llmb.runs import job_env


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "SSHPASS",
        "GITHUB_PAT",
        "REGISTRY_AUTH",
        "DOCKER_AUTH_CONFIG",
        "SESSION_COOKIE",
        "AZURE_STORAGE_SAS_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "APIKEY",
        "MYSQL_PWD",
        "PGPASS",
        "OAUTH",
        "hf_token",
        "NGC_API_KEY",
        "BLOB_SIG",
        "CI_JOB_JWT",
        "SLACK_WEBHOOK_URL",
        "DB_CREDS",
        "GCP_CREDENTIALS",
    ],
)
def test_secret_names_outside_the_old_word_list_are_recognised(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "TOKENIZERS_PARALLELISM",
        "PWD",
        "OLDPWD",
        "PATH",
        "HTTPS_PROXY",
        "NCCL_IB_HCA",
        "AUTHOR",
        "KEYRING_BACKEND",
        "PASSPORT",
        "XDG_SESSION_ID",
        "BOS_TOKEN",
    ],
)
def test_names_that_only_look_like_secrets_are_not(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("https://user:pw-123@host/x", "https://user:***@host/x"),
        ("https://ghp_token123@github.com/o/r.git", "https://***@github.com/o/r.git"),
        ("redis://:pw-123@cache:6379/0", "redis://***@cache:6379/0"),
        (
            "postgres://db:pw-123@db.example/runs?sslmode=require",
            "postgres://db:***@db.example/runs?sslmode=require",
        ),
        ("proxy-user:pw-123@proxy.example:3128", "proxy-user:***@proxy.example:3128"),
        (
            "https://a.blob.core.windows.net/c/f?sv=2022&sig=AbC%2Bd&se=1",
            "https://a.blob.core.windows.net/c/f?sv=2022&sig=***&se=1",
        ),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=AK&X-Amz-Signature=ff00",
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***",
        ),
        ("host=db user=x password=pw-123", "host=db user=x password=***"),
        ("Authorization: Basic dXNlcjpwdw==", "Authorization: ***"),
        ("curl -H 'Cookie: sid=abc; x=y'", "curl -H 'Cookie: ***"),
        ("answer: bearer abc.def", "answer: bearer ***"),
    ],
)
def test_credentials_inside_values_are_masked(value, shown):
    assert mask(value) == shown
    assert credential_in(value)


@pytest.mark.parametrize(
    "value",
    [
        "/lustre/data:/data:ro",
        "nvcr.io#nvidia/nemo:25.09",
        "git@github.com:o/r.git",
        "https://huggingface.co",
        "mlx5_0:1,mlx5_1:1",
        "user@example.com",
        "--key-file=/etc/k",
        "a=b c=d",
    ],
)
def test_innocent_values_stay_readable(value):
    assert mask(value) == value and credential_in(value) is None


def test_the_http_path_and_the_environment_writers_share_the_mechanism():
    assert http_safety.mask is mask
    environ = {
        "HTTPS_PROXY": "http://u:pw-123456@proxy:3128",
        "SSHPASS": "x",
        "GITHUB_PAT": "ghp_123456",
    }
    assert job_env.redacted(environ) == {
        "GITHUB_PAT": "***",
        "HTTPS_PROXY": "http://u:***@proxy:3128",
        "SSHPASS": "***",
    }


@pytest.mark.parametrize(
    ("item", "what"),
    [
        ("HTTPS_PROXY=http://u:pw-123@proxy:3128", "a password (or token) inside a URL"),
        ("GITHUB_PAT=ghp_12345678", "a secret"),
        ("BLOB=https://a.blob.core.windows.net/c?sig=abc", "a credential in a query parameter"),
    ],
)
def test_env_flags_carrying_a_credential_are_refused_and_never_echoed(cli, item, what):
    result = cli(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "8",
        "--backend",
        "slurm",
        "--dry-run",
        "--env",
        item,
    )
    name = item.split("=")[0]
    assert result.code == 2 and f"--env {name}=...: {what} would be written" in result.err, (
        result.err
    )
    assert f"--secret {name}" in result.err
    secret = item.split("=", 1)[1].split("@")[0].rsplit(":", 1)[-1].split("sig=")[-1]
    assert secret not in result.err + result.out


@pytest.mark.parametrize(
    "text",
    [
        "env:\n  HTTPS_PROXY: http://proxy-user:pw-9876@proxy.example:3128\n",
        "env:\n  PIP_INDEX_URL: https://pypi-user:pw-9876@pypi.example/simple\n",
        'env:\n  SAS_URL_X: "https://a.blob.core.windows.net/c?sv=1&sig=pw-9876"\n',
        "env:\n  SSHPASS: pw-9876\n",
    ],
)
def test_the_cluster_file_refuses_a_password_in_a_url(llmb_proc, tmp_path, text):
    install = tmp_path / "install"
    install.mkdir()
    (install / "cluster.yaml").write_text(text)
    result = llmb_proc("config", "show", env={"LLMB_INSTALL": str(install)})
    assert result.code == 2 and "never goes in a file" in result.err, result.err
    assert "pw-9876" not in result.err + result.out and "Traceback" not in result.err
