#!/usr/bin/env bash
# Builds meshrun for a lent device machine (a GPU, no registry reachable)
# and runs the gpu suite and the GPU benchmarks there. Three verbs:
#
#   scripts/device.sh prebuild  here: builds what the device runs (meshrun,
#                               the gpu suite's programs, train_bench), strips
#                               it into .device/bin and copies the shared
#                               libraries it needs beyond glibc, libstdc++ and
#                               torch into .device/lib (git-ignored; carried
#                               with the run tool's `carry`). Used there only
#                               when the device's torch is the very version
#                               built against here (same wheel, same ABI):
#                               device time is too short (15 min) to spend
#                               5-8 of it compiling.
#   scripts/device.sh pack      here: downloads the Debian .deb files meshrun
#                               builds with into .device/debs, for a device
#                               whose torch differs (or DEVICE_BUILD=1).
#   scripts/device.sh run       there: the prebuilt programs with the
#                               machine's own torch libraries, else unpacks the
#                               debs into .device/prefix (never into /) and
#                               builds build-device/ against the machine's
#                               torch (-Dtorch_python=python3); then runs the
#                               gpu suite's programs and the GPU benchmarks
#                               (most wanted first, all within DEVICE_SECONDS,
#                               default 540), writing logs into $OUT.
#
# A run call on the device tool (15 minutes of device time a session, the
# machine's start included): `scripts/device.sh prebuild` here, then carry
# [".device"], timeout_s 600, command `scripts/device.sh run`.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the device image (PyTorch 2.11.0+cu130, meson and ninja from pip, a
# compiler) lacks to build meshrun: Debian 12's headers, pkg-config files and
# the shared libraries behind them.
packages=(pkgconf pkgconf-bin libpkgconf3 pkg-config
          libtomlplusplus-dev libtomlplusplus3 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev
          nlohmann-json3-dev doctest-dev libbenchmark-dev libbenchmark1debian libluajit2-5.1-dev libluajit2-5.1-2
          libluajit2-5.1-common libgloo-dev libsentencepiece-dev libsentencepiece0 libprotobuf32 libprotobuf-lite32
          libpcre2-dev libpcre2-8-0 libxxhash-dev libxxhash0 nettle-dev libnettle8 libhogweed6 libutf8proc-dev
          libutf8proc2)

# What the device runs: meshrun (with its engine), the gpu suite's programs, the benchmark.
device_programs=(meshrun meshrun-engine tests/gpu/gpu_tests bench/train_bench bench/rollout_bench tests/sp_model_worker)

# libraries_of PROGRAM...: the shared libraries the programs load that a
# device image lacks: all but glibc's, the compiler runtime's and the torch
# wheel's own (the device brings its torch and CUDA libraries).
libraries_of() {
  ldd "$@" | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libutil|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so|/site-packages/'
}

# .device/ holds build outputs and downloads: never committed.
ignore_device_folder() {
  grep -qx '/.device/' .gitignore 2>/dev/null || echo '/.device/' >>.gitignore
}

