#!/usr/bin/env bash
# ctest test_install_python: the Python package finds its library without MLAVERIFY_LIBRARY, and
# installs offline.
#   1. cmake --install into a scratch prefix puts the package beside the library; imported from
#      there (PYTHONPATH only), it loads that prefix's libmlaverify and runs cpu vs reference;
#      the same after the whole prefix is moved (the recorded libdir is relative).
#   2. pip install --no-build-isolation --no-index of a copy of python/ (offline: its build backend
#      is python/build_wheel.py, standard library only), imported with the library on the
#      loader's path.
#   python_run.sh CMAKE BUILD_DIR WORK_DIR PYTHON SOURCE_DIR          (exit 77: skipped)
set -euo pipefail
cmake=$1 build=$2 work=$3 py=$4 src=$5
rm -rf "$work"
mkdir -p "$work"
unset MLAVERIFY_LIBRARY PYTHONPATH
export PYTHONDONTWRITEBYTECODE=1 PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1

smoke='
import sys, numpy as np, mlaverify as mv, mlaverify._lib as L
want = sys.argv[1]
assert L.path().startswith(want), "loaded %s, expected a library under %s" % (L.path(), want)
rng = np.random.default_rng(1)
kv = rng.uniform(-1, 1, (4, 2, 12)).astype(np.float32)
q = rng.uniform(-1, 1, (3, 2, 12)).astype(np.float32)
pt = np.array([[0, 1, 2, 3]], np.int32)
args = dict(q_indptr=[0, 3], kv_lens=[7], softmax_scale=0.3, d_latent=8, d_rope=4,
            dtype="f32", page_size=2, num_heads=2)
o1, l1 = mv.Plan(backend="cpu", **args).run(q, kv, pt)
o2, l2 = mv.Plan(backend="reference", **args).run(q, kv, pt)
assert np.allclose(o1, o2, atol=1e-5) and np.allclose(l1, l2, atol=1e-5)
print("  mlaverify %s from %s, library %s %s: cpu matches reference"
      % (mv.__version__, mv.__file__, mv.version(), L.path()))
'

echo "== cmake --install $build --prefix $work/prefix"
"$cmake" --install "$build" --prefix "$work/prefix" > "$work/install.log"
pkgdir=$(dirname "$(find "$work/prefix" -path '*/mlaverify/_install_paths.py' | head -n1)")
[ -n "$pkgdir" ] || { echo "the Python package was not installed under $work/prefix"; exit 1; }
(cd "$work" && PYTHONPATH=$(dirname "$pkgdir") "$py" -c "$smoke" "$work/prefix/")
echo "== the prefix moved"
mv "$work/prefix" "$work/moved"
(cd "$work" && PYTHONPATH=${pkgdir/$work\/prefix/$work\/moved}/.. "$py" -c "$smoke" "$work/moved/")

echo "== pip install --no-build-isolation --no-index (offline)"
if ! "$py" -m pip --version > /dev/null 2>&1; then
  echo "test_install_python: no pip for $py (apt-get install python3-pip): skipped"
  exit 77
fi
cp -r "$src/python" "$work/src"
cp "$src/LICENSE" "$work/LICENSE"   # the wheel carries it (python/build_wheel.py)
rm -rf "$work/src/build" "$work/src/"*.egg-info
"$py" -m pip install --no-build-isolation --no-index --no-deps --target "$work/pip" \
  "$work/src" > "$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
libdir=$(dirname "$(find "$work/moved" -name 'libmlaverify.so' | head -n1)")
(cd "$work" && PYTHONPATH=$work/pip LD_LIBRARY_PATH=$libdir "$py" -c "$smoke" "")
echo "test_install_python: passed"
