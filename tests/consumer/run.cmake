# CTest test install.find_package (cmake -P): installs the built gdn tree into a fresh prefix, then
# configures, builds and runs tests/consumer against it with the parent's compilers.
#   -DBUILD_DIR (built gdn tree)  -DWORK_DIR (scratch, wiped)  -DCONSUMER_DIR (this directory)
#   -DGENERATOR -DMAKE_PROGRAM -DC_COMPILER -DCXX_COMPILER -DLIBDIR -DWITH_CUDA -DCUDA_ROOT
# Negative control: the same consumer configured against an empty prefix must not find gdn.
cmake_minimum_required(VERSION 3.25)

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(step_rc "${rc}" PARENT_SCOPE)
  set(step_out "${out}" PARENT_SCOPE)
endfunction()

function(require_ok name)
  if(NOT step_rc EQUAL 0)
    message(FATAL_ERROR "install.find_package: ${name} failed (${step_rc}):\n${step_out}")
  endif()
  message(STATUS "${name}: ok")
endfunction()

foreach(f libgdn.a gdn)
  if(NOT EXISTS "${BUILD_DIR}/${f}")
    message(FATAL_ERROR "install.find_package: ${BUILD_DIR}/${f} is missing: build the tree first "
                        "(cmake --build ${BUILD_DIR}, or at least --target gdn gdn_cli)")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
file(MAKE_DIRECTORY "${WORK_DIR}/empty")

run_step(install ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
require_ok("cmake --install")

# What the package holds: the library, headers, CLI and config; no oracle/harness libs, no tests.
foreach(f ${LIBDIR}/libgdn.a include/gdn/gdn.hpp include/gdn/gdn.h bin/gdn
          ${LIBDIR}/cmake/gdn/gdnConfig.cmake ${LIBDIR}/cmake/gdn/gdnConfigVersion.cmake
          ${LIBDIR}/cmake/gdn/gdnTargets.cmake)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "install.find_package: ${f} is not installed")
  endif()
endforeach()
file(GLOB_RECURSE extra RELATIVE "${prefix}" "${prefix}/*gdn_ref*" "${prefix}/*gdn_check*"
     "${prefix}/*gdn_tests*" "${prefix}/*capi_c*")
if(extra)
  message(FATAL_ERROR "install.find_package: internal files installed: ${extra}")
endif()

# The installed CLI runs (its cuBLAS is found through the install RPATH in CUDA builds).
run_step("installed gdn info" "${prefix}/bin/gdn" info)
require_ok("installed gdn info")

set(common -G "${GENERATOR}" -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM} -DCMAKE_BUILD_TYPE=Release
           -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
           -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(WITH_CUDA)
  # libgdn holds the CUDA arms: gdnConfig.cmake finds CUDAToolkit; point it at the parent's toolkit.
  list(APPEND common -DCUDAToolkit_ROOT=${CUDA_ROOT})
endif()

# Negative control: against an empty prefix find_package(gdn REQUIRED) must fail.
run_step(negative ${CMAKE_COMMAND} -S "${CONSUMER_DIR}" -B "${WORK_DIR}/build-empty" ${common}
         -DCMAKE_PREFIX_PATH=${WORK_DIR}/empty -DGDN_EXPECT_PREFIX=${WORK_DIR}/empty)
if(step_rc EQUAL 0 OR NOT step_out MATCHES "gdnConfig.cmake|not under the expected prefix")
  message(FATAL_ERROR "install.find_package: negative control: the consumer configured without "
                      "the gdn prefix (rc ${step_rc}):\n${step_out}")
endif()
message(STATUS "negative control (empty prefix): configure failed as it must")

run_step(configure ${CMAKE_COMMAND} -S "${CONSUMER_DIR}" -B "${WORK_DIR}/build" ${common}
         -DCMAKE_PREFIX_PATH=${prefix} -DGDN_EXPECT_PREFIX=${prefix})
require_ok("consumer configure")
string(REGEX MATCH "gdn_consumer: [^\n]*" found "${step_out}")
message(STATUS "${found}")
run_step(build ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
require_ok("consumer build")

foreach(exe consumer_cpp consumer_c)
  run_step(${exe} "${WORK_DIR}/build/${exe}")
  if(NOT step_rc EQUAL 0 OR NOT step_out MATCHES "^ok: ")
    message(FATAL_ERROR "install.find_package: ${exe} failed (${step_rc}):\n${step_out}")
  endif()
  string(STRIP "${step_out}" step_out)
  message(STATUS "${exe}: ${step_out}")
endforeach()
file(REMOVE_RECURSE "${WORK_DIR}")
