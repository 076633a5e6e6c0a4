# Run at every build (cmake -P, from cmake/Version.cmake): writes OUTPUT, the source of
# dlbench::version(), with the project's version and the revision it is built from as semver build
# metadata ("0.1.0+g1a2b3c4d5e6f", ".dirty" where a tracked file differs from that commit), and
# leaves the file untouched where that is what it already says, so that an unchanged revision
# compiles and links nothing again.
#
# -D VERSION=0.1.0 -D SOURCE_DIR=... -D OUTPUT=... [-D REVISION=...]: REVISION (the cache variable
# DLBENCH_SOURCE_REVISION, set where the sources have no .git, as in an image build) wins;
# otherwise scripts/source-revision.sh asks git, and without git or a checkout it is "unknown".
if(NOT REVISION)
  execute_process(COMMAND sh ${SOURCE_DIR}/scripts/source-revision.sh ${SOURCE_DIR}
                  OUTPUT_VARIABLE REVISION OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE found)
  if(NOT found EQUAL 0 OR NOT REVISION)
    set(REVISION unknown)
  endif()
endif()
set(content "// Written by cmake/BuildVersion.cmake at build time; not a source file.
#include \"dlbench/core/version.hpp\"

namespace dlbench {

std::string_view version() { return \"${VERSION}+${REVISION}\"; }

}  // namespace dlbench
")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} written)
  if(written STREQUAL content)
    return()
  endif()
endif()
file(WRITE ${OUTPUT} "${content}")
