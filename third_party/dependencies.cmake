# Every dependency of kiln is found here, and nowhere else; each failure names the Debian 12
# package that provides it (tools/setup.sh installs them all). Nothing is vendored: Debian ships
# everything kiln needs. See third_party/README.md for what each one is used for and its license.
#
# kiln_find_dependencies(RUNTIME_ONLY <bool> TESTS <bool>) sets, in the caller's scope:
#   KILN_CUDA_INCLUDE   the CUDA toolkit's include directory, if there is one (optional: nothing
#                       links against CUDA; the driver is dlopen'ed, ptxas is run as a process)
#   LIT, FILECHECK      LLVM's test tools (TESTS and not RUNTIME_ONLY)

macro(kiln_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "kiln needs ${what}: install the Debian package '${package}' "
                        "(sudo apt-get install ${package}; tools/setup.sh installs everything)")
  endif()
endmacro()

macro(kiln_find_dependencies)
  cmake_parse_arguments(KILN_DEPS "" "RUNTIME_ONLY;TESTS" "" ${ARGN})

  find_package(absl CONFIG QUIET)
  kiln_require(absl_FOUND "Abseil (status, strings, flags)" libabsl-dev)

  find_package(Threads REQUIRED)

  if(NOT KILN_DEPS_RUNTIME_ONLY)
    find_package(MLIR CONFIG QUIET HINTS /usr/lib/llvm-22/lib/cmake/mlir)
    kiln_require(MLIR_FOUND "MLIR 22 with LLVM's NVPTX backend" "libmlir-22-dev llvm-22-dev")
    if(NOT LLVM_PACKAGE_VERSION VERSION_GREATER_EQUAL 22 OR NOT LLVM_PACKAGE_VERSION VERSION_LESS 23)
      message(FATAL_ERROR "kiln is built against LLVM/MLIR 22; found ${LLVM_PACKAGE_VERSION} at "
                          "${MLIR_DIR}: install 'libmlir-22-dev llvm-22-dev'")
    endif()
    if(NOT "NVPTX" IN_LIST LLVM_TARGETS_TO_BUILD)
      message(FATAL_ERROR "the LLVM at ${LLVM_DIR} has no NVPTX backend (targets: ${LLVM_TARGETS_TO_BUILD})")
    endif()
    message(STATUS "kiln: MLIR ${MLIR_DIR}, LLVM ${LLVM_PACKAGE_VERSION}")
  endif()

  if(KILN_DEPS_TESTS)
    find_package(GTest QUIET)
    kiln_require(GTest_FOUND "GoogleTest for its tests (or -DKILN_BUILD_TESTS=OFF)" libgtest-dev)
    if(NOT KILN_DEPS_RUNTIME_ONLY)
      find_program(LIT lit HINTS /usr/lib/llvm-22/bin)
      kiln_require(LIT "LLVM's lit for its lowering tests" llvm-22-tools)
      find_program(FILECHECK FileCheck HINTS /usr/lib/llvm-22/bin)
      kiln_require(FILECHECK "LLVM's FileCheck for its lowering tests" llvm-22-tools)
    endif()
  endif()

  # Optional: the CUDA toolkit (nvcc's install, e.g. /usr/local/cuda or KILN_CUDA_HOME). With it
  # the tests also assemble every kernel with ptxas, and cuda.h checks the driver API's declarations.
  set(KILN_CUDA_INCLUDE "")
  foreach(root $ENV{KILN_CUDA_HOME} /usr/local/cuda)
    if(EXISTS ${root}/include/cuda.h)
      set(KILN_CUDA_INCLUDE ${root}/include)
      break()
    endif()
  endforeach()
  if(KILN_CUDA_INCLUDE)
    message(STATUS "kiln: CUDA toolkit headers at ${KILN_CUDA_INCLUDE}")
  else()
    message(STATUS "kiln: no CUDA toolkit (optional: ptxas checks and cuda.h checks are skipped)")
  endif()
endmacro()
