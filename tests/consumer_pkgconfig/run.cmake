# Usage (PKG_CONFIG_PATH set by the test):
#   cmake -DPKG_CONFIG=<pkg-config> -DCC=<cc> -DSRC=<consumer_main.c> -DOUT=<exe> -P run.cmake
# Equivalent of: cc consumer_main.c $(pkg-config --cflags --libs graphsched) && ./a.out
function(pc out)
  execute_process(COMMAND "${PKG_CONFIG}" ${ARGN} graphsched
                  OUTPUT_VARIABLE _o OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "pkg-config ${ARGN} graphsched failed (PKG_CONFIG_PATH=$ENV{PKG_CONFIG_PATH})")
  endif()
  set(${out} "${_o}" PARENT_SCOPE)
endfunction()

pc(flags --cflags --libs)
pc(libdir --variable=libdir)
separate_arguments(flags UNIX_COMMAND "${flags}")
# rpath so the binary runs without LD_LIBRARY_PATH.
execute_process(COMMAND "${CC}" "${SRC}" -o "${OUT}" ${flags} "-Wl,-rpath,${libdir}"
                COMMAND_ECHO STDOUT RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compiling the pkg-config consumer failed")
endif()
execute_process(COMMAND "${OUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config consumer exited with ${rc}")
endif()
