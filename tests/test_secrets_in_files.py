"""No secret in clear in any file a run writes or ``llmb archive`` packs (issue 32, item 2).

Each attack is performed for real: ``llmb run --dry-run`` on this machine and on Slurm with the
credential in ``--env`` or ``--framework-arg``, a real local proxy run whose shell holds secrets
(under names llmb did not recognise before, and inside the values of innocent variables) with
``--dump-env``, and ``llmb archive`` of that run and of a run an earlier llmb recorded in clear.
Then every file under ``$LLMB_INSTALL`` (the experiment directory, the job record, the results
database) and every member of the archive is read, and no secret's value may be in any of them.
One mechanism masks them all (``llmb.redaction``, through ``llmb.runs.experiment.write_json``/
``write_text`` and the archive's packing); what the job reads (``run.json``) is refused, never
masked, since masking it would change the run.

Issue 41, item 1: credentials in their vendors' own formats (``hf_...``, ``ghp_...``,
``github_pat_...``, ``AKIA...``, and every other format of ``data/secrets.yaml``, each generated
here from its prefix, alphabet and length), ``curl -u user:pw``, ``docker login -p X``,
``password<TAB>X``, ``api-key X``, and the names ``OTP_SEED`` and ``HFTOKENB64``, by the same real
run, dry runs and archive."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import re
import secrets
import string
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from llmb import redaction
from llmb.redaction import credential_in, is_secret_key, is_secret_name, mask, scrub
from llmb.runs import experiment

torch_needed = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="the torch engine needs torch (./dev.sh installs torch==2.13.0)",
)
LOCAL = ["llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "2"]
PROXY = [*LOCAL, "--proxy", "tiny", "--steps", "3", "--no-window-check"]
SLURM = ["llama31", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8"]
SLURM += ["--backend", "slurm"]


def secret(prefix: str = "s") -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def jwt(signature: str) -> str:
    return f"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJjaS1qb2IiLCJpYXQiOjF9.{signature}"


# The attacks of the issue: a value that carries a credential ({} is the credential).
IN_VALUES = {
    "password flag": "--password={}",
    "token flag": "--token={}",
    "token flag, next word": "--token {}",
    "api key flag": "--api-key={}",
    "yaml": "password: {}",
    "json": '{{"password": "{}"}}',
    "mysql": "mysql -h db -u bench -p{} runs",
    "jwt": jwt("{}"),
    "url password with / and #": "https://bench:ab/c#d{}@db.example/runs",
    "url password with /": "postgres://bench:{}/x@db.example:5432/runs",
    # issue 41, item 1
    "curl -u": "curl -sS -u bench:{} https://db.example/runs",
    "docker login -p": "docker login -u bench -p {} nvcr.io",
    "password, a tab, the value": "password\t{}",
    "api-key, a blank, the value": "api-key {}",
}


def _characters(alphabet: str) -> str:
    """The characters of a character class's inside (``A-Za-z0-9_-``)."""
    out, at = [], 0
    while at < len(alphabet):
        if at + 2 < len(alphabet) and alphabet[at + 1] == "-":
            out += [chr(c) for c in range(ord(alphabet[at]), ord(alphabet[at + 2]) + 1)]
            at += 3
        else:
            out.append(alphabet[at])
            at += 1
    return "".join(out)


# The formats as the data file gives them (read here from the file itself, so that a masking that does
# not know them fails each test, rather than the module's collection).
SECRETS_DATA = (
    Path(__file__).resolve().parents[1] / "core" / "src" / "llmb" / "data" / "secrets.yaml"
)


@dataclass(frozen=True)
class Format:
    name: str
    document: str
    prefixes: tuple[str, ...]
    alphabet: str
    least: int
    most: int | None


def _formats() -> list[Format]:
    table = yaml.safe_load(SECRETS_DATA.read_text())
    return [
        Format(
            f["name"],
            f["document"],
            tuple(f["prefixes"]),
            table["alphabets"][f["alphabet"]],
            *f["length"],
        )
        for f in table["token_formats"]
    ]


TOKEN_FORMATS = _formats()


