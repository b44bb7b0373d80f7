#!/usr/bin/env bash
# One entry point for the two things a newcomer does on a fresh machine:
#
#   ./dev.sh demo    set up .venv and run the main job
#   ./dev.sh test    set up .venv (and the tests' Debian packages when root), lint, and run the
#                    test suite (pytest args pass through)
#   ./dev.sh setup   only set up .venv (idempotent)
#   ./dev.sh frameworks  build the Python 3.12 environments with the real Megatron-Bridge and NeMo 2
#                    that the framework contract tests use (cached outside the checkout, ~10 GB)
#
# Python packages land in .venv inside the checkout; only the test suite's
# Slurm and Chromium (Debian packages) are installed system-wide. PYTHON picks the
# interpreter (default: python3, 3.10+).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv
# examples/llmb-plugin-qwen3 is the example of a third party's plugin; installed here (editable) so
# that the framework contract tests validate its rows. tests/test_plugin_wheels.py installs its wheel
# apart, into a fresh environment that sees none of these editable installs.
PACKAGES=(core plugins/llama31 plugins/llama4 plugins/nemotron4 plugins/nemotronh plugins/deepseekv3 plugins/gptoss
          backends/slurm backends/runai backends/kubernetes
          examples/llmb-plugin-qwen3)

# pip's own sources (its configuration files and PIP_* variables, which pip config list gives in order of
# precedence: find-links, index-url, extra-index-url, constraint) as uv's options, one word a line: uv
# reads none of pip's configuration. Of several index-url, the last is the one pip uses.
pip_sources() {
  "$VENV/bin/python" -m pip config list 2>/dev/null | "$VENV/bin/python" -c '
import shlex, sys
options = {"find-links": "--find-links", "index-url": "--index-url",
           "extra-index-url": "--extra-index-url", "constraint": "--constraint"}
found, index = [], []
for line in sys.stdin:
    key, _, value = line.strip().partition("=")
    option = options.get(key.rpartition(".")[2])
    words = [one for word in shlex.split(value) for one in word.split()] if option else []
    if option == "--index-url":
        index = words[-1:] or index
        continue
    found += [(option, one) for one in words if (option, one) not in found]
for option, value in [("--index-url", url) for url in index] + found:
    print(option)
    print(value)
'
}

setup() {
  if [ ! -x "$VENV/bin/python" ]; then
    echo "dev.sh: creating $VENV with $($PYTHON --version)" >&2
    "$PYTHON" -m venv "$VENV"
  fi
  local stamp="$VENV/.llmb-installed" want
  want=$(cat dev.sh pyproject.toml "${PACKAGES[@]/%//pyproject.toml}" | sha256sum | cut -c1-16)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return
  fi
  echo "dev.sh: installing llmb and its plugins (editable) into $VENV" >&2
  local editable=()
  for p in "${PACKAGES[@]}"; do editable+=(-e "./$p"); done
  # uv installs the rest (about 20 s here, where pip took a minute), from wherever pip is configured to
  # look (pip_sources) and choosing among them as pip does (the best match over every source).
  "$VENV/bin/python" -m pip install --quiet --upgrade "pip>=25.1" "uv>=0.5"
  local sources=()
  mapfile -t sources < <(pip_sources)
  local uv=("$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --compile-bytecode
            --index-strategy unsafe-best-match "${sources[@]}")
  # The torch engine and its tests (numpy for distributed checkpoints, torchao for float8 training, pinned
  # to the version the float8 tests were written against), matplotlib for reports, the dev group. torch
  # is pinned exactly so that no resolver pulls another (CUDA) build. Every package builds with
  # setuptools (their pyproject.toml's build-system): installed here once and used in place, rather than
  # in a fresh build environment a package.
  "${uv[@]}" "torch==2.13.0" numpy "torchao==0.18.0" matplotlib --group pyproject.toml:dev "setuptools>=77"
  "${uv[@]}" --no-build-isolation "${editable[@]}"
  echo "$want" > "$stamp"
}

# The checkout's own modules compiled to bytecode (__pycache__, git-ignored) where they are stale. Python
# reads a .pyc even under PYTHONDONTWRITEBYTECODE (set in some sandboxes, CI's among them), which only
# stops it writing one: without this, every llmb process the tests start compiled some 150 modules
# again (0.15 s of CPU each; llmb plan took 0.34 s instead of 0.19). Up to date, it costs a second.
compile_bytecode() {
  "$VENV/bin/python" -m compileall -q -j 0 core/src backends plugins examples >/dev/null
}

# What the tests need from Debian: the real Slurm they start (tests/private_slurm.py)
# and a headless Chromium that renders llmb report's page. Installed when this
# user may (root, or passwordless sudo); otherwise those tests skip and say why.
SYSTEM_PACKAGES=(slurm-wlm munge slurmdbd mariadb-server chromium numactl zstd)
SYSTEM_COMMANDS=(slurmctld slurmd munged sbatch slurmdbd mariadbd chromium numactl zstd)

setup_system() {
  local missing=() c
  for c in "${SYSTEM_COMMANDS[@]}"; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "$c" >/dev/null || missing+=("$c")
  done
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
      echo "dev.sh: ${missing[*]} missing and no root: the tests that need them will be skipped" \
           "(apt-get install ${SYSTEM_PACKAGES[*]})" >&2
      return
    fi
  fi
  if ! command -v apt-get >/dev/null; then
    echo "dev.sh: ${missing[*]} missing and no apt-get: the tests that need them will be skipped" >&2
    return
  fi
  echo "dev.sh: installing ${SYSTEM_PACKAGES[*]} for the tests (no service is started)" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${SYSTEM_PACKAGES[@]}" >/dev/null
}

lint() {
  "$VENV/bin/ruff" check .
  "$VENV/bin/ruff" format --check .  # .venv/bin/ruff format . fixes what it names
}

# timed FUNCTION WHAT: run it, then say on stderr how long it took (CI's log shows each phase).
timed() {
  local started=$SECONDS
  "$1"
  echo "dev.sh: $2: $(( SECONDS - started )) s" >&2
}

case "${1:-}" in
  setup) setup ;;
  frameworks)
    shift
    exec "$PYTHON" tests/frameworks/envs.py build "$@"
    ;;
  test)
    shift
    timed setup ".venv"
    timed compile_bytecode "bytecode"
    timed setup_system "Debian packages"
    timed lint "lint"
    # The suite runs in LLMB_TEST_WORKERS processes (pytest-xdist; default 4: most tests wait on the
    # processes they start, so more workers than cores pay). -n N, or -p no:xdist, chooses otherwise.
    workers=(-n "${LLMB_TEST_WORKERS:-4}" --dist worksteal)
    for arg in "$@"; do
      case "$arg" in -n|-n*|--numprocesses*|no:xdist|-pno:xdist) workers=() ;; esac
    done
    exec "$VENV/bin/python" -m pytest "${workers[@]}" "$@"
    ;;
  demo)
    shift
    setup
    compile_bytecode
    # A real 2-rank training run of Llama 3.1 8B's recipe on a CPU-sized proxy (under a minute).
    exec "$VENV/bin/llmb" run llama31 --size 8b --gpu h100 --dtype bf16 --gpus 2 --proxy tiny "$@"
    ;;
  *)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
