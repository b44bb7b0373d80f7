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
        # issue 41, item 1: a credential word inside the name
        "OTP_SEED",
        "HFTOKENB64",
        "WALLET_SEED_BASE64",
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
        "SEED",
        "RANDOM_SEED",
        "PYTHONHASHSEED",
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
        # issue 41, item 1: in their vendors' formats, and in the commands and forms the issue names
        ("HF=hf_" + "aBcDeFgHiJ" * 3 + "kLmN", "HF=***"),
        (
            "git push https://x:ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8@github.com",
            "git push https://x:***@github.com",
        ),
        ("KEY_ID=AKIAIOSFODNN7EXAMPLE,region=us-east-1", "KEY_ID=***,region=us-east-1"),
        ("curl -u bench:pw-123 https://db.example", "curl -u bench:*** https://db.example"),
        ("docker login -u bench -p pw-123 nvcr.io", "docker login -u bench -p *** nvcr.io"),
        ("password\tpw-123", "password\t***"),
        ("api-key pw-123", "api-key ***"),
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
        # issue 41, item 1: Run:ai's error, once masked as "POST /token: *** TLS certificate..."
        "POST /token: the TLS certificate of nvidia.run.ai:443 was refused (certificate has "
        "expired); nothing was sent to it. A server whose certificate a private certificate "
        "authority signed is trusted once SSL_CERT_FILE names that authority's certificate",
        "the access token: the server refused it",
        "--seed 1234 --data-seed 5",
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
        # issue 41, item 1: named by its vendor's format
        ("FOO=--header=x-gh:ghp_" + "Zz09yY18xX" * 3 + "abcdef", "a GitHub token"),
        ("FOO=AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
        ("FOO=" + "hf_" + "QwErTyUiOp" * 3 + "asdf", "a Hugging Face access token"),
    ],
    # not the values: the test's id is in this process's environment (PYTEST_CURRENT_TEST), where
    # a credential is a secret of "this shell"
    ids=["url", "name", "query", "github", "aws", "hugging-face"],
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
    assert item.split("=", 1)[1] not in result.err + result.out


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
