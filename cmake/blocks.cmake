# The search both page scripts make for a generated block's opening marker (cmake/docs.cmake,
# cmake/generated_blocks.cmake); how a block ends is theirs (an end marker, a fenced block).

# The first match of `pattern` (a whole marker line, its "\n" included) in `text`: `marker` is
# it, or empty when there is none (then `before` and `after` are left as they are); `before` is
# the text through it and `after` the text that follows it.
function(next_marker pattern text marker before after)
  set(${marker} "" PARENT_SCOPE)
  string(REGEX MATCH "${pattern}" found "${text}")
  if(NOT found)
    return()
  endif()
  string(FIND "${text}" "${found}" at)
  string(LENGTH "${found}" length)
  math(EXPR end "${at} + ${length}")
  string(SUBSTRING "${text}" 0 ${end} head)
  string(SUBSTRING "${text}" ${end} -1 tail)
  set(${marker} "${found}" PARENT_SCOPE)
  set(${before} "${head}" PARENT_SCOPE)
  set(${after} "${tail}" PARENT_SCOPE)
endfunction()
