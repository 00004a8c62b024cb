# The layering test (CMakeLists.txt, test `layering`): builds every probe, each a file of
# one layer that includes a header of a layer it may not use, and fails unless every one
# fails to find its header. Run by ctest as
#   cmake -DBUILD_DIR=<build> -DPROBES="<target>|<object>|<header>;..." -P check_layering.cmake
cmake_minimum_required(VERSION 3.20)
set(targets "")
foreach(probe IN LISTS PROBES)
  string(REPLACE "|" ";" fields "${probe}")
  list(GET fields 0 target)
  list(GET fields 1 object)
  file(REMOVE "${object}")  # a probe that compiled once must compile again to pass
  list(APPEND targets ${target})
endforeach()
# Every probe in one build that keeps going past failures (-k 0: ninja; make's -k).
execute_process(COMMAND ${CMAKE_COMMAND} --build "${BUILD_DIR}" --target ${targets} -- -k 0
                OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
set(broken "")
foreach(probe IN LISTS PROBES)
  string(REPLACE "|" ";" fields "${probe}")
  list(GET fields 0 target)
  list(GET fields 1 object)
  list(GET fields 2 header)
  string(REGEX REPLACE "^layering_([a-z]+)_([a-z]+)$" "\\1" layer "${target}")
  if(EXISTS "${object}")
    string(APPEND broken "\n  src/braid/${layer}/ can include ${header}")
  elseif(NOT out MATCHES "${header}: No such file")
    string(APPEND broken "\n  ${target} failed, but not for want of ${header}")
  endif()
endforeach()
if(broken)
  message(FATAL_ERROR "layering (docs/ARCHITECTURE.md, \"Layers\") broken:${broken}\n"
                      "build output:\n${out}")
endif()
list(LENGTH targets n)
message(STATUS "layering: ${n} forbidden includes, each refused")
