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

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kiln-config.cmake.in
                              ${PROJECT_BINARY_DIR}/kiln-config.cmake
                              INSTALL_DESTINATION ${KILN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kiln-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kiln-config.cmake ${PROJECT_BINARY_DIR}/kiln-config-version.cmake
              ${PROJECT_SOURCE_DIR}/cmake/StaticAbseil.cmake
        DESTINATION ${KILN_CMAKE_DIR})
