# Warnings for our own targets only; third-party headers come in through -isystem.
option(ARBITER_WERROR "Treat warnings in Arbiter's own code as errors" ON)

function(arbiter_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wnon-virtual-dtor)
  # GCC's spelling; clang (the sanitizer and fuzz builds) names the same check differently.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wshadow=local)
  else()
    target_compile_options(${target} PRIVATE -Wshadow-uncaptured-local)
  endif()
  if(ARBITER_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
