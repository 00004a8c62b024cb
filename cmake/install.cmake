# braid as a library: `cmake --install` puts the engine's layers (core nn optim data comm
# parallel train launch) under <prefix>/lib, their headers under the one public include path
# <prefix>/include/braid (<layer>/*.h, so "nn/module.h" resolves there as in the tree), the
# braid program under <prefix>/bin, a CMake package (find_package(braid): braid::braid and
# one target per layer, braid::core ... braid::launch) and a pkg-config file (braid.pc).
# serve/, report/ and cli/ are the server and the program, not the library: not installed
# as libraries. Included from the top-level CMakeLists.txt after every target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(braid_library_layers core nn optim data comm parallel train launch)

# The umbrella: everything a program that trains needs (train/ brings parallel/ and every
# layer below it; launch/ joins the job `braid launch` started).
add_library(braid_all INTERFACE)
target_link_libraries(braid_all INTERFACE braid_train braid_launch)
set_target_properties(braid_all PROPERTIES EXPORT_NAME braid)
target_include_directories(braid_all INTERFACE $<INSTALL_INTERFACE:include/braid>)
add_library(braid::braid ALIAS braid_all)

set(braid_export_targets braid_all braid_dnnl)
foreach(layer ${braid_library_layers})
  set_target_properties(braid_${layer} PROPERTIES EXPORT_NAME ${layer})
  list(APPEND braid_export_targets braid_${layer})
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/src/braid/${layer}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/braid/${layer}
          FILES_MATCHING PATTERN "*.h" PATTERN "mpi" EXCLUDE)
endforeach()
if(BRAID_MPI)
  set_target_properties(braid_comm_mpi PROPERTIES EXPORT_NAME comm_mpi)
  list(APPEND braid_export_targets braid_comm_mpi)
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/src/braid/comm/mpi/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/braid/comm/mpi FILES_MATCHING PATTERN "*.h")
endif()

install(TARGETS ${braid_export_targets} EXPORT braidTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Installed, the program keeps the run path to the libraries outside the system's (OpenBLAS).
set_target_properties(braid PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS braid RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(braid_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/braid)
install(EXPORT braidTargets NAMESPACE braid:: DESTINATION ${braid_cmake_dir})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/braidConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/braidConfig.cmake
                              INSTALL_DESTINATION ${braid_cmake_dir})
# 0.x: a minor version may change the surface, so only the same minor is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/braidConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/braidConfig.cmake ${CMAKE_BINARY_DIR}/braidConfigVersion.cmake
        DESTINATION ${braid_cmake_dir})

# pkg-config: the same include path, C++20, the layers in link order (each before the layers
# it uses) and then the system libraries they use.
set(braid_pc_libs "")
foreach(layer train launch parallel nn optim data comm core)
  string(APPEND braid_pc_libs " -lbraid_${layer}")
endforeach()
if(BRAID_MPI)
  string(REPLACE "-lbraid_comm " "-lbraid_comm_mpi -lbraid_comm " braid_pc_libs "${braid_pc_libs}")
endif()
list(JOIN OPENBLAS_LDFLAGS " " braid_pc_openblas)
# -L for oneDNN's and xxHash's directories only where the linker does not look anyway.
foreach(lib dnnl xxhash)
  string(TOUPPER ${lib} upper)
  get_filename_component(dir ${${upper}_LIBRARY} DIRECTORY)
  if(dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set(braid_pc_${lib} "-l${lib}")
  else()
    set(braid_pc_${lib} "-L${dir} -l${lib}")
  endif()
endforeach()
file(RELATIVE_PATH braid_pc_up /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" braid_pc_up "${braid_pc_up}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/braid.pc.in ${CMAKE_BINARY_DIR}/braid.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/braid.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
