# The planner as an installed package (the runtime is not installed): static libraries, public
# headers under include/madpipe/ (users write #include "partition/planner.hpp"), a CMake package
# (find_package(madpipe); target madpipe::planner) and a pkg-config file (madpipe-planner), all
# in the install component "planner" (cmake --install build --component planner). See docs/api.md.
set(madpipe_planner_layers madpipe_core madpipe_solver madpipe_schedule madpipe_remat madpipe_arena
    madpipe_plan madpipe_partition)
foreach(target IN LISTS madpipe_planner_layers ITEMS madpipe_planner)
  string(REGEX REPLACE "^madpipe_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
install(TARGETS ${madpipe_planner_layers} madpipe_planner EXPORT madpipeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT planner
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT planner
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT planner)
foreach(layer core solver schedule remat arena plan partition)
  # The MILP backends' headers (src/solver/backends/) are private to the solver library.
  install(DIRECTORY src/${layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/madpipe COMPONENT planner
          FILES_MATCHING PATTERN "*.hpp" PATTERN "backends" EXCLUDE)
endforeach()
install(FILES src/madpipe.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/madpipe COMPONENT planner)

include(CMakePackageConfigHelpers)
set(madpipe_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/madpipe)
set(MADPIPE_CONFIG_HAVE_CBC OFF)
set(MADPIPE_CONFIG_HAVE_GLPK OFF)
if(CBC_FOUND)
  set(MADPIPE_CONFIG_HAVE_CBC ON)
endif()
if(GLPK_LIBRARY AND GLPK_INCLUDE_DIR)
  set(MADPIPE_CONFIG_HAVE_GLPK ON)
endif()
# The solver's CBC and GLPK libraries are private; the exported static targets carry them as
# $<LINK_ONLY:...> by absolute path (CBC_LINK_LIBRARIES, GLPK_LIBRARY), so consumers link them.
install(EXPORT madpipeTargets NAMESPACE madpipe:: DESTINATION ${madpipe_cmake_dir}
        COMPONENT planner)
configure_package_config_file(cmake/madpipeConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/madpipeConfig.cmake
                              INSTALL_DESTINATION ${madpipe_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/madpipeConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/madpipeConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/madpipeConfigVersion.cmake
        DESTINATION ${madpipe_cmake_dir} COMPONENT planner)

# pkg-config: relocatable (paths relative to the .pc file) unless the install dirs are absolute.
# With static libraries the MILP backends' libraries go in Libs, with shared ones in Libs.private.
set(madpipe_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${madpipe_pc_dir}")
  set(MADPIPE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH madpipe_pc_up "/${madpipe_pc_dir}" "/")
  string(REGEX REPLACE "/$" "" madpipe_pc_up "${madpipe_pc_up}")
  set(MADPIPE_PC_PREFIX "\${pcfiledir}/${madpipe_pc_up}")
endif()
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
    set(MADPIPE_PC_${kind} "${CMAKE_INSTALL_${kind}}")
  else()
    set(MADPIPE_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()
set(madpipe_pc_backend_libs "")
if(CBC_FOUND)
  list(APPEND madpipe_pc_backend_libs ${CBC_LDFLAGS} ${CBC_LDFLAGS_OTHER})
endif()
if(MADPIPE_CONFIG_HAVE_GLPK)
  get_filename_component(madpipe_glpk_dir "${GLPK_LIBRARY}" DIRECTORY)
  get_filename_component(madpipe_glpk_file "${GLPK_LIBRARY}" NAME)
  if(madpipe_glpk_file MATCHES "^lib(.+)\\.(so|a|dylib)(\\.[0-9.]+)?$")
    list(APPEND madpipe_pc_backend_libs "-L${madpipe_glpk_dir}" "-l${CMAKE_MATCH_1}")
  else()
    list(APPEND madpipe_pc_backend_libs "${GLPK_LIBRARY}")
  endif()
endif()
list(REMOVE_DUPLICATES madpipe_pc_backend_libs)
list(JOIN madpipe_pc_backend_libs " " madpipe_pc_backend_libs)
if(madpipe_pc_backend_libs)
  set(madpipe_pc_backend_libs " ${madpipe_pc_backend_libs}")
endif()
set(MADPIPE_PC_LIBS "")
set(MADPIPE_PC_LIBS_PRIVATE "")
if(BUILD_SHARED_LIBS)
  set(MADPIPE_PC_LIBS_PRIVATE "${madpipe_pc_backend_libs}")
else()
  set(MADPIPE_PC_LIBS "${madpipe_pc_backend_libs}")
endif()
# nlohmann/json (headers only): required through its own .pc file where it has one.
set(MADPIPE_PC_REQUIRES "")
if(PKG_CONFIG_EXECUTABLE)
  execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --exists nlohmann_json
                  RESULT_VARIABLE madpipe_pc_json_missing OUTPUT_QUIET ERROR_QUIET)
  if(madpipe_pc_json_missing EQUAL 0)
    set(MADPIPE_PC_REQUIRES "nlohmann_json >= 3.9")
  endif()
endif()
configure_file(cmake/madpipe-planner.pc.in ${CMAKE_CURRENT_BINARY_DIR}/madpipe-planner.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/madpipe-planner.pc DESTINATION ${madpipe_pc_dir}
        COMPONENT planner)
