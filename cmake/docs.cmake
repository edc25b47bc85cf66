cmake_minimum_required(VERSION 3.25)  # script mode: use current policies
# Runs the example EXE. MODE=write stores its output as DOC; MODE=check fails when DOC differs.
execute_process(COMMAND ${EXE} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${EXE} failed (${result}):\n${errors}")
endif()
if(MODE STREQUAL "write")
  file(WRITE ${DOC} "${output}")
  return()
endif()
if(NOT EXISTS ${DOC})
  message(FATAL_ERROR "${DOC} is missing: run `cmake --build <build> --target vramfit_docs`")
endif()
file(READ ${DOC} committed)
if(NOT committed STREQUAL output)
  message(FATAL_ERROR "${DOC} differs from what ${EXE} prints: run "
                      "`cmake --build <build> --target vramfit_docs` and commit the result.\n"
                      "It prints:\n${output}")
endif()