case ${1:-} in
  prebuild)
    [[ -f build/build.ninja ]] || { echo "device.sh: no build/: run scripts/build.sh first" >&2; exit 1; }
    ninja -C build "${device_programs[@]}" src/tokenizer/libmeshrun_sentencepiece.so >/dev/null
    rm -rf .device/bin .device/lib
    mkdir -p .device/bin .device/lib
    ignore_device_folder
    for program in "${device_programs[@]}"; do strip -o ".device/bin/$(basename "$program")" "build/$program"; done
    strip -o .device/lib/libmeshrun_sentencepiece.so build/src/tokenizer/libmeshrun_sentencepiece.so
    libraries_of "${device_programs[@]/#/build/}" build/src/tokenizer/libmeshrun_sentencepiece.so | while read -r library; do cp -L "$library" .device/lib/; done
    .venv/bin/python3 -c 'import torch; print(torch.__version__)' >.device/torch-version
    echo "device.sh: $(ls .device/bin | wc -l) programs, $(ls .device/lib | wc -l) libraries ($(du -sh .device | cut -f1)) for torch $(<.device/torch-version)"
    ;;
  pack)
    mkdir -p .device/debs
    ignore_device_folder
    (cd .device/debs && apt-get download "${packages[@]}" >/dev/null 2>&1) ||
      { echo "device.sh: apt-get download failed (run apt-get update first)" >&2; exit 1; }
    echo "device.sh: $(ls .device/debs | wc -l) packages in .device/debs ($(du -sh .device/debs | cut -f1))"
    ;;
  run)
    python=$(command -v python3)
    out=${OUT:-$PWD/.device/out}
    mkdir -p "$out"
    nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
    torch_version=$("$python" -c 'import torch; print(torch.__version__)')
    torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
    echo "device.sh: torch $torch_version, $("$python" -c 'import torch; print(torch.cuda.device_count())') GPU(s)"
    # DEVICE_BUILD=1 builds from the debs even where the prebuilt programs
    # would do (to check that path).
    if [[ -z ${DEVICE_BUILD:-} && -x .device/bin/meshrun && $(<.device/torch-version) == "$torch_version" ]]; then
      bin=$PWD/.device/bin
      # The torch wheel's libraries find their CUDA ones through their own
      # RUNPATH ($ORIGIN/../../nvidia/...); meshrun's programs need torch's.
      nvidia_libs=$(ls -d "$torch_lib"/../../nvidia/*/lib 2>/dev/null | tr '\n' ':' || true)
      export LD_LIBRARY_PATH=$PWD/.device/lib:$torch_lib:$nvidia_libs${LD_LIBRARY_PATH:-}
      export MESHRUN_SENTENCEPIECE_MODULE=$PWD/.device/lib/libmeshrun_sentencepiece.so
      echo "device.sh: prebuilt programs (built here against torch $torch_version)"
    else
      [[ -d .device/debs ]] || { echo "device.sh: torch $torch_version here, $(cat .device/torch-version 2>/dev/null || echo none) prebuilt, and no .device/debs: run 'scripts/device.sh pack' and carry .device" >&2; exit 1; }
      prefix=$PWD/.device/prefix
      mkdir -p "$prefix"
      for deb in .device/debs/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
      export PATH=$PATH:$prefix/usr/bin
      export PKG_CONFIG=$prefix/usr/bin/pkgconf
      # LIBDIR, not PATH: the prefix's .pc files only, never a partial set the
      # image may have.
      export PKG_CONFIG_LIBDIR=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig:$prefix/usr/lib/pkgconfig
      export PKG_CONFIG_SYSROOT_DIR=$prefix
      export CPLUS_INCLUDE_PATH=$prefix/usr/include
      export LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu
      export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      export PYTHONPATH=$prefix/usr/lib/python3/dist-packages${PYTHONPATH:+:$PYTHONPATH}
      [[ -f build-device/build.ninja ]] || meson setup build-device "-Dtorch_python=$python" -Dtests=enabled >"$out/configure.log" 2>&1 ||
        { tail -40 "$out/configure.log"; exit 1; }
      ninja -C build-device -j "$(nproc)" "${device_programs[@]}" >"$out/build.log" 2>&1 || { grep -A8 FAILED "$out/build.log" | head -80; exit 1; }
      bin=$PWD/.device/built
      mkdir -p "$bin"
      for program in "${device_programs[@]}"; do
        ln -sf "$PWD/build-device/$program" "$bin/"
      done
    fi
    "$bin/meshrun" --version | tee "$out/version.txt"
    # The parts, most wanted first, each under its own timeout and all
    # within DEVICE_SECONDS (default 540: one run call of at most 600 s,
    # with room to copy $OUT back): a part starts only with at least its
    # minimum left and never runs past the budget, so a slow part costs the
    # ones after it, never the figures already in $OUT. DEVICE_ONLY: some of
    # "unit bench rollout jobs heads big" (default all), to rerun a part.
    budget=${DEVICE_SECONDS:-540}
    started=$SECONDS
    only=" ${DEVICE_ONLY:-unit bench rollout jobs heads big} "
    # part NAME SECONDS MINIMUM LOG COMMAND...: runs COMMAND under
    # timeout min(SECONDS, what is left) into $out/LOG, or says why not.
    part() {
      local name=$1 seconds=$2 minimum=$3 log=$4 left status=0
      shift 4
      [[ $only == *" $name "* ]] || return 0
      left=$((budget - (SECONDS - started)))
      if ((left < minimum)); then
        echo "device.sh: $name skipped: ${left}s of the ${budget}s budget left, it needs ${minimum}s" | tee -a "$out/skipped.txt"
        return 0
      fi
      ((seconds <= left)) || seconds=$left
      timeout "$seconds" "$@" >"$out/$log" 2>&1 || status=$?
      echo "device.sh: $name exit $status after $((SECONDS - started))s of ${budget}s (log $log)"
      tail -"${DEVICE_TAIL:-12}" "$out/$log"
    }
    bench=("$bin/train_bench" --python "$python" --baseline bench/train_baseline.py --device cuda)
    # The gpu suite's two entries (tests/gpu/meson.build), run directly: the
    # prebuilt programs have no meson build folder here.
    part unit "${DEVICE_UNIT_SECONDS:-150}" 10 gpu-unit.log \
      env MESHRUN_SP_MODEL_WORKER_PROGRAM="$bin/sp_model_worker" "$bin/gpu_tests" --no-intro
    # The 1B step against Python eager and torch.compile, with each side's
    # peak device memory (issue #39 item 4).
    # shellcheck disable=SC2086  # DEVICE_BENCH_ARGS: several arguments
    part bench "${DEVICE_BENCH_SECONDS:-150}" 90 train-bench-gpu.txt \
      "${bench[@]}" --shape 1B ${DEVICE_BENCH_ARGS:---rounds 1 --steps 8}
    # The rollout engine's decode on the GPU (issue #36 item 8's GPU aim):
    # a 1B bf16 model at 64 live sequences, CUDA graphs and eager, against
    # the HBM roofline.
    part rollout "${DEVICE_ROLLOUT_SECONDS:-120}" 60 rollout-bench-gpu.txt \
      "$bin/rollout_bench" --device cuda --repeats 2
    part jobs "${DEVICE_JOBS_SECONDS:-150}" 60 gpu-jobs.log \
      env MESHRUN_TORCH_PYTHON="$python" bash tests/gpu/gpu_jobs_test.sh "$bin/meshrun"
    # The fused LM head against the whole logits (issue #39 item 1), then
    # the same with meshrun's own CUDA kernels (item 2: SwiGLU, the rotary,
    # residual add + RMSNorm) off: the two fused lines' ratio is the
    # kernels' gain.
    part heads "${DEVICE_HEADS_SECONDS:-60}" 40 train-bench-heads.txt \
      "${bench[@]}" --shape 1B --heads --rounds 1
    part heads "${DEVICE_HEADS_SECONDS:-60}" 40 train-bench-heads-no-kernels.txt \
      env MESHRUN_CUDA_KERNELS=0 "${bench[@]}" --shape 1B --heads --rounds 1
    # The 8B shape with activation checkpointing on both sides (item 4: "if
    # it fits"; a side out of device memory prints "does not fit").
    part big "${DEVICE_BIG_SECONDS:-200}" 100 train-bench-8b.txt \
      "${bench[@]}" --shape 8B --rounds 1 --warmup 1 --steps 3
    ;;
  *)
    echo "usage: scripts/device.sh prebuild | pack | run" >&2
    exit 2
    ;;
esac
