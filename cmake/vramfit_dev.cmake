# Settings for vramfit's own tests and examples (never for its users).

# The warning set every test and example compiles under, with both g++ and clang++.
add_library(vramfit_warnings INTERFACE)
target_compile_options(vramfit_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Werror)

# vramfit_compile_fail_test(<file.cpp>): the file must NOT compile, and the compiler's output must
# match every "// expect: <regex>" line in it. A file whose expect line is "compiles" is a control
# case that must compile, so that a broken harness cannot pass.
function(vramfit_compile_fail_test file)
  get_filename_component(name ${file} NAME_WE)
  set(target vramfit_compile_fail_${name})
  add_library(${target} OBJECT EXCLUDE_FROM_ALL ${file})
  target_link_libraries(${target} PRIVATE vramfit::vramfit vramfit_warnings)
  add_test(NAME compile_fail.${name}
    COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DTARGET=${target}
            -DSOURCE=${CMAKE_CURRENT_SOURCE_DIR}/${file} -P ${PROJECT_SOURCE_DIR}/cmake/check_compile_fail.cmake)
  # The cases share one build tree: build them one at a time.
  set_tests_properties(compile_fail.${name} PROPERTIES RESOURCE_LOCK vramfit_build_tree)
endfunction()
