"""Build the mlaverify wheel with the Python standard library alone (no setuptools, no wheel).

Two ways in, one builder:

* the command line (CMake's ``wheel`` target runs it)::

      python3 python/build_wheel.py --library build/libmlaverify.so --out-dir build/dist

  writes ``mlaverify-VERSION-py3-none-PLATFORM.whl``: the package and one copy of the library,
  stored under its soname (``mlaverify/libmlaverify.so.0.MINOR``), which the package's loader
  looks for next to itself. PLATFORM is read from the library's ELF header (``linux_x86_64``,
  ``linux_aarch64``); no manylinux tag, because the library links the system's OpenBLAS and
  OpenMP runtime, which the wheel does not carry.
* PEP 517 (``pyproject.toml`` names this file as its in-tree backend, with no build
  requirements), so ``pip install ./python`` builds offline in any venv. From the source tree
  there is no library to bundle: that wheel is ``py3-none-any`` and the package finds the
  library at run time (``MLAVERIFY_LIBRARY``, a CMake install, the system path). A library
  given as ``--config-settings library=PATH`` (or ``$MLAVERIFY_WHEEL_LIBRARY``), or copied into
  ``mlaverify/`` (its symlinks become identical copies: one is kept), is bundled as above.

The wheel is reproducible: entries sorted, timestamps from ``$SOURCE_DATE_EPOCH`` (default
1980-01-01), fixed permissions.
"""
import argparse
import base64
import hashlib
import io
import os
import re
import struct
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "mlaverify"
NAME = "mlaverify"
SUMMARY = ("MLA verify attention for speculative decoding (EAGLE trees, DFlash blocks): "
           "ctypes binding of libmlaverify")
LICENSE = "Apache-2.0"
REQUIRES_PYTHON = ">=3.9"
REQUIRES = ["numpy"]
EXTRAS = {"torch": ["torch"], "test": ["pytest"]}
# SGLang runs every entry point of this group in each of its processes before it parses its
# flags: the attention backend `mlaverify` (python/README.md, "SGLang")
ENTRY_POINTS = {"sglang.srt.plugins": {"mlaverify": "mlaverify.sglang_plugin:register"}}
CLASSIFIERS = [
    "License :: OSI Approved :: Apache Software License",
    "Programming Language :: Python :: 3",
    "Programming Language :: C",
    "Operating System :: POSIX :: Linux",
]
# ELF e_machine -> the platform tag's machine
_ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64", 0x15: "ppc64le", 0xF3: "riscv64"}


class WheelError(Exception):
    """A wheel cannot be built; the message says why and what to do."""


