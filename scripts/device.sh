#!/usr/bin/env bash
# Builds meshrun on a lent device machine (a GPU, no registry reachable) and
# runs the gpu suite and the GPU benchmarks there. Two halves:
#
#   scripts/device.sh pack      here (with registries): downloads the Debian
#                               .deb files meshrun builds with into
#                               .device/debs/ (git-ignored; carried to the
#                               device with the run tool's `carry`)
#   scripts/device.sh run       there: unpacks them into .device/prefix (never
#                               into /), configures build-device/ against the
#                               machine's own torch (-Dtorch_python=python3),
#                               builds, runs `meson test --suite gpu` and the
#                               GPU benchmarks, and copies logs into $OUT.
#
# A run call on the device tool: carry [".device"], command
#   `scripts/device.sh run`.
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

case ${1:-} in
  pack)
    mkdir -p .device/debs
    grep -qx '/.device/' .gitignore 2>/dev/null || echo '/.device/' >>.gitignore
    (cd .device/debs && apt-get download "${packages[@]}" >/dev/null 2>&1) ||
      { echo "device.sh: apt-get download failed (run apt-get update first)" >&2; exit 1; }
    echo "device.sh: $(ls .device/debs | wc -l) packages in .device/debs ($(du -sh .device/debs | cut -f1))"
    ;;
  run)
    [[ -d .device/debs ]] || { echo "device.sh: no .device/debs: run 'scripts/device.sh pack' here and carry .device" >&2; exit 1; }
    prefix=$PWD/.device/prefix
    mkdir -p "$prefix"
    for deb in .device/debs/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
    export PATH=$PATH:$prefix/usr/bin
    export PKG_CONFIG=$prefix/usr/bin/pkgconf
    export PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig:$prefix/usr/lib/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=$prefix
    export CPLUS_INCLUDE_PATH=$prefix/usr/include
    export LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PYTHONPATH=$prefix/usr/lib/python3/dist-packages${PYTHONPATH:+:$PYTHONPATH}
    python=$(command -v python3)
    out=${OUT:-$PWD/.device/out}
    mkdir -p "$out"
    nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
    "$python" -c 'import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.device_count())' \
      >"$out/torch.txt" 2>&1
    [[ -f build-device/build.ninja ]] || meson setup build-device "-Dtorch_python=$python" -Dtests=enabled >"$out/configure.log" 2>&1 ||
      { tail -40 "$out/configure.log"; exit 1; }
    ninja -C build-device -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -A8 FAILED "$out/build.log" | head -80; exit 1; }
    build-device/meshrun --version | tee "$out/version.txt"
    meson test -C build-device --suite gpu --print-errorlogs >"$out/gpu-suite.log" 2>&1 || true
    tail -30 "$out/gpu-suite.log"
    build-device/bench/train_bench --baseline bench/train_baseline.py --device cuda --shape 1B \
      >"$out/train-bench-gpu.txt" 2>&1 || true
    tail -20 "$out/train-bench-gpu.txt"
    ;;
  *)
    echo "usage: scripts/device.sh pack | run" >&2
    exit 2
    ;;
esac
