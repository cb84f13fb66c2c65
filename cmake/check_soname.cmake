# Usage: cmake -DOBJDUMP=<objdump> -DLIB=<libgraphsched.so.0> -DEXE=<program linked to it> -P check_soname.cmake
# Fails unless the library carries SONAME libgraphsched.so.0 and the program records that bare
# name as NEEDED (without a SONAME, linkers record the library's build path instead).
foreach(_v OBJDUMP LIB EXE)
  if(NOT ${_v})
    message(FATAL_ERROR "check_soname: -D${_v}=... is required")
  endif()
endforeach()
execute_process(COMMAND "${OBJDUMP}" -p "${LIB}" OUTPUT_VARIABLE _lib RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0 OR NOT _lib MATCHES "SONAME +libgraphsched\\.so\\.0\n")
  message(FATAL_ERROR "check_soname: ${LIB} has no SONAME libgraphsched.so.0 (is build.rs passing -soname?)")
endif()
execute_process(COMMAND "${OBJDUMP}" -p "${EXE}" OUTPUT_VARIABLE _exe RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0 OR NOT _exe MATCHES "NEEDED +libgraphsched\\.so\\.0\n")
  string(REGEX MATCHALL "NEEDED +[^\n]*" _needed "${_exe}")
  message(FATAL_ERROR "check_soname: ${EXE} does not need plain libgraphsched.so.0: ${_needed}")
endif()
message(STATUS "check_soname: SONAME and NEEDED are libgraphsched.so.0")
