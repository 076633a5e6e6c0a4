# dlbench::version: the build's version, "0.1.0+g1a2b3c4d5e6f" (the project's version and the
# commit it is built from, ".dirty" where a tracked file differs from it; "+unknown" without git),
# so that two builds' results, status and metrics tell them apart (`dlbench compare` names the
# difference, `dlbench run --resume` refuses to mix them). Its one source is written at every build
# by cmake/BuildVersion.cmake and rewritten only when the revision changes; only the programs link
# it.
set(DLBENCH_SOURCE_REVISION "" CACHE STRING
    "The revision to build into the version where the sources have no .git (an image build): scripts/source-revision.sh's output")
if(DLBENCH_SOURCE_REVISION AND NOT DLBENCH_SOURCE_REVISION MATCHES "^[0-9A-Za-z.-]+$")
  message(FATAL_ERROR "DLBENCH_SOURCE_REVISION: \"${DLBENCH_SOURCE_REVISION}\" is not semver build metadata; "
                      "allowed: letters, digits, '.' and '-' (scripts/source-revision.sh prints it)")
endif()
set(dlbench_version_source ${CMAKE_BINARY_DIR}/generated/dlbench_version.cpp)
add_custom_target(dlbench_version_source
  COMMAND ${CMAKE_COMMAND} -D VERSION=${PROJECT_VERSION} -D SOURCE_DIR=${PROJECT_SOURCE_DIR}
          -D OUTPUT=${dlbench_version_source} -D REVISION=${DLBENCH_SOURCE_REVISION}
          -P ${PROJECT_SOURCE_DIR}/cmake/BuildVersion.cmake
  BYPRODUCTS ${dlbench_version_source}
  COMMENT "The build's revision"
  VERBATIM)
add_library(dlbench_version STATIC ${dlbench_version_source})
add_library(dlbench::version ALIAS dlbench_version)
add_dependencies(dlbench_version dlbench_version_source)
target_include_directories(dlbench_version PUBLIC ${PROJECT_SOURCE_DIR}/core/include)
