# Install rules: the shared and static library, the header, a CMake package (find_package) and a
# pkg-config file, all relocatable so `cmake --install build --prefix DIR` works for any DIR.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MLAV_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mlaverify)

install(TARGETS mlaverify mlaverify_static EXPORT mlaverifyTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/mlaverify.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Apache-2.0: the license travels with every installed tree
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CHANGELOG.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# With CUDA, the archive's CUDA objects are host C++ (static-local guards, operator new). CMake
# records that only as link language CUDA, which a C-only consumer never enables, so its link
# would miss the C++ runtime: name the one nvcc's host compiler uses.
set(MLAV_CXX_RUNTIME "")
if(MLAV_WITH_CUDA)
  foreach(rt stdc++ c++)
    if(NOT MLAV_CXX_RUNTIME AND rt IN_LIST CMAKE_CUDA_IMPLICIT_LINK_LIBRARIES)
      set(MLAV_CXX_RUNTIME ${rt})
    endif()
  endforeach()
  if(MLAV_CXX_RUNTIME)
    target_link_libraries(mlaverify_static INTERFACE $<INSTALL_INTERFACE:$<LINK_ONLY:${MLAV_CXX_RUNTIME}>>)
  endif()
endif()

# Imported targets as mlaverify::mlaverify and mlaverify::mlaverify_static
install(EXPORT mlaverifyTargets NAMESPACE mlaverify:: FILE mlaverifyTargets.cmake
  DESTINATION ${MLAV_CMAKE_DIR})

# How the config file finds OpenBLAS again: the same way this build did, so a consumer of the
# static archive links the library the objects were built against.
if(OPENBLAS_FOUND)
  set(MLAV_OPENBLAS_VIA_PKGCONFIG 1)
else()
  set(MLAV_OPENBLAS_VIA_PKGCONFIG 0)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/mlaverifyConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/mlaverifyConfig.cmake
  INSTALL_DESTINATION ${MLAV_CMAKE_DIR})
# 0.x: a minor release may change the API, so only the same MAJOR.MINOR satisfies a request
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/mlaverifyConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mlaverifyConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/mlaverifyConfigVersion.cmake DESTINATION ${MLAV_CMAKE_DIR})