def vendor_token(form: Format, prefix: str, length: int | None = None) -> str:
    """A random credential of ``form`` (``data/secrets.yaml``), its body ``length`` long (by default
    the least length, or 40 where that is more and allowed). It begins and ends with a letter or
    digit, as the vendors' do."""
    if length is None:
        length = max(form.least, min(40, form.most or 40))
    core = [c for c in _characters(form.alphabet) if c in string.ascii_letters + string.digits]
    inside = _characters(form.alphabet)
    body = [secrets.choice(core)] + [secrets.choice(inside) for _ in range(length - 2)]
    return prefix + "".join(body + [secrets.choice(core)])[:length]


FORMATS = [(form, prefix) for form in TOKEN_FORMATS for prefix in form.prefixes]
FORMAT_IDS = [prefix for _, prefix in FORMATS]


def the_issues_tokens() -> dict[str, str]:
    """The tokens of issue 41, item 1, as their vendors issue them, and one of every other format."""
    upper = string.ascii_uppercase + string.digits
    alnum = string.ascii_letters + string.digits
    tokens = {
        "Hugging Face": "hf_" + "".join(secrets.choice(string.ascii_letters) for _ in range(34)),
        "GitHub classic": "ghp_" + "".join(secrets.choice(alnum) for _ in range(36)),
        "GitHub fine-grained": "github_pat_11"
        + "".join(secrets.choice(alnum) for _ in range(20))
        + "_"
        + "".join(secrets.choice(alnum) for _ in range(59)),
        "AWS": "AKIA" + "".join(secrets.choice(upper) for _ in range(16)),
    }
    tokens.update({prefix: vendor_token(form, prefix) for form, prefix in FORMATS})
    return tokens


def every_file(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def assert_nowhere(values, *, files=(), texts=()) -> None:
    """None of ``values`` in any of ``files`` (bytes) or ``texts``."""
    for path in files:
        data = path.read_bytes()
        for value in values:
            assert value.encode() not in data, f"{path} holds a secret's value"
    for text in texts:
        for value in values:
            assert value not in text, f"a secret's value was printed: {text[-2000:]}"


def archive_members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


# ------------------------------------------------------------------ the one masking function


@pytest.mark.parametrize("attack", list(IN_VALUES))
def test_every_credential_inside_a_value_is_masked_and_refused(attack):
    value = secret()
    text = IN_VALUES[attack].format(value)
    masked = mask(text)
    assert value not in masked and redaction.MASK in masked, masked
    assert credential_in(text)


@pytest.mark.parametrize(("form", "prefix"), FORMATS, ids=FORMAT_IDS)
def test_every_vendor_token_format_is_masked_wherever_it_stands(form, prefix):
    lengths = {form.least, form.most or form.least + 60, max(form.least, min(40, form.most or 40))}
    for length in sorted(lengths):
        token = vendor_token(form, prefix, length)
        for text in (token, f"FOO={token}", f"x '{token}', y", f"--header=X-Key:{token}\n"):
            masked = mask(text)
            assert token not in masked and masked == text.replace(token, redaction.MASK), masked
        assert credential_in(f"FOO={token}") == form.name


@pytest.mark.parametrize(("form", "prefix"), FORMATS, ids=FORMAT_IDS)
def test_what_only_looks_like_a_vendor_token_is_kept(form, prefix):
    near = [vendor_token(form, prefix, form.least)[:-1]]  # one character short
    if not any(other in prefix[1:] for _, other in FORMATS):  # xoxe.xoxp-: a xoxp- token inside
        near += ["x" + vendor_token(form, prefix), "9" + vendor_token(form, prefix)]  # in a word
    if form.most is not None:
        near.append(vendor_token(form, prefix, form.most + 1))  # longer than the vendor's
    for text in near:
        assert mask(text) == text and credential_in(text) is None, text


def test_the_masking_knows_every_token_format_of_its_data_file():
    known = [
        Format(f.name, f.document, f.prefixes, f.alphabet, f.least, f.most)
        for f in redaction.token_formats()
    ]
    assert known == TOKEN_FORMATS


def test_every_vendor_token_format_names_the_document_that_gives_it():
    for form in TOKEN_FORMATS:
        assert form.name.startswith(("a ", "an ")) and form.prefixes, form
        # a public document, named: no path of a file users do not have
        assert form.document and "/" not in form.document and ".py" not in form.document, form
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+", "".join(form.prefixes)), form


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("--password=pw-123456 --steps 3", "--password=*** --steps 3"),
        ("--token pw-123456 --steps 3", "--token *** --steps 3"),
        ('{"password": "pw-123456", "user": "b"}', '{"password": "***", "user": "b"}'),
        ("mysql -u b -ppw-123456 runs", "mysql -u b -p*** runs"),
        ("https://b:ab/c#dpw@db.example/x", "https://b:***@db.example/x"),
        ("logger.comet_api_key=pw-123456", "logger.comet_api_key=***"),
        ("apiKey: pw-123456", "apiKey: ***"),
        ("curl -u bench:pw-123456 https://x", "curl -u bench:*** https://x"),
        ("/usr/bin/curl --user=bench:pw-123456 x", "/usr/bin/curl --user=bench:*** x"),
        ("docker login -u bench -p pw-123456 nvcr.io", "docker login -u bench -p *** nvcr.io"),
        ("podman  login -ppw-123456 nvcr.io", "podman  login -p*** nvcr.io"),
        ("user\tbench\npassword\tpw-123456\n", "user\tbench\npassword\t***\n"),
        ("api-key pw-123456 --steps 3", "api-key *** --steps 3"),
        ("otp_seed=JBSWY3DPEHPK3PXP", "otp_seed=***"),
        ("token_b64: aGZfeHh4", "token_b64: ***"),
    ],
)
def test_the_names_and_the_rest_of_the_value_stay_readable(text, shown):
    assert mask(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "model.linear_key_head_dim=8",
        "data.tokenizer.bos_token=<s>",
        "--pad-token 0",
        "--max-tokens 4096",
        "--key-file=/etc/k",
        "--token --steps 3",
        "https://host:8080/a@b",
        "https://example.com/x?email=a@b.com",
        "code=$?",
        "HF_TOKEN=$HF_TOKEN",
        "-pthread -O2",
        # issue 41, item 1: a path's last part, and words of a sentence, are no settings
        "POST /token: the TLS certificate of 127.0.0.1:443 was refused (certificate has expired)",
        "POST /token: Run:ai 503 Service Unavailable, still after 5 retries",
        "cat: /etc/app/password: No such file or directory",
        "invalid token: the server refused it",
        "invalid api-key provided",
        "--seed 1234",
        "random_seed=42",
        "curl -sS https://example.com/x -o out",
        "docker login nvcr.io --password-stdin",
        "sk-learn-benchmark",
        "hf_hub_offline=1",
    ],
)
def test_settings_that_only_look_like_secrets_are_kept(text):
    assert mask(text) == text and credential_in(text) is None


