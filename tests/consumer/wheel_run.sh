#!/usr/bin/env bash
# ctest test_wheel: the wheel installs offline into a fresh venv and runs with no library path.
#   1. cmake --build BUILD --target wheel: one mlaverify-VERSION-py3-none-linux_ARCH.whl holding
#      the package, exactly one library file (the soname), a LICENSE and an Apache-2.0 METADATA,
#      and a RECORD whose hashes and sizes match every entry;
#   2. a fresh venv, pip install --no-index of that file, then from outside the source tree, with
#      MLAVERIFY_LIBRARY, LD_LIBRARY_PATH and PYTHONPATH unset: plan and run on the cpu backend,
#      compared with the reference backend, the library loaded from the venv's package;
#   3. pip install --no-index ./python (a copy) into a plain venv, which has no setuptools: the
#      in-tree backend builds it offline; with build/libmlaverify.so* copied into the package
#      (three identical files), the install holds one library, under the soname.
# The venv of step 2 is made with --system-site-packages: a plain venv cannot get numpy offline
# (pip has no index and Debian ships numpy only as python3-numpy), and the wheel needs numpy; the
# package itself comes from the venv (asserted). Without python3-venv (no ensurepip) the venvs are
# made --without-pip and the outer pip installs into them (pip --python).
#   wheel_run.sh CMAKE BUILD_DIR WORK_DIR PYTHON SOURCE_DIR          (exit 77: skipped)
set -euo pipefail
cmake=$1 build=$2 work=$3 py=$4 src=$5
rm -rf "$work"
mkdir -p "$work"
unset MLAVERIFY_LIBRARY PYTHONPATH LD_LIBRARY_PATH MLAVERIFY_WHEEL_LIBRARY
export PYTHONDONTWRITEBYTECODE=1 PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
if ! "$py" -m pip --version > /dev/null 2>&1; then
  echo "test_wheel: no pip for $py (apt-get install python3-pip): skipped"
  exit 77
fi

