# `cmake --install build --prefix DIR`: the C++ package. The public header
# is include/tessera/tessera.h (tools/api/tessera.h) with the graph/ headers
# it includes; the libraries; the `tessera` command; and
# lib/cmake/Tessera/TesseraConfig.cmake (+ version file) exporting
# Tessera::tessera and Tessera::tessera_cli. Every component is the default
# one; the Python wheel (pyproject.toml) installs only the "python" one.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TESSERA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
get_property(TESSERA_WITH_CUDA GLOBAL PROPERTY TESSERA_WITH_CUDA)
if(NOT TESSERA_WITH_CUDA)
  set(TESSERA_WITH_CUDA OFF)
endif()

set_target_properties(tessera_api PROPERTIES EXPORT_NAME tessera)
set_target_properties(tessera PROPERTIES EXPORT_NAME tessera_cli)
install(TARGETS tessera_api tessera_graph tessera_onnx tessera_verifier tessera_cost tessera_mutator tessera_report tessera_runtime
                tessera_calibrate
                tessera
        EXPORT TesseraTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES tools/api/tessera.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera)
install(DIRECTORY graph/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera/graph
        FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
install(EXPORT TesseraTargets NAMESPACE Tessera:: DESTINATION ${TESSERA_CMAKE_DIR})

configure_package_config_file(cmake/TesseraConfig.cmake.in ${CMAKE_BINARY_DIR}/cmake/TesseraConfig.cmake
                              INSTALL_DESTINATION ${TESSERA_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/TesseraConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/TesseraConfig.cmake ${CMAKE_BINARY_DIR}/cmake/TesseraConfigVersion.cmake
        DESTINATION ${TESSERA_CMAKE_DIR})
