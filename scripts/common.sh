# Shared by scripts/test.sh, scripts/run.sh and .ci/run (sourced, not run): the Debian 12
# packages the build needs, and the one way this project is configured and built.

# build-essential: gcc, make (and gcc's ASan/UBSan/TSan runtimes); libopenblas-openmp-dev: BLAS
# for the CPU backend (OpenMP flavour, so its threads and ours share one runtime); libcmocka-dev:
# tests; libcjson-dev: golden bundle headers; python3-numpy, python3-pytest: bundle scripts and
# the Python binding's tests (test_python); python3-pip (python3-setuptools and python3-wheel
# are its dependencies; python/build_wheel.py needs neither): the offline pip installs of
# test_install_python and test_wheel; python3-torch (CPU): the binding's torch paths in
# test_python (torch tensors, StepPlan on torch, the SGLang backend's hooks, the torch op);
# libgfortran-12-dev: the static link of OpenBLAS (its pkg-config Libs.private name -lgfortran;
# test_install_consumer's static pkg-config case; a fresh Debian 12 lacks it); gnuplot-nox:
# bench --plot and bench/plot.gp (test_cli_bench_plot); clang, libclang-rt-dev (compiler-rt:
# libFuzzer and clang's sanitizer runtimes, only recommended by clang) and libomp-dev (clang's
# OpenMP, with the Archer tool for TSan): scripts/fuzz.sh and scripts/sanitize.sh tsan
MLAV_DEB_PACKAGES="build-essential cmake pkg-config libopenblas-openmp-dev libcmocka-dev libcjson-dev python3 python3-numpy python3-pytest python3-pip python3-setuptools python3-wheel python3-torch libgfortran-12-dev gnuplot-nox clang libclang-rt-dev libomp-dev"

mlav_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Packages of the list that are not installed.
mlav_missing_packages() {
  local p missing=""
  for p in $MLAV_DEB_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  echo "$missing"
}

# Install the missing ones (root only; apt-get update first, as a fresh machine has no lists).
mlav_install_deps() {
  local missing
  missing=$(mlav_missing_packages)
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "missing Debian packages:$missing (run as root, or: sudo apt-get install$missing)" >&2
    return 1
  fi
  echo "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  # shellcheck disable=SC2086
  apt-get install -y --no-install-recommends $missing
}

# nvcc lives outside PATH on a stock CUDA install; MLAV_CUDA=AUTO finds it only through PATH.
mlav_cuda_path() {
  if [ -d /usr/local/cuda/bin ]; then
    case ":$PATH:" in *":/usr/local/cuda/bin:"*) ;; *) export PATH=/usr/local/cuda/bin:$PATH ;; esac
  fi
}

# Configure and build into $1 (default build). Honours MLAV_CUDA (AUTO), CMAKE_BUILD_TYPE
# (Release), CUDA_ARCHS (CMAKE_CUDA_ARCHITECTURES; default: the project's full list) and
# JOBS (nproc).
mlav_build() {
  local dir=${1:-build}
  local args=(-S "$mlav_root" -B "$dir" -DMLAV_CUDA="${MLAV_CUDA:-AUTO}"
              -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}")
  [ -n "${CUDA_ARCHS:-}" ] && args+=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
  mlav_cuda_path
  cmake "${args[@]}"
  cmake --build "$dir" -j "${JOBS:-$(nproc)}"
}

# Configure and build into $1 with MLAV_SANITIZE=$2 (address,undefined / thread), CPU only (the
# sanitizers see host code), RelWithDebInfo so that reports name lines; more cmake arguments may
# follow. CC picks the compiler (clang for TSan with Archer, and for the fuzz targets).
mlav_build_sanitized() {
  local dir=$1 san=$2
  shift 2
  cmake -S "$mlav_root" -B "$dir" -DMLAV_CUDA=OFF -DMLAV_SANITIZE="$san" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLAV_BUILD_BENCH=OFF "$@"
  cmake --build "$dir" -j "${JOBS:-$(nproc)}"
}