echo "== cmake --build $build --target wheel"
rm -rf "$build/dist"
"$cmake" --build "$build" --target wheel > "$work/wheel.log" 2>&1 || { cat "$work/wheel.log"; exit 1; }
shopt -s nullglob
wheels=("$build"/dist/*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "expected one wheel in $build/dist, found ${#wheels[@]}"; exit 1; }
whl=${wheels[0]}
echo "   $(basename "$whl") ($(stat -c %s "$whl") bytes)"
case "$(basename "$whl")" in
  mlaverify-*-py3-none-linux_*.whl) ;;
  *) echo "not a platform wheel: $(basename "$whl")"; exit 1 ;;
esac

"$py" - "$whl" <<'EOF'
import base64, hashlib, re, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
libs = [n for n in names if "libmlaverify" in n]
ver = re.match(r"mlaverify-([^-]+)-", sys.argv[1].rsplit("/", 1)[-1]).group(1)
major, minor = (int(x) for x in ver.split(".")[:2])
soname = "libmlaverify.so.%d.%d" % (major, minor) if major == 0 else "libmlaverify.so.%d" % major
assert libs == ["mlaverify/" + soname], "library entries %s, expected one, the soname %s" % (libs, soname)
di = "mlaverify-%s.dist-info/" % ver
meta = z.read(di + "METADATA").decode()
assert "\nLicense: Apache-2.0\n" in meta, "METADATA lacks License: Apache-2.0"
assert "Apache License" in z.read(di + "LICENSE").decode(), "no Apache license text"
assert "Root-Is-Purelib: false" in z.read(di + "WHEEL").decode()
rows = [r.split(",") for r in z.read(di + "RECORD").decode().splitlines()]
recorded = {r[0] for r in rows}
assert recorded == set(names), "RECORD and the archive differ: %s" % (recorded ^ set(names))
for name, h, size in rows:
    if name == di + "RECORD":
        assert h == "" and size == ""
        continue
    data = z.read(name)
    want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert h == want and int(size) == len(data), "RECORD row of %s does not match" % name
print("   contents: %d entries, one library (%s), RECORD verified, License: Apache-2.0"
      % (len(names), soname))
EOF

# make_venv DIR [--system-site-packages]: echoes how pip is to be run for it
pip_for() {
  local dir=$1
  shift
  if "$py" -m venv "$@" "$dir" > "$work/venv.log" 2>&1; then
    echo "$dir/bin/python -m pip"
  else
    rm -rf "$dir"
    "$py" -m venv --without-pip "$@" "$dir"
    echo "$py -m pip --python $dir/bin/python"
  fi
}

echo "== a fresh venv (--system-site-packages, for numpy), pip install --no-index the wheel"
pip=$(pip_for "$work/venv" --system-site-packages)
echo "   pip: $pip"
# an interpreter that is itself a venv (a GPU host's /opt/.../.venv) gives its venvs the base
# Python's site-packages, not its own: no numpy there and no index to fetch it from
if ! "$work/venv/bin/python" -c "import numpy" 2> /dev/null; then
  echo "test_wheel skipped: a venv of $py sees no numpy (the interpreter is itself a venv?)"
  exit 77
fi
$pip install --no-index "$whl" > "$work/pip-wheel.log" 2>&1 || { cat "$work/pip-wheel.log"; exit 1; }
mkdir -p "$work/elsewhere"
(cd "$work/elsewhere" && "$work/venv/bin/python" - "$work/venv" <<'EOF'
import os, sys, numpy as np
import mlaverify as mv, mlaverify._lib as L
venv = os.path.realpath(sys.argv[1])
assert os.path.realpath(mv.__file__).startswith(venv), "mlaverify imported from %s" % mv.__file__
lib = os.path.realpath(L.path())
assert lib.startswith(venv) and os.path.basename(lib) == L.SONAME, "library loaded from %s" % lib
# SGLang finds the attention backend through this entry point (python/README.md, "SGLang")
import importlib.metadata as md
eps = [e for e in md.entry_points(group="sglang.srt.plugins") if e.name == "mlaverify"]
assert [e.value for e in eps] == ["mlaverify.sglang_plugin:register"], eps
seed = int.from_bytes(os.urandom(4), "little")
rng = np.random.default_rng(seed)
H, Dl, Dr, P = 4, 32, 8, 4
q_indptr, kv_lens = [0, 3, 5], [11, 6]
pages = rng.permutation(8).astype(np.int32)
kv = rng.uniform(-1, 1, (8, P, Dl + Dr)).astype(np.float32)
q = rng.uniform(-1, 1, (5, H, Dl + Dr)).astype(np.float32)
pt = np.stack([pages[:3], np.r_[pages[3:5], 0]]).astype(np.int32)
args = dict(q_indptr=q_indptr, kv_lens=kv_lens, softmax_scale=0.2, d_latent=Dl, d_rope=Dr,
            dtype="f32", page_size=P, num_heads=H)
o1, l1 = mv.Plan(backend="cpu", **args).run(q, kv, pt)
o2, l2 = mv.Plan(backend="reference", **args).run(q, kv, pt)
err = float(np.abs(o1 - o2).max())
assert err < 1e-5 and np.allclose(l1, l2, atol=1e-5), "cpu vs reference: %g (seed %d)" % (err, seed)
print("   seed %d: cpu matches reference (max |diff| %.1e); mlaverify %s, library %s"
      % (seed, err, mv.__version__, lib))
EOF
)

echo "== pip install --no-index ./python (a copy) into a plain venv: no setuptools there"
cp -r "$src/python" "$work/src"
cp "$src/LICENSE" "$work/LICENSE"
rm -rf "$work/src/build" "$work/src/"*.egg-info "$work/src/mlaverify/"libmlaverify.*
pip=$(pip_for "$work/plain")
# ensurepip brings setuptools into a venv (Python < 3.12): out with it, to prove it is not needed
$pip uninstall -y setuptools > /dev/null 2>&1 || true
"$work/plain/bin/python" -c "import setuptools" 2> /dev/null && { echo "the plain venv has setuptools"; exit 1; }
$pip install --no-index --no-deps "$work/src" > "$work/pip-src.log" 2>&1 || { cat "$work/pip-src.log"; exit 1; }
"$work/plain/bin/python" -c "
import importlib.metadata as m, os, sys
d = m.distribution('mlaverify')
assert d.metadata['License'] == 'Apache-2.0', d.metadata['License']
files = [str(f) for f in d.files]
assert not [f for f in files if 'libmlaverify' in f], files
print('   mlaverify', d.version, 'from source:', len(files), 'files, no library (found at run time)')
"

echo "== pip install ./python with build/libmlaverify.so* copied into the package: one library"
cp "$build"/libmlaverify.so* "$work/src/mlaverify/"       # the symlinks become identical copies
$pip install --no-index --no-deps --target "$work/copied" "$work/src" > "$work/pip-copied.log" 2>&1 \
  || { cat "$work/pip-copied.log"; exit 1; }
libs=$(cd "$work/copied/mlaverify" && ls libmlaverify*)
v=$(basename "$whl" | cut -d- -f2)
case "$v" in 0.*) want=libmlaverify.so.${v%.*} ;; *) want=libmlaverify.so.${v%%.*} ;; esac
[ "$libs" = "$want" ] \
  || { echo "installed libraries: $libs"; exit 1; }
echo "   $(ls "$work/src/mlaverify/"libmlaverify* | wc -l) copies in, one library installed: $libs"
echo "test_wheel: passed"
