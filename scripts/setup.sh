#!/usr/bin/env bash
# Installs the Debian 12 packages meshrun builds, tests and benchmarks with.
# Idempotent and quiet: installs only what is missing; needs root (or sudo).
set -euo pipefail

packages=(
  build-essential meson ninja-build pkg-config
  libtomlplusplus-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev doctest-dev
  libluajit2-5.1-dev luajit2
  libtorch-dev libgloo-dev libopenblas0-openmp libsentencepiece-dev libbenchmark-dev
  openmpi-bin libopenmpi-dev slurm-wlm munge
  python3-torch python3-regex python3-jinja2 python3-sentencepiece sentencepiece libpcre2-dev libxxhash-dev
  iproute2 procps
)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$package" 2>/dev/null || true)
  [[ $status == ii* ]] || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
echo "meshrun setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >/dev/null
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
