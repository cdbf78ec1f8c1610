#!/usr/bin/env bash
# Unpack clang from Debian packages (scripts/download_wheels.sh puts them in WHEELHOUSE/clang) where apt cannot
# install it, and write a clang++ wrapper that runs it with the packages' own libraries:
#   scripts/unpack_clang.sh DEBS [PREFIX]        (default prefix /opt/kj-clang)
# then: export KERNELJUDGE_FAST_CXX=PREFIX/clang++
# The fast CUDA build compiles its host half with clang++ against a precompiled header in ~3 s, against ~8-15 s
# with g++ (sandbox_side/build/toolchain.py); the Dockerfile installs clang-22, but a GPU image without it (the
# device machine here) built every candidate with g++. The wrapper lies at PREFIX's top, so the build sandbox,
# which mounts the compiler's folder, sees the whole unpacked tree. Prints the wrapper's path.
set -euo pipefail
debs=$1
prefix=${2:-/opt/kj-clang}
shopt -s nullglob
packages=("$debs"/*.deb)
[ ${#packages[@]} -gt 0 ] || { echo "unpack_clang: no .deb in $debs" >&2; exit 2; }
mkdir -p "$prefix"
for deb in "${packages[@]}"; do
    dpkg -x "$deb" "$prefix"
done
compiler=$(ls -d "$prefix"/usr/lib/llvm-*/bin/clang++ 2>/dev/null | sort -V | tail -n1)
[ -n "$compiler" ] || { echo "unpack_clang: no usr/lib/llvm-*/bin/clang++ in the packages of $debs" >&2; exit 2; }
libs="$prefix/usr/lib/x86_64-linux-gnu:$(dirname "$(dirname "$compiler")")/lib"
cat >"$prefix/clang++" <<WRAPPER
#!/bin/sh
# Written by scripts/unpack_clang.sh: the unpacked clang++ with its packages' libraries first.
LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$compiler" "\$@"
WRAPPER
chmod +x "$prefix/clang++"
"$prefix/clang++" --version >/dev/null || { echo "unpack_clang: $prefix/clang++ does not run" >&2; exit 3; }
echo "$prefix/clang++"
