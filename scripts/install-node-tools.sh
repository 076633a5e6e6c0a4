#!/usr/bin/env bash
# Installs the Node.js packages that the CRD agreement test (tests/crd) evaluates the CRD with:
# a real CEL evaluator for its x-kubernetes-validations rules and a real JSON-schema validator
# for its structural schema. Both have no dependencies of their own. They are fetched by name
# with `npm pack` (the machine's npm configuration applies), pinned by version and SHA-256, and
# unpacked into $DLBENCH_NODE_TOOLS (default /usr/local/lib/dlbench-node/node_modules).
# Idempotent: a package already unpacked at the right version is not fetched again.
set -euo pipefail

target=${DLBENCH_NODE_TOOLS:-/usr/local/lib/dlbench-node/node_modules}
pinned=(
  "@marcbachmann/cel-js 8.0.0 906a27e01afbdc175a95197d45ebc0ab00f733517ffd5b934e3f066230cc6d5f"
  "@cfworker/json-schema 4.1.1 f3a8076b450505f0671fa78a6efb5e7726883e2c6dfb13b29261872803610203"
)

command -v npm >/dev/null || { echo "install-node-tools: npm is needed (apt-get install nodejs npm)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for entry in "${pinned[@]}"; do
  read -r name version sha256 <<<"$entry"
  dir="$target/$name"
  if [[ -f $dir/package.json ]] && grep -q "\"version\": *\"$version\"" "$dir/package.json"; then
    echo "install-node-tools: $name@$version present"
    continue
  fi
  echo "install-node-tools: fetching $name@$version"
  tarball=$(cd "$work" && npm pack --silent "$name@$version" | tail -n 1)
  echo "$sha256  $work/$tarball" | sha256sum -c --quiet -
  rm -rf "$dir" && mkdir -p "$dir"
  tar -xzf "$work/$tarball" -C "$dir" --strip-components=1
done
