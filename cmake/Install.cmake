# `cmake --install build --prefix P`: headers, libraries, the kiln command and a CMake package,
# so that another project does
#   find_package(kiln CONFIG REQUIRED)                      # kiln::kiln (builder + compiler + runtime)
#   find_package(kiln CONFIG REQUIRED COMPONENTS runtime)   # kiln::runtime, kiln::emulator, kiln::ops
#                                                           # (no LLVM needed)
# A runtime-only build (KILN_RUNTIME_ONLY) installs the runtime component alone.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

install(TARGETS kiln_bundle kiln_emulator kiln_runtime kiln_ops EXPORT kilnRuntimeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/bundle/include/ ${PROJECT_SOURCE_DIR}/emulator/include/
                  ${PROJECT_SOURCE_DIR}/runtime/include/ ${PROJECT_SOURCE_DIR}/ops/gemm/include/
                  ${PROJECT_SOURCE_DIR}/ops/attention/include/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT kilnRuntimeTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR})
install(TARGETS kiln RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(KILN_INSTALLED_COMPILER OFF)
if(NOT KILN_RUNTIME_ONLY)
  set(KILN_INSTALLED_COMPILER ON)
  install(TARGETS kiln_dsl kiln_lowering kiln_all EXPORT kilnTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/dsl/include/ ${PROJECT_SOURCE_DIR}/lowering/include/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR})
endif()

# The package files are for the installed tree alone, so they are written where find_package does
# not look in the build tree (at its root they were found there, and failed on the targets file
# only `cmake --install` writes).
set(KILN_PACKAGE_FILES ${PROJECT_BINARY_DIR}/for-install)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kiln-config.cmake.in
                              ${KILN_PACKAGE_FILES}/kiln-config.cmake
                              INSTALL_DESTINATION ${KILN_CMAKE_DIR})
write_basic_package_version_file(${KILN_PACKAGE_FILES}/kiln-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${KILN_PACKAGE_FILES}/kiln-config.cmake ${KILN_PACKAGE_FILES}/kiln-config-version.cmake
              ${PROJECT_SOURCE_DIR}/cmake/StaticAbseil.cmake
        DESTINATION ${KILN_CMAKE_DIR})
