# Sanitizer and fuzzing builds (issue 15).
#
#   -DTESSERA_SANITIZE=address,undefined   ASan + UBSan over every target
#   -DTESSERA_SANITIZE=thread              ThreadSanitizer over every target
#   -DTESSERA_FUZZ=ON                      the libFuzzer targets of fuzz/ (clang);
#                                          with ASan + UBSan unless TESSERA_SANITIZE says otherwise
#
# The list goes to -fsanitize as given. UBSan findings abort (no recovery),
# so a test that triggers one fails instead of printing and passing. The
# run-time options and the suppressions the tests use are in
# tests/sanitize/ (its *.sh set them).
set(TESSERA_SANITIZE "" CACHE STRING "Sanitizers for every target: address,undefined | thread | empty (none)")
option(TESSERA_FUZZ "Build the libFuzzer targets of fuzz/ (needs clang)" OFF)

if(TESSERA_FUZZ AND NOT TESSERA_SANITIZE)
  set(TESSERA_SANITIZE address,undefined CACHE STRING "" FORCE)
endif()

if(TESSERA_SANITIZE)
  if(TESSERA_SANITIZE MATCHES "thread" AND TESSERA_SANITIZE MATCHES "address")
    message(FATAL_ERROR "TESSERA_SANITIZE: thread and address cannot be combined")
  endif()
  set(tessera_san_flags -fsanitize=${TESSERA_SANITIZE} -fno-omit-frame-pointer)
  if(TESSERA_SANITIZE MATCHES "undefined")
    # Every UBSan finding is an error. vptr checks need RTTI across the
    # Debian libraries' classes, which they have; kept on.
    list(APPEND tessera_san_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${tessera_san_flags})
  add_link_options(${tessera_san_flags})
  message(STATUS "Tessera: sanitizers ${TESSERA_SANITIZE}")
  if(TESSERA_SANITIZE MATCHES "address")
    # The CLI's ranks under mpirun unwind fully, for lsan.supp to see
    # Open MPI's frames (tests/sanitize/mpi_rank_asan_options.cc).
    set(TESSERA_SANITIZER_CLI_SOURCES ${CMAKE_SOURCE_DIR}/tests/sanitize/mpi_rank_asan_options.cc)
  endif()
endif()

if(TESSERA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TESSERA_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # Coverage feedback from every library; fuzz/ links libFuzzer's main.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