def package_version(pkg_dir):
    """``__version__`` of the package, read from its ``__init__.py`` without importing it."""
    with open(os.path.join(pkg_dir, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not m:
        raise WheelError("%s/__init__.py has no __version__ = \"...\" line" % pkg_dir)
    return m.group(1)


def soname(version):
    """The soname of libmlaverify VERSION (the rule of CHANGELOG.md and CMakeLists.txt)."""
    major, minor = (int(x) for x in version.split(".")[:2])
    return "libmlaverify.so.%d.%d" % (major, minor) if major == 0 else "libmlaverify.so.%d" % major


def platform_tag(library):
    """linux_MACHINE from the library's ELF header; a sentence when it is not a 64-bit
    little-endian ELF shared object."""
    with open(library, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF":
        raise WheelError("%s is not an ELF file" % library)
    if head[4] != 2 or head[5] != 1:
        raise WheelError("%s is not a 64-bit little-endian ELF file" % library)
    e_type, e_machine = struct.unpack_from("<HH", head, 16)
    if e_type != 3:  # ET_DYN
        raise WheelError("%s is not a shared library (ELF type %d)" % (library, e_type))
    if e_machine not in _ELF_MACHINES:
        raise WheelError("%s: unknown ELF machine 0x%x" % (library, e_machine))
    return "linux_" + _ELF_MACHINES[e_machine]


def _package_files(pkg_dir):
    """(path in the wheel, file on disk) of the package's sources: every file but bytecode, the
    CMake install's _install_paths.py and libraries (the library goes in once, by name)."""
    out = []
    for root, dirs, files in os.walk(pkg_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if (name.endswith((".pyc", ".pyo")) or name == "_install_paths.py"
                    or name.startswith("libmlaverify.") or name.endswith(".so")):
                continue
            full = os.path.join(root, name)
            rel = os.path.relpath(full, os.path.dirname(pkg_dir)).replace(os.sep, "/")
            out.append((rel, full))
    return out


def _readme():
    path = os.path.join(HERE, "README.md")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    return ""


def metadata(version):
    lines = ["Metadata-Version: 2.1", "Name: " + NAME, "Version: " + version,
             "Summary: " + SUMMARY, "License: " + LICENSE]
    lines += ["Classifier: " + c for c in CLASSIFIERS]
    lines.append("Requires-Python: " + REQUIRES_PYTHON)
    lines += ["Requires-Dist: " + r for r in REQUIRES]
    for extra, reqs in EXTRAS.items():
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (r, extra) for r in reqs]
    readme = _readme()
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + readme
    return "\n".join(lines) + "\n"


def entry_points():
    """The dist-info's entry_points.txt (the packaging spec's INI form)."""
    out = []
    for group, entries in sorted(ENTRY_POINTS.items()):
        out.append("[%s]" % group)
        out += ["%s = %s" % (k, v) for k, v in sorted(entries.items())]
        out.append("")
    return "\n".join(out)


def _license_text():
    for path in (os.path.join(HERE, "..", "LICENSE"), os.path.join(HERE, "LICENSE")):
        if os.path.exists(path):
            with open(path, "rb") as f:
                return f.read()
    raise WheelError("no LICENSE file beside python/ or in it: the wheel must carry its license")


def _record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _date_time():
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    return time.gmtime(max(epoch, 315532800))[:6]


def build(out_dir, library=None, pkg_dir=None, expect_version=None):
    """Write the wheel into out_dir and return its file name."""
    pkg_dir = pkg_dir or os.path.join(HERE, PACKAGE)
    version = package_version(pkg_dir)
    if expect_version and expect_version != version:
        raise WheelError("the package says version %s but the build is %s: keep __version__ in "
                         "python/mlaverify/__init__.py and project(VERSION) in CMakeLists.txt "
                         "the same" % (version, expect_version))
    files = [(rel, full, 0o644) for rel, full in _package_files(pkg_dir)]
    if library:
        library = os.path.realpath(library)
        if not os.path.isfile(library):
            raise WheelError("no library at %s: build it first (cmake --build build)" % library)
        tag = "py3-none-" + platform_tag(library)
        files.append((PACKAGE + "/" + soname(version), library, 0o755))
    else:
        tag = "py3-none-any"
    dist_info = "%s-%s.dist-info" % (NAME, version)
    wheel_meta = ("Wheel-Version: 1.0\nGenerator: mlaverify build_wheel.py\n"
                  "Root-Is-Purelib: %s\nTag: %s\n" % ("false" if library else "true", tag))
    extra = [(dist_info + "/METADATA", metadata(version).encode("utf-8")),
             (dist_info + "/WHEEL", wheel_meta.encode()),
             (dist_info + "/LICENSE", _license_text()),
             (dist_info + "/entry_points.txt", entry_points().encode("utf-8"))]
    name = "%s-%s-%s.whl" % (NAME, version, tag)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    record = []
    stamp = _date_time()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        def add(arcname, data, mode):
            info = zipfile.ZipInfo(arcname, stamp)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            record.append("%s,%s,%d" % (arcname, _record_hash(data), len(data)))
        for rel, full, mode in sorted(files):
            with open(full, "rb") as f:
                add(rel, f.read(), mode)
        for rel, data in extra:
            add(rel, data, 0o644)
        record.append(dist_info + "/RECORD,,")
        info = zipfile.ZipInfo(dist_info + "/RECORD", stamp)
        info.external_attr = (0o100644) << 16
        z.writestr(info, ("\n".join(record) + "\n").encode(), zipfile.ZIP_DEFLATED)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(buf.getvalue())
    os.replace(tmp, path)
    return name


# ---- PEP 517 -----------------------------------------------------------------------------------

def _library_in_package(pkg_dir):
    """The library copied into the package folder (``cp build/libmlaverify.so* mlaverify/``
    makes the symlinks three identical files): that one file, or None; a sentence when the
    copies differ."""
    found = {}
    for name in sorted(os.listdir(pkg_dir)):
        path = os.path.realpath(os.path.join(pkg_dir, name))
        if name.startswith("libmlaverify.so") and os.path.isfile(path):
            with open(path, "rb") as f:
                found.setdefault(hashlib.sha256(f.read()).digest(), path)
    if len(found) > 1:
        raise WheelError("%s holds %d different libmlaverify.so files: remove them and build the "
                         "wheel with cmake --build build --target wheel" % (pkg_dir, len(found)))
    return next(iter(found.values()), None)


def _library_setting(config_settings):
    lib = (config_settings or {}).get("library") or os.environ.get("MLAVERIFY_WHEEL_LIBRARY")
    return lib or _library_in_package(os.path.join(HERE, PACKAGE))


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    try:
        return build(wheel_directory, library=_library_setting(config_settings))
    except WheelError as e:
        sys.exit("mlaverify: cannot build the wheel: %s" % e)


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    sys.exit("mlaverify: no sdist: build the wheel (cmake --build build --target wheel, or "
             "pip wheel ./python) from the repository")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Build the mlaverify wheel (standard library only).")
    ap.add_argument("--library", help="libmlaverify.so to bundle (a symlink is followed; one "
                    "copy is stored under the soname). Without it: a py3-none-any wheel")
    ap.add_argument("--out-dir", required=True, help="where the .whl goes")
    ap.add_argument("--expect-version", help="refuse to build when the package's __version__ "
                    "differs (CMake passes its project version)")
    args = ap.parse_args(argv)
    try:
        name = build(args.out_dir, library=args.library, expect_version=args.expect_version)
    except WheelError as e:
        print("build_wheel.py: %s" % e, file=sys.stderr)
        return 2
    print(os.path.join(args.out_dir, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
