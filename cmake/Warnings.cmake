# Warning flags as an INTERFACE target: every dlbench target links dlbench::warnings,
# third-party code never sees them. -Wnull-dereference is left out: with GCC 12 at -O2 it
# reports false positives inside libstdc++ and nlohmann/json that inlining exposes.
add_library(dlbench_warnings INTERFACE)
add_library(dlbench::warnings ALIAS dlbench_warnings)

target_compile_options(dlbench_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${DLBENCH_WERROR}>>:-Werror>
  # A kernel that spills registers or keeps an array in local memory (off-chip, cached) has lost
  # speed without a word; ptxas says so for every architecture built, and with -Werror that fails
  # the build here, where no GPU is needed to see it.
  $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=--warn-on-spills,--warn-on-local-memory-usage>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${DLBENCH_WERROR}>>:-Werror=all-warnings>)
