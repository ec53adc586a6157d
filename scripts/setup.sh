#!/usr/bin/env bash
# Installs what headroom needs to build and test, from Debian's packages. Safe to
# run again: it installs only what is missing, and does nothing when all is there.
#
#   scripts/setup.sh [--data] [MORE_PACKAGES...]   (.ci/run adds the test-only tools)
#
# --data also installs the packages of the real-text corpora (`headroom corpora`,
# data/corpus.cpp): the King James Bible, the fortunes in eight languages and
# WordNet, about 45 MB, read from where the packages put them and never downloaded
# at run time.
set -euo pipefail

data_packages=()
if [ "${1:-}" = "--data" ]; then
  shift
  data_packages=(
    bible-kjv bible-kjv-text
    fortunes fortunes-min fortunes-br fortunes-cs fortunes-de fortunes-es fortunes-it fortunes-pl fortunes-ru
    wordnet-base
  )
fi

packages=(
  build-essential cmake        # compiler, CMake and CTest
  libxtensor-dev libxsimd-dev  # arrays (XTENSOR_USE_XSIMD)
  libblis-pthread-dev          # GEMMs (HEADROOM_BLAS=BLIS, the default)
  # xtensor-blas; OpenBLAS for HEADROOM_BLAS=OpenBLAS, and the BLAS and LAPACK that
  # xtensor-blas's CMake package looks for (OpenBLAS carries LAPACK)
  libxtensor-blas-dev libopenblas-dev
  liblapack-dev                # the reference LAPACK archive headroom_interp links (with BLIS)
  libfmt-dev libcli11-dev nlohmann-json3-dev doctest-dev
  "${data_packages[@]}"
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages are installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