@pytest.mark.parametrize(
    "name",
    [
        "CI_JOB_JWT",
        "SLACK_WEBHOOK_URL",
        "DB_CREDS",
        "DB_CREDENTIALS",
        "MY_API_KEY",
        "SENTRY_DSN",
        # issue 41, item 1
        "OTP_SEED",
        "TOTPSEED",
        "MFA_SEED",
        "HFTOKENB64",
        "HF_TOKEN_BASE64",
        "PASSWORD_B64",
        "APIKEYHEX",
    ],
)
def test_names_of_the_issue_are_secrets(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["SEED", "RANDOM_SEED", "PYTHONHASHSEED", "DATA_SEED", "COLOR_HEX", "B64"]
)
def test_a_seed_or_an_encoding_alone_names_no_secret(name):
    assert not is_secret_name(name)


def test_framework_argument_paths_are_secrets_by_their_last_word():
    assert is_secret_key("logger.comet_api_key") and is_secret_key("logger.wandb_api_key")
    assert not is_secret_key("model.linear_key_head_dim")
    assert not is_secret_key("data.tokenizer.eos_token")
    assert not is_secret_key("logger.mlflow_tracking_uri")  # its credential is inside the URL


def test_a_secret_of_the_environment_is_masked_wherever_it_reappears(monkeypatch):
    hf, proxy_password = secret("hf_"), secret()
    monkeypatch.setenv("HF_TOKEN", hf)
    monkeypatch.setenv("HTTPS_PROXY", f"http://proxy-user:{proxy_password}@proxy.example:3128")
    known = redaction.environment_secrets()
    assert hf in known and proxy_password in known
    assert mask(f"FOO=x{hf}y --pw-file {proxy_password}", known) == "FOO=x***y --pw-file ***"


