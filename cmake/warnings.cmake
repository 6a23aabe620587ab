# Warnings for our own targets only; third-party headers come in through -isystem.
option(ARBITER_WERROR "Treat warnings in Arbiter's own code as errors" ON)

function(arbiter_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow=local
                                           -Wnon-virtual-dtor)
  if(ARBITER_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
