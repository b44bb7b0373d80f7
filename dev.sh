#!/usr/bin/env bash
# One entry point for the two things a newcomer does on a fresh machine:
#
#   ./dev.sh demo    set up .venv and run the main job
#   ./dev.sh test    set up .venv, lint, and run the test suite (pytest args pass through)
#   ./dev.sh setup   only set up .venv (idempotent)
#
# Everything lands in .venv inside the checkout; nothing is installed
# system-wide. PYTHON picks the interpreter (default: python3, 3.10+).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv
PACKAGES=(core plugins/llama31 plugins/llama4 plugins/nemotron4 plugins/nemotronh)

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
  "$VENV/bin/python" -m pip install --quiet --upgrade "pip>=25.1"
  # The torch engine and its tests (numpy for distributed checkpoints).
  # torch is pinned exactly so that no resolver pulls another (CUDA) build.
  "$VENV/bin/python" -m pip install --quiet "torch==2.13.0" numpy
  "$VENV/bin/python" -m pip install --quiet --group dev
  local editable=()
  for p in "${PACKAGES[@]}"; do editable+=(-e "./$p"); done
  "$VENV/bin/python" -m pip install --quiet "${editable[@]}"
  echo "$want" > "$stamp"
}

case "${1:-}" in
  setup) setup ;;
  test)
    shift
    setup
    "$VENV/bin/ruff" check .
    exec "$VENV/bin/python" -m pytest "$@"
    ;;
  demo)
    shift
    setup
    # A real 2-rank training run of Llama 3.1 8B's recipe on a CPU-sized proxy (under a minute).
    exec "$VENV/bin/llmb" run llama31 --size 8b --gpu h100 --dtype bf16 --gpus 2 --proxy tiny "$@"
    ;;
  *)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
