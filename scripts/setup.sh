#!/usr/bin/env bash
# Installs what meshrun builds and runs with: Debian 12 packages, and the
# `torch` wheel from PyPI (the one LibTorch: headers, libraries, CUDA and
# NCCL inside) into the project's virtual environment .venv/.
#   scripts/setup.sh          what building and running need (the quickstart)
#   scripts/setup.sh --test   also what the test suite and benchmarks use
#                             (doctest, Google Benchmark, SLURM, MPI
#                             launchers, Python references, Unicode's test
#                             data, Chromium for the report page,
#                             transformers for the model families' parity,
#                             Ray for the Ray launcher's cluster)
#   scripts/setup.sh --bench  --test, and TRL, the baseline
#                             bench/grpo_trl_bench.py measures against
# Idempotent and quiet: installs only what is missing; needs root (or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

# torch 2.11.0: the version of the device machines' image (2.11.0+cu130), so
# the binary, the benchmarks' Python baselines and GPU runs all use one
# torch; PyPI's 2.11.0 wheel is the CUDA 13.0 build with NCCL 2.28.
readonly torch_version=2.11.0
# numpy: the tests' Python references hand tensors to bytes through it.
readonly numpy_version=2.2.6
# Tests only, neither packaged by Debian 12: tensorboard's own event reader
# checks the event files meshrun writes natively; Hugging Face's tokenizers
# is the reference for tokenizer.json normalizers; transformers builds the
# model families meshrun must equal (tests/model/transformers_parity.py),
# and its generate is the rollout engine's baseline (bench/rollout_transformers.py).
# Ray (with its dashboard's job server, [default]) is the cluster the Ray
# launcher's test submits to (tests/integration/ray_test.sh).
readonly ray_version=2.60.0
readonly tensorboard_version=2.21.0
readonly tokenizers_version=0.23.3
readonly transformers_version=5.24.0
# Benchmarks only: TRL's GRPOTrainer is the GRPO step's baseline
# (bench/grpo_trl_bench.py), with the accelerate and datasets it runs on.
readonly trl_version=1.16.0
readonly accelerate_version=1.15.0
readonly datasets_version=5.2.0

packages=(
  build-essential meson ninja-build pkg-config python3-venv
  libtomlplusplus-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libluajit2-5.1-dev libgloo-dev
  libsentencepiece-dev libpcre2-dev libxxhash-dev libopenmpi-dev nettle-dev libutf8proc-dev
)
# One option at most: a second would be ignored silently (--bench already
# includes --test).
if [[ $# -gt 1 ]]; then
  echo "usage: scripts/setup.sh [--test | --bench] (one option; --bench includes --test)" >&2
  exit 2
fi
if [[ ${1:-} == --test || ${1:-} == --bench ]]; then
  packages+=(doctest-dev libbenchmark-dev openmpi-bin slurm-wlm munge python3-regex python3-jinja2
             python3-sentencepiece sentencepiece unicode-data chromium iproute2 procps)
elif [[ $# -gt 0 ]]; then
  echo "usage: scripts/setup.sh [--test | --bench]" >&2
  exit 2
fi

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$package" 2>/dev/null || true)
  [[ $status == ii* ]] || missing+=("$package")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  echo "meshrun setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # apt and debconf talk on stderr even with -qq ("delaying package
  # configuration"); keep it for a failure, where it is the explanation.
  log=$(mktemp)
  if ! { "${sudo[@]}" apt-get update -qq &&
         "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "meshrun setup: installing ${missing[*]} with apt-get failed" >&2
    exit 1
  fi
  rm -f "$log"
fi

# installed NAME VERSION: the wheel's dist-info is in .venv.
installed() {
  compgen -G ".venv/lib/python3*/site-packages/$1-$2.dist-info" >/dev/null
}

# pip_into_venv WHAT REQUIREMENT...: installs quietly into .venv; on
# failure prints pip's log and stops, naming WHAT.
pip_into_venv() {
  local what=$1 log
  shift
  log=$(mktemp)
  if ! .venv/bin/python3 -m pip install --quiet --disable-pip-version-check "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "meshrun setup: installing $what into .venv failed" >&2
    exit 1
  fi
  rm -f "$log"
}

# Debian's own python3 makes the venv: whatever python3 comes first on PATH
# may be another build, and the wheel must match the interpreter.
if ! installed torch "$torch_version" || ! installed numpy "$numpy_version"; then
  echo "meshrun setup: installing torch ${torch_version} from PyPI into .venv (about 4.5 GB with its CUDA libraries)" >&2
  [[ -x .venv/bin/python3 ]] || /usr/bin/python3 -m venv .venv
  pip_into_venv "torch ${torch_version}" "torch==${torch_version}" "numpy==${numpy_version}"
fi

if [[ ${1:-} == --test || ${1:-} == --bench ]] &&
   { ! installed tensorboard "$tensorboard_version" || ! installed tokenizers "$tokenizers_version" ||
     ! installed transformers "$transformers_version" || ! installed ray "$ray_version"; }; then
  pip_into_venv "the tests' Python packages" "tensorboard==${tensorboard_version}" "tokenizers==${tokenizers_version}" \
    "transformers==${transformers_version}" "ray[default]==${ray_version}"
fi

if [[ ${1:-} == --bench ]] &&
   { ! installed trl "$trl_version" || ! installed accelerate "$accelerate_version" ||
     ! installed datasets "$datasets_version"; }; then
  pip_into_venv "the benchmarks' Python packages" "transformers==${transformers_version}" \
    "tokenizers==${tokenizers_version}" "trl==${trl_version}" "accelerate==${accelerate_version}" \
    "datasets==${datasets_version}"
fi
