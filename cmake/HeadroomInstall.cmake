# `cmake --install`: the libraries and headers (headroom_library() installs those),
# the `headroom` executable, and the CMake package that find_package(headroom) reads:
# headroomConfig.cmake, its version file and the exported headroom:: targets.
include(CMakePackageConfigHelpers)

set(HEADROOM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/headroom)
install(TARGETS headroom RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT headroomTargets NAMESPACE headroom:: DESTINATION ${HEADROOM_CMAKE_DIR})
configure_package_config_file(cmake/headroomConfig.cmake.in ${PROJECT_BINARY_DIR}/headroomConfig.cmake
  INSTALL_DESTINATION ${HEADROOM_CMAKE_DIR})
# 0.x: a minor version may break the interface.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/headroomConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
# FindBLIS.cmake too: the static libraries carry BLIS as a link dependency.
install(FILES
  ${PROJECT_BINARY_DIR}/headroomConfig.cmake
  ${PROJECT_BINARY_DIR}/headroomConfigVersion.cmake
  cmake/FindBLIS.cmake
  cmake/FindReferenceLAPACK.cmake
  DESTINATION ${HEADROOM_CMAKE_DIR})
