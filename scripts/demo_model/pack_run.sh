#!/usr/bin/env bash
# Packs a finished run for the trip back from the device (gpu_train.sh's last call).
# Usage: [PART_BYTES=15000000] [RETURN_BYTES=60000000] pack_run.sh WORK_DIR OUT_DIR
#   WORK_DIR/run is packed to WORK_DIR/demo_run.tar.gz and split into PART_BYTES parts (the device returns
#   at most 16 MiB a file and 64 MiB in all). Parts go to OUT_DIR while they fit in RETURN_BYTES; the rest
#   wait in WORK_DIR/left and a LEFT ON THE DEVICE line says so (the demo-wide run packs to 77 MB): a
#   follow-up call, `cp /tmp/demo_work/left/* $OUT/`, returns them within the 30 s the machine stays idle.
#   The tarball's md5sum is printed to check the joined parts against.
set -euo pipefail
work=$(realpath "$1"); out=$(realpath "$2")
part_bytes=${PART_BYTES:-15000000}; return_bytes=${RETURN_BYTES:-60000000}
tar -czf "$work/demo_run.tar.gz" -C "$work" run
rm -rf "$work/left"; mkdir -p "$work/left"
split -b "$part_bytes" -d "$work/demo_run.tar.gz" "$work/left/demo_run.tar.gz.part"
sent=0
for p in "$work"/left/demo_run.tar.gz.part*; do
    size=$(stat -c %s "$p")
    [ $(( sent + size )) -le "$return_bytes" ] || continue
    mv "$p" "$out/"; sent=$(( sent + size ))
done
(cd "$work" && md5sum demo_run.tar.gz)
left=$(cd "$work/left" && ls)
[ -z "$left" ] || echo "LEFT ON THE DEVICE, over the return limit:" $left "- return it now: cp $work/left/* \$OUT/"
