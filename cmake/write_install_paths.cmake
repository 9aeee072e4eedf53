# Included by `cmake --install` (see install.cmake): writes the Python package's
# _install_paths.py, which tells it where the C library was installed.
# In: MLAV_PKG_DIR, MLAV_LIB_DIR (relative to the prefix, or absolute), MLAV_PY_TO_LIBDIR
# (package -> libdir, relative; empty when either is absolute), MLAV_VERSION.
foreach(v MLAV_PKG_DIR MLAV_LIB_DIR)
  if(NOT IS_ABSOLUTE "${${v}}")
    set(${v} "${CMAKE_INSTALL_PREFIX}/${${v}}")
  endif()
endforeach()
set(rel "None")
if(MLAV_PY_TO_LIBDIR)
  set(rel "\"${MLAV_PY_TO_LIBDIR}\"")
endif()
set(file "$ENV{DESTDIR}${MLAV_PKG_DIR}/_install_paths.py")
message(STATUS "Installing: ${file}")
file(WRITE "${file}" "\"\"\"Written by cmake --install: where libmlaverify ${MLAV_VERSION} was installed.\"\"\"
LIBDIR_FROM_PACKAGE = ${rel}
LIBDIR = \"${MLAV_LIB_DIR}\"
")
