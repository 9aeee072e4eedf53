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
# Whether the interpreter that chose the default directory searches the one installed into.
if(MLAV_PYTHON AND NOT "$ENV{DESTDIR}")
  get_filename_component(mlav_site "${MLAV_PKG_DIR}" DIRECTORY)
  execute_process(COMMAND "${MLAV_PYTHON}" -c
    "import os, sys; sys.exit(0 if os.path.normpath(sys.argv[1]) in map(os.path.normpath, sys.path) else 1)"
    "${mlav_site}" RESULT_VARIABLE mlav_on_path OUTPUT_QUIET ERROR_QUIET)
  if(mlav_on_path EQUAL 0)
    message(STATUS "mlaverify: ${MLAV_PYTHON} imports the package from ${mlav_site}")
  else()
    message(STATUS "mlaverify: ${MLAV_PYTHON} does not search ${mlav_site}: set "
                   "PYTHONPATH=${mlav_site} (or install the wheel: cmake --build BUILD --target wheel)")
  endif()
endif()