def test_every_record_written_goes_through_the_masking(tmp_path, monkeypatch):
    hf, comet, db = secret("hf_"), secret(), secret()
    monkeypatch.setenv("HF_TOKEN", hf)
    record = {
        "env": {"FOO": f"copy-{hf}", "DOCKER_AUTH_CONFIG": "x" * 8, "PATH": "/usr/bin"},
        "tuned": [{"setting": "logger.comet_api_key", "published": None, "run": comet}],
        "warnings": [f"mysql -p{db} said no"],
        "steps": 3,
    }
    experiment.write_json(str(tmp_path / "r.json"), record)
    written = (tmp_path / "r.json").read_text()
    assert_nowhere([hf, comet, db, "x" * 8], texts=[written])
    data = json.loads(written)
    assert data["env"] == {"FOO": "copy-***", "DOCKER_AUTH_CONFIG": "***", "PATH": "/usr/bin"}
    assert data["tuned"][0] == {"setting": "logger.comet_api_key", "published": None, "run": "***"}
    assert data["steps"] == 3
    experiment.write_text(str(tmp_path / "env.txt"), f"FOO='--api-key={db}'\nBAR={hf}\n")
    assert (tmp_path / "env.txt").read_text() == "FOO='--api-key=***'\nBAR=***\n"
    assert scrub(data) == data  # masking what is masked changes nothing


def test_a_run_spec_that_would_carry_a_secret_is_named_not_masked():
    spec = {"env": {"FOO": "--token=abcdefgh"}, "framework_config": {"x": {"comet_api_key": "k"}}}
    assert redaction.differences(spec, known=()) == ["env.FOO", "framework_config.x.comet_api_key"]


