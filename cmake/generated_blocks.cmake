cmake_minimum_required(VERSION 3.25)  # script mode: use current policies
# Blocks of ROOT/README.md and ROOT/docs/*.md that come from code:
#   <!-- snippet: file.cpp#region -->     the next ```cpp block is the region between
#                                          "// [start:region]" and "// [end:region]" of
#                                          ROOT/examples/file.cpp;
#   <!-- vramfit: ARGS -->                the next ```text block is what `CLI ARGS` prints;
#   <!-- vramfit-svg: FILE ARGS -->       ROOT/docs/FILE is what `CLI ARGS` prints;
#   <!-- vramfit-python: NAME -->         the next ```python block is kept, and the ```text block
#                                          after it is what running it prints (with -DPYTHON and
#                                          -DPYTHONPATH, the built module; skipped without them).
# MODE=check fails on a difference; MODE=write rewrites the blocks and files.

include(${CMAKE_CURRENT_LIST_DIR}/blocks.cmake)

function(read_region file region out)
  file(READ ${ROOT}/examples/${file} source)
  set(start_marker "// [start:${region}]\n")
  string(FIND "${source}" "${start_marker}" start)
  string(FIND "${source}" "// [end:${region}]" end)
  if(start EQUAL -1 OR end EQUAL -1)
    message(FATAL_ERROR "examples/${file} has no region '${region}'")
  endif()
  string(LENGTH "${start_marker}" marker_length)
  math(EXPR start "${start} + ${marker_length}")
  math(EXPR length "${end} - ${start}")
  string(SUBSTRING "${source}" ${start} ${length} text)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(run_cli args out)
  if(NOT CLI)
    message(FATAL_ERROR "a vramfit block needs -DCLI=<path to the vramfit tool>")
  endif()
  separate_arguments(argv UNIX_COMMAND "${args}")
  execute_process(COMMAND ${CLI} ${argv} WORKING_DIRECTORY ${ROOT}
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
  if(NOT result EQUAL 0 AND NOT result EQUAL 1)
    message(FATAL_ERROR "vramfit ${args} failed (${result}): ${errors}")
  endif()
  set(${out} "${output}" PARENT_SCOPE)
endfunction()

# The ```-fenced block that `text` starts with, `fence` its opening line: `block` is its body,
# `rest` the text from its closing fence on.
function(fenced_block page marker text fence block rest)
  string(FIND "${text}" "${fence}" open)
  if(NOT open EQUAL 0)
    message(FATAL_ERROR "${page}: a marker must be followed by a ${fence} block: ${marker}")
  endif()
  string(LENGTH "${fence}" fence_length)
  string(SUBSTRING "${text}" ${fence_length} -1 body)
  string(FIND "${body}" "```" close)
  string(SUBSTRING "${body}" 0 ${close} inside)
  string(SUBSTRING "${body}" ${close} -1 after)
  set(${block} "${inside}" PARENT_SCOPE)
  set(${rest} "${after}" PARENT_SCOPE)
endfunction()

function(run_python page code out)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${PYTHONPATH}
                          PYTHONDONTWRITEBYTECODE=1 ${PYTHON} -c "${code}"
                  WORKING_DIRECTORY ${ROOT}
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${page}: a python block failed (${result}): ${errors}")
  endif()
  set(${out} "${output}" PARENT_SCOPE)
endfunction()

set(stale "")
file(GLOB pages ${ROOT}/docs/*.md)
list(APPEND pages ${ROOT}/README.md)
foreach(page IN LISTS pages)
  file(READ ${page} text)
  set(result "")
  while(TRUE)
    next_marker("<!-- (snippet|vramfit|vramfit-svg|vramfit-python): [^\n]* -->\n" "${text}"
                marker before text)
    if(NOT marker)
      break()
    endif()
    string(APPEND result "${before}")
    if(marker MATCHES "^<!-- vramfit-python: ")
      if(NOT PYTHON)
        continue()  # no module built: the blocks stay as they are
      endif()
      fenced_block(${page} "${marker}" "${text}" "```python\n" code text)
      string(FIND "${text}" "```\n\n" blank)  # the python block's end, a blank line
      if(NOT blank EQUAL 0)
        message(FATAL_ERROR "${page}: ${marker}: a blank line and a ```text block must follow")
      endif()
      string(SUBSTRING "${text}" 5 -1 text)
      fenced_block(${page} "${marker}" "${text}" "```text\n" shown text)
      run_python(${page} "${code}" output)
      if(NOT shown STREQUAL output)
        list(APPEND stale "${page}: ${marker}")
      endif()
      string(APPEND result "```python\n${code}```\n\n```text\n${output}")
      continue()
    endif()
    if(marker MATCHES "^<!-- vramfit-svg: ([^ ]+) (.*) -->\n$")
      set(svg_file ${ROOT}/docs/${CMAKE_MATCH_1})
      run_cli("${CMAKE_MATCH_2}" svg)
      set(old "")
      if(EXISTS ${svg_file})
        file(READ ${svg_file} old)
      endif()
      if(NOT old STREQUAL svg)
        list(APPEND stale "${svg_file}")
        if(MODE STREQUAL "write")
          file(WRITE ${svg_file} "${svg}")
        endif()
      endif()
      continue()
    endif()
    if(marker MATCHES "^<!-- snippet: ([^#]+)#([^ ]+) -->")
      read_region(${CMAKE_MATCH_1} ${CMAKE_MATCH_2} content)
      set(fence "```cpp\n")
    elseif(marker MATCHES "^<!-- vramfit: (.*) -->")
      run_cli("${CMAKE_MATCH_1}" content)
      set(fence "```text\n")
    endif()
    fenced_block(${page} "${marker}" "${text}" "${fence}" block text)
    if(NOT block STREQUAL content)
      list(APPEND stale "${page}: ${marker}")
    endif()
    string(APPEND result "${fence}${content}")
  endwhile()
  string(APPEND result "${text}")
  if(MODE STREQUAL "write")
    file(WRITE ${page} "${result}")
  endif()
endforeach()
if(stale AND NOT MODE STREQUAL "write")
  message(FATAL_ERROR "Generated blocks differ from what produces them: ${stale}. Run "
                      "`cmake --build <build> --target vramfit_docs` and commit the result.")
endif()
