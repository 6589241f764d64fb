#!/usr/bin/env bash
# Packs a built `onecard` into .carry/ (git-ignored) for the GPU machine, which runs another
# distribution: the stripped binary, every shared library it links beyond glibc, and a wrapper
# that points LD_LIBRARY_PATH at them for onecard alone (python's torch must keep the machine's
# own libstdc++). Usage: scripts/golden/prepare_carry.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
test -x "$BUILD_DIR/onecard" || { echo "no $BUILD_DIR/onecard: build it first (scripts/build.sh onecard)" >&2; exit 1; }
rm -rf .carry
mkdir -p .carry/lib
strip --strip-debug -o .carry/onecard.bin "$BUILD_DIR/onecard"
for lib in $(ldd .carry/onecard.bin | awk '/=>/ {print $3}'); do
    case "$(basename "$lib")" in
        libc.so.*|libm.so.*|ld-linux*) ;;  # glibc: the machine's (newer) one is compatible
        *) cp -L "$lib" .carry/lib/ ;;
    esac
done
cat > .carry/onecard <<'EOF'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/lib" exec "$here/onecard.bin" "$@"
EOF
chmod +x .carry/onecard
du -sh .carry
echo "then: run tool, command 'bash scripts/golden/run_device.sh', carry ['.carry']"