@pytest.mark.parametrize(
    "unit",
    [
        "a://",
        "=a:xxxx",
        "eyJa.",
        "--password ",
        '"password": "',
        "mysql -p",
        "https://u:p",
        "x.key:",
        # issue 41, item 1
        "hf_" + "a" * 29 + " ",
        "AKIA" * 5,
        "glpat-" * 4,
        "xoxb-",
        "curl -u a:",
        "docker login -p ",
        "password\t",
        "api-key ",
        "/token: the ",
    ],
)
def test_masking_takes_time_linear_in_the_text(unit):
    def took(n: int) -> float:
        """The least CPU time of five maskings (CPU time: other processes on a loaded machine take
        wall time from this one, not CPU time)."""
        text = unit * (n // len(unit))
        best = float("inf")
        for _ in range(5):
            start = time.process_time()
            mask(text, ["zzzzzzzz"])
            best = min(best, time.process_time() - start)
        return best

    small, large = took(50_000), took(500_000)
    # ten times the text: about ten times the time (a quadratic pattern would take a hundred)
    assert large < 40 * max(small, 2e-3), (small, large)


# ------------------------------------------------------------------ dry runs: refused, nothing printed


def _dry_attacks() -> list[tuple[str, str, str]]:
    """(id, --env item, the secret) for every attack the issue lists through --env."""
    out = []
    for attack, template in IN_VALUES.items():
        value = secret()
        out.append((attack, f"FOO={template.format(value)}", value))
    for name in ("CI_JOB_JWT", "SLACK_WEBHOOK_URL", "DB_CREDS"):
        value = secret()
        item = (
            f"{name}=https://hooks.slack.com/services/T000/B000/{value}"
            if "WEBHOOK" in name
            else f"{name}={value}"
        )
        out.append((name, item, value))
    return out


DRY_ATTACKS = _dry_attacks()


@pytest.mark.parametrize("backend", ["local", "slurm"])
@pytest.mark.parametrize(("attack", "item", "value"), DRY_ATTACKS, ids=[a[0] for a in DRY_ATTACKS])
def test_a_dry_run_with_a_credential_in_env_prints_and_writes_none(
    llmb_proc, tmp_path, backend, attack, item, value
):
    install = tmp_path / "install"
    run = PROXY if backend == "local" else SLURM
    result = llmb_proc(
        "run", *run, "--dry-run", "--json", "--env", item, env={"LLMB_INSTALL": str(install)}
    )
    assert_nowhere([value], files=every_file(tmp_path), texts=[result.out + result.err])
    name = item.split("=", 1)[0]
    assert result.code == 2 and f"--env {name}=..." in result.err, result.err[-2000:]


VENDOR_TOKENS = [(form, vendor_token(form, form.prefixes[0])) for form in TOKEN_FORMATS]


@pytest.mark.parametrize(
    ("form", "token"), VENDOR_TOKENS, ids=[form.prefixes[0] for form, _ in VENDOR_TOKENS]
)
def test_a_dry_run_with_a_vendor_token_in_env_is_refused_naming_it(
    llmb_proc, tmp_path, form, token
):
    """Issue 41, item 1: ``--env FOO=hf_...`` was written into run.json and provenance.json."""
    result = llmb_proc(
        "run",
        *PROXY,
        "--dry-run",
        "--json",
        "--env",
        f"FOO=x {token} y",
        env={"LLMB_INSTALL": str(tmp_path / "install")},
    )
    assert_nowhere([token], files=every_file(tmp_path), texts=[result.out + result.err])
    assert result.code == 2, result.err[-2000:]
    assert f"--env FOO=...: {form.name} would be written" in result.err, result.err[-2000:]


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_a_secrets_value_given_under_another_name_is_refused(llmb_proc, tmp_path, backend):
    hf, app = secret("hf_"), secret()
    run = PROXY if backend == "local" else SLURM
    env = {"LLMB_INSTALL": str(tmp_path / "install"), "HF_TOKEN": hf, "APP_SECRET": app}
    for item in (f"FOO=x-{hf}", f"BAR={app}"):
        result = llmb_proc("run", *run, "--dry-run", "--json", "--env", item, env=env)
        assert result.code == 2 and "the value of a secret variable" in result.err, result.err
        assert_nowhere([hf, app], files=every_file(tmp_path), texts=[result.out + result.err])


@pytest.mark.parametrize(
    "template",
    [
        "logger.comet_api_key={}",
        "logger.mlflow_tracking_uri=https://ml:ab/c#d{}@mlflow.example/",
        "logger.wandb_exp_name=--token={}",
    ],
)
def test_a_framework_argument_carrying_a_credential_is_refused(llmb_proc, tmp_path, template):
    value = secret()
    result = llmb_proc(
        "run",
        *SLURM,
        "--dry-run",
        "--json",
        "--framework-arg",
        template.format(value),
        env={"LLMB_INSTALL": str(tmp_path / "install")},
    )
    assert_nowhere([value], files=every_file(tmp_path), texts=[result.out + result.err])
    path = template.split("=", 1)[0]
    assert result.code == 2 and f"--framework-arg {path}=..." in result.err, result.err[-2000:]
    assert "--secret NAME" in result.err


# ------------------------------------------------------------------ a real run, and its archive


@torch_needed
def test_a_real_run_and_its_archive_hold_no_secret_of_its_shell(llmb_proc, tmp_path):
    install = tmp_path / "install"
    hf, app, creds = secret("hf_"), secret(), secret()
    webhook, token = secret(), secret()
    # secrets by name, under names llmb did not know (CI_JOB_JWT, SLACK_WEBHOOK_URL, *_CREDS)
    env = {
        "LLMB_INSTALL": str(install),
        "LLMB_NO_CACHE": "1",
        "HF_TOKEN": hf,
        "APP_SECRET": app,
        "CI_JOB_JWT": jwt(token),
        "SLACK_WEBHOOK_URL": f"https://hooks.slack.com/services/T000/B000/{webhook}",
        "DB_CREDS": creds,
        "LLMB_TEST_COPY": f"copy-of-{hf}",  # a secret's value under another name
    }
    # credentials inside the values of innocent variables the job inherits
    inside = {}
    for i, (attack, template) in enumerate(IN_VALUES.items()):
        inside[attack] = secret()
        env[f"LLMB_TEST_{i}"] = template.format(inside[attack])
    # issue 41, item 1: credentials in their vendors' formats inside innocent variables' values,
    # and secrets under names with a credential word inside (SEED beside OTP, B64 after TOKEN)
    vendor = the_issues_tokens()
    for i, (label, value) in enumerate(vendor.items()):
        env[f"LLMB_TEST_VENDOR_{i}"] = f"{label}: {value}" if i % 2 else value
    otp = "".join(secrets.choice(string.ascii_uppercase + "234567") for _ in range(32))
    encoded = base64.b64encode(vendor["Hugging Face"].encode()).decode()
    env.update({"OTP_SEED": otp, "HFTOKENB64": encoded})
    values = [hf, app, creds, webhook, token, *inside.values(), *vendor.values(), otp, encoded]

    result = llmb_proc(
        "run", *PROXY, "--dump-env", "--json", "--env", "LLMB_TEST_OK=plain", env=env, timeout=900
    )
    summary = json.loads(result.out)
    assert result.code == 0 and summary["state"] == "SUCCEEDED", result.err[-3000:]
    files = every_file(install)
    names = {p.name for p in files}
    assert {"run.json", "recipe.json", "provenance.json", "job.json"} <= names, names
    assert any(n.startswith("env-") for n in names) and any(n.startswith("log-") for n in names)
    assert_nowhere(values, files=files, texts=[result.out + result.err])

    # what users need stays: the names, and that they were set
    dumped = next(p for p in files if p.name.startswith("env-")).read_text().splitlines()
    for name in ("HF_TOKEN", "APP_SECRET", "CI_JOB_JWT", "SLACK_WEBHOOK_URL", "DB_CREDS"):
        assert f"{name}='***'" in dumped
    assert "OTP_SEED='***'" in dumped and "HFTOKENB64='***'" in dumped
    assert (
        "LLMB_TEST_VENDOR_0='***'" in dumped
        and "LLMB_TEST_VENDOR_1='GitHub classic: ***'" in dumped
    )
    assert "LLMB_TEST_COPY='copy-of-***'" in dumped and "LLMB_TEST_OK=plain" in dumped
    assert "LLMB_TEST_0='--password=***'" in dumped
    provenance = json.loads((Path(summary["experiment_dir"]) / "provenance.json").read_text())
    assert provenance["job"]["environment"]["HF_TOKEN"] == "***"
    assert provenance["submission"]["env_set"]["LLMB_TEST_OK"] == "plain"

    archive = tmp_path / "runs.tar.gz"
    packed = llmb_proc("archive", "-o", str(archive), env=env)
    assert packed.code == 0, packed.err
    members = archive_members(archive)
    assert any(n.endswith("provenance.json") for n in members), list(members)
    for name, data in members.items():
        for value in values:
            assert value.encode() not in data, f"{name} in the archive holds a secret's value"


def test_the_archive_masks_a_run_an_earlier_llmb_recorded_in_clear(llmb_proc, tmp_path):
    install = tmp_path / "install"
    hf, jwt_sig, pw, comet = secret("hf_"), secret(), secret(), secret()
    name = "pretrain_llama31_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs1_gbs128"
    run_dir = install / "workloads" / "llama31" / "experiments" / name / f"{name}_1766132151"
    inner = run_dir / name
    inner.mkdir(parents=True)
    (run_dir / "provenance.json").write_text(
        json.dumps(
            {
                "job": {
                    "environment": {
                        "HF_TOKEN": hf,
                        "CI_JOB_JWT": jwt(jwt_sig),
                        "FOO": f"--password={pw}",
                    }
                }
            }
        )
    )
    (run_dir / "recipe.json").write_text(
        json.dumps({"tuned": [{"setting": "logger.comet_api_key", "run": comet}], "gpus": 8})
    )
    (inner / f"env-{name}.txt").write_text(f"HF_TOKEN={hf}\nFOO='mysql -p{pw}'\n")
    (inner / f"log-{name}.out").write_text(f"step 1\nlogger: comet_api_key: {comet}\nHF {hf}\n")
    (inner / "weights.bin").write_bytes(b"\0\1binary" + hf.encode())  # binary: packed as it is

    archive = tmp_path / "old.tar.gz"
    result = llmb_proc(
        "archive", "-o", str(archive), env={"LLMB_INSTALL": str(install), "HF_TOKEN": hf}
    )
    assert result.code == 0, result.err
    members = archive_members(archive)
    for member, data in members.items():
        if member.endswith("weights.bin"):
            continue
        for value in (hf, jwt_sig, pw, comet):
            assert value.encode() not in data, f"{member} holds a secret's value"
    by_name = {Path(m).name: data for m, data in members.items()}
    provenance = json.loads(by_name["provenance.json"])
    assert provenance["job"]["environment"] == {
        "HF_TOKEN": "***",
        "CI_JOB_JWT": "***",
        "FOO": "--password=***",
    }
    assert json.loads(by_name["recipe.json"]) == {
        "tuned": [{"setting": "logger.comet_api_key", "run": "***"}],
        "gpus": 8,
    }
    assert by_name[f"log-{name}.out"] == b"step 1\nlogger: comet_api_key: ***\nHF ***\n"
    with tarfile.open(archive) as tar:  # the sizes in the archive are the masked members'
        for member in tar.getmembers():
            assert len(tar.extractfile(member).read()) == member.size
    assert io.BytesIO(by_name["weights.bin"]).read().startswith(b"\0\1binary")
