# The `wheel` target: build/dist/mlaverify-VERSION-py3-none-linux_ARCH.whl, the Python package and
# one copy of this build's libmlaverify (stored under its soname), written by python/build_wheel.py
# with the standard library alone. Install it offline: pip install --no-index build/dist/*.whl
# (numpy must already be importable). Any python3 >= 3.9 builds it: -DMLAV_WHEEL_PYTHON=... picks
# one (default: the one that chose the install directory, python3 on PATH).
set(MLAV_WHEEL_PYTHON "${MLAV_PYTHON_FOR_INSTALL}" CACHE FILEPATH "python3 that runs python/build_wheel.py")
if(MLAV_WHEEL_PYTHON)
  add_custom_target(wheel
    COMMAND "${MLAV_WHEEL_PYTHON}" ${PROJECT_SOURCE_DIR}/python/build_wheel.py
            --library $<TARGET_FILE:mlaverify> --out-dir ${CMAKE_BINARY_DIR}/dist
            --expect-version ${PROJECT_VERSION}
    DEPENDS mlaverify
    COMMENT "mlaverify: the wheel into ${CMAKE_BINARY_DIR}/dist"
    VERBATIM)
else()
  add_custom_target(wheel
    COMMAND ${CMAKE_COMMAND} -E echo "mlaverify: no python3 found: configure with -DMLAV_WHEEL_PYTHON=/path/to/python3 to build the wheel"
    COMMAND ${CMAKE_COMMAND} -E false)
endif()
