# Sanitizer and fuzzing builds (docs/testing.md). Included before any target is declared, so
# the flags reach every target of the project: our libraries, executables and tests alike.
# Third-party libraries (CAF, libtorch, Boost's compiled parts) stay uninstrumented.
#
#   ARBITER_SANITIZE="address,undefined"   AddressSanitizer + UndefinedBehaviorSanitizer
#   ARBITER_SANITIZE="thread"              ThreadSanitizer
#   ARBITER_FUZZ=ON                        libFuzzer targets in tests/fuzz (clang only); adds
#                                          coverage instrumentation to every target
set(ARBITER_SANITIZE "" CACHE STRING
    "Comma-separated -fsanitize= list for every target (e.g. address,undefined or thread)")
option(ARBITER_FUZZ "Build the libFuzzer targets in tests/fuzz (clang only)" OFF)

if(ARBITER_SANITIZE)
  if(ARBITER_SANITIZE MATCHES "thread" AND ARBITER_SANITIZE MATCHES "address")
    message(FATAL_ERROR "ARBITER_SANITIZE: thread and address cannot be combined")
  endif()
  add_compile_options(-fsanitize=${ARBITER_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${ARBITER_SANITIZE})
  if(ARBITER_SANITIZE MATCHES "undefined")
    # A UBSan finding ends the program (and fails its test) instead of printing and going on.
    add_compile_options(-fno-sanitize-recover=undefined)
    # Third-party functions exempt from UBSan's checks, each with why.
    if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      add_compile_options(
        -fsanitize-ignorelist=${CMAKE_CURRENT_SOURCE_DIR}/tests/sanitizers/ubsan.ignorelist)
    endif()
  endif()
  message(STATUS "Sanitizers: ${ARBITER_SANITIZE}")
endif()

if(ARBITER_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ARBITER_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # Coverage feedback from our libraries; the fuzz targets themselves link libFuzzer's main.
  add_compile_options(-fsanitize=fuzzer-no-link)
  message(STATUS "libFuzzer targets: tests/fuzz")
endif()
