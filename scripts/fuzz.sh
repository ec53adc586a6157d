#!/usr/bin/env bash
# A short libFuzzer run of the checkpoint reader (fuzz/README.md), as CI runs it:
# builds fuzz/safetensors_fuzz with clang, ASan and UBSan in build-fuzz/, then fuzzes
# for FUZZ_SECONDS (default 60) from a copy of the committed seed corpus. Every seed
# is replayed first, so a seed that crashes fails at once. A crash, a leak or a
# sanitizer report is exit status 1, with the input kept in build-fuzz/crashes/.
#
#   scripts/fuzz.sh                 # 60 s
#   FUZZ_SECONDS=600 scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-60}"
command -v clang++ >/dev/null || { echo "fuzz: clang++ is not installed (Debian package clang)" >&2; exit 1; }

cmake -S . -B build-fuzz -DHEADROOM_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHEADROOM_BUILD_TESTS=OFF -DHEADROOM_INSTALL=OFF >/dev/null
cmake --build build-fuzz -j2 --target safetensors_fuzz

corpus="$(mktemp -d /tmp/headroom-fuzz-corpus.XXXXXX)"
trap 'rm -rf "$corpus"' EXIT
cp fuzz/corpus/* "$corpus"/
mkdir -p build-fuzz/crashes

echo "fuzz: safetensors_fuzz for ${seconds} s from $(ls fuzz/corpus | wc -l) seeds"
status=0
build-fuzz/fuzz/safetensors_fuzz -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix=build-fuzz/crashes/ "$corpus" >build-fuzz/fuzz.log 2>&1 || status=$?
tail -n 25 build-fuzz/fuzz.log
if [ "$status" -ne 0 ]; then
  echo "fuzz: safetensors_fuzz failed (exit $status); inputs in build-fuzz/crashes/: $(ls build-fuzz/crashes)" >&2
  exit 1
fi
echo "fuzz: no crash in ${seconds} s"
