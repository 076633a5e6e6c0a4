#!/bin/sh
# The revision a build of this checkout says it was built from, as semver build metadata: g and the
# commit's first 12 hex digits, with ".dirty" where a tracked file differs from that commit (files
# git does not track, build output among them, do not count). Exit 1, printing nothing, where DIR is
# not a git checkout or git is missing: the caller says "unknown".
#
#   scripts/source-revision.sh [DIR]      (default: the checkout this script is in)
#
# CMake runs it at every build (cmake/BuildVersion.cmake); an image build, whose context has no
# .git, is given its output: buildah build --build-arg DLBENCH_SOURCE_REVISION="$(scripts/source-revision.sh)" ...
dir=${1:-$(dirname "$0")/..}
command -v git > /dev/null 2>&1 || exit 1
commit=$(git -C "$dir" rev-parse --short=12 --verify -q HEAD 2> /dev/null) || exit 1
# git diff, not diff-index: it compares a touched but unchanged file by content, not by its stat
if git -C "$dir" diff --quiet HEAD -- 2> /dev/null; then
  echo "g$commit"
else
  echo "g$commit.dirty"
fi