# ---- pkg-config ------------------------------------------------------------------------------
# prefix is derived from the .pc file's own location (${pcfiledir}) rather than written in, so
# the tree stays valid wherever --prefix or DESTDIR puts it.
file(RELATIVE_PATH MLAV_PC_TO_PREFIX /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" MLAV_PC_TO_PREFIX "${MLAV_PC_TO_PREFIX}")
set(MLAV_PC_REQUIRES_PRIVATE "")
set(MLAV_PC_LIBS_PRIVATE "")
if(OPENBLAS_FOUND)
  # openblas.pc adds its own -L and, with --static, gfortran and friends
  set(MLAV_PC_REQUIRES_PRIVATE "Requires.private: openblas")
else()
  foreach(l ${BLAS_LIBRARIES})
    string(APPEND MLAV_PC_LIBS_PRIVATE " ${l}")
  endforeach()
endif()
# libgomp (and pthread) by name: -fopenmp would also ask the consumer's compiler to compile OpenMP.
# A runtime outside the linker's default directories (clang's libomp) also gets its -L and an
# rpath, or a static consumer would neither link nor start.
foreach(dir ${MLAV_OMP_RUNTIME_DIRS})
  string(APPEND MLAV_PC_LIBS_PRIVATE " -L${dir} -Wl,-rpath,${dir}")
endforeach()
foreach(l ${OpenMP_C_LIB_NAMES})
  string(APPEND MLAV_PC_LIBS_PRIVATE " -l${l}")
endforeach()
string(APPEND MLAV_PC_LIBS_PRIVATE " -lm")
if(MLAV_WITH_CUDA)
  # what CUDA::cudart_static brings: the runtime archive and the system libraries it calls
  string(APPEND MLAV_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt -lpthread")
  if(MLAV_CXX_RUNTIME)
    string(APPEND MLAV_PC_LIBS_PRIVATE " -l${MLAV_CXX_RUNTIME}")
  endif()
endif()
string(STRIP "${MLAV_PC_LIBS_PRIVATE}" MLAV_PC_LIBS_PRIVATE)
configure_file(${CMAKE_CURRENT_LIST_DIR}/mlaverify.pc.in ${CMAKE_CURRENT_BINARY_DIR}/mlaverify.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mlaverify.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- the Python binding, installed beside the library -----------------------------------------
# `cmake --install` puts python/mlaverify/ into MLAV_PYTHON_INSTALL_DIR and writes
# mlaverify/_install_paths.py, which records where the library went: relative to the package (the
# tree may move) and as the install-time absolute path. The package looks there after its own
# directory, so it needs no MLAVERIFY_LIBRARY.
# The default directory is one the interpreter MLAV_PYTHON_FOR_INSTALL (default: python3 on PATH)
# searches for this prefix: the first entry of its sys.path under CMAKE_INSTALL_PREFIX that is a
# site-packages or dist-packages directory (Debian's python3 and /usr/local:
# lib/python3.X/dist-packages), else its own scheme's purelib path relative to its base
# (lib/python3.X/site-packages: searched when the prefix is that interpreter's, e.g. a venv).
# `cmake --install` says whether that interpreter searches the directory it installed into, and
# otherwise which PYTHONPATH to set.
find_program(MLAV_PYTHON_FOR_INSTALL NAMES python3
  DOC "the Python whose search path picks the default MLAV_PYTHON_INSTALL_DIR")
set(mlav_py_default "lib/python3/dist-packages")
if(MLAV_PYTHON_FOR_INSTALL)
  execute_process(COMMAND "${MLAV_PYTHON_FOR_INSTALL}" -c [=[
import os, sys, sysconfig
prefix = os.path.normpath(sys.argv[1])
for p in sys.path:
    p = os.path.normpath(p)
    if p.startswith(prefix + os.sep) and os.path.basename(p) in ("site-packages", "dist-packages"):
        print(os.path.relpath(p, prefix)); break
else:
    base = "/mlav-base"
    print(os.path.relpath(sysconfig.get_path("purelib", "posix_prefix",
                                             vars={"base": base, "platbase": base}), base))
]=] "${CMAKE_INSTALL_PREFIX}" OUTPUT_VARIABLE mlav_py_found OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE mlav_py_rc ERROR_QUIET)
  if(mlav_py_rc EQUAL 0 AND mlav_py_found)
    set(mlav_py_default "${mlav_py_found}")
  endif()
endif()
set(MLAV_PYTHON_INSTALL_DIR "${mlav_py_default}" CACHE STRING
  "where cmake --install puts the Python package mlaverify (relative: to the prefix)")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/mlaverify DESTINATION ${MLAV_PYTHON_INSTALL_DIR}
  FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE PATTERN "_install_paths.py" EXCLUDE)
set(MLAV_PY_TO_LIBDIR "")
if(NOT IS_ABSOLUTE "${MLAV_PYTHON_INSTALL_DIR}" AND NOT IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  file(RELATIVE_PATH MLAV_PY_TO_LIBDIR /root/${MLAV_PYTHON_INSTALL_DIR}/mlaverify
       /root/${CMAKE_INSTALL_LIBDIR})
endif()
# (run at install time, when the prefix is known: cmake --install --prefix overrides it)
install(CODE "set(MLAV_PKG_DIR [[${MLAV_PYTHON_INSTALL_DIR}/mlaverify]])
set(MLAV_LIB_DIR [[${CMAKE_INSTALL_LIBDIR}]])
set(MLAV_PY_TO_LIBDIR [[${MLAV_PY_TO_LIBDIR}]])
set(MLAV_VERSION [[${PROJECT_VERSION}]])
set(MLAV_PYTHON [[${MLAV_PYTHON_FOR_INSTALL}]])
include([[${CMAKE_CURRENT_LIST_DIR}/write_install_paths.cmake]])")
