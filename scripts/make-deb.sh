#!/usr/bin/env bash
# `make deb`'s second half: turns what `make install DESTDIR=STAGE PREFIX=/usr` put in
# STAGE into OUTDIR/porter_VERSION_ARCH.deb (dpkg-deb, no debhelper):
#   - the shared Swift runtime that porter-plugin-worker and the Swift plugins need
#     (whatever ldd resolves in the toolchain's runtime folder) is copied to
#     /usr/lib/porter/swift, and the RUNPATH of every ELF file that names one of those
#     libraries points there, so the package runs on a machine without
#     a Swift toolchain and a worker holds one Swift runtime, shared with the Swift plugin
#     it loads; porter and porterd have the runtime linked statically (make install) and
#     name none of it;
#   - the DocC articles (Markdown) join README.md in /usr/share/doc/porter, LICENSE is
#     its copyright file, the man page is gzipped;
#   - Depends are the packages that own the system libraries ldd resolves (libcurl4,
#     libssh2-1, libffi8, libpsl5, libsqlite3-0, ...); libsecret-1-0 is Recommended
#     (opened on first use of the keyring; without it credentials go to a 0600 file).
# Usage: make-deb.sh STAGE OUTDIR (CONFIG, SWIFT and DEB_COMPRESSION from the environment).
set -euo pipefail
cd "$(dirname "$0")/.."
stage=$(realpath "$1")
out=$(realpath "$2")
config=${CONFIG:-release}
swift=${SWIFT:-swift}
usr=$stage/usr
[ -x "$usr/bin/porter" ] || { echo "make-deb: no $usr/bin/porter (run make install DESTDIR=$1 PREFIX=/usr first)" >&2; exit 1; }
for tool in patchelf dpkg-deb dpkg ldd readelf; do
    command -v "$tool" >/dev/null || { echo "make-deb: $tool is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
umask 022

runtime=$("$swift" -print-target-info | python3 -c 'import json, sys; print(json.load(sys.stdin)["paths"]["runtimeLibraryPaths"][0])')
runtime=$(realpath "$runtime")
version=$("$usr/bin/porter" --version)
arch=$(dpkg --print-architecture)

# Documentation.
doc=$usr/share/doc/porter
install -d -m 755 "$doc"
install -m 644 Sources/Porter/Porter.docc/*.md "$doc/"
install -m 644 LICENSE "$doc/copyright"
gzip -9nf "$usr/share/man/man1/porter.1"

# The ELF files of the package: programs and plugins.
elves=("$usr"/bin/* "$usr"/lib/porter/plugins/*.so)

# The shared Swift runtime they load, from the toolchain (ldd prints the whole closure).
private=$usr/lib/porter/swift
install -d -m 755 "$private"
for f in "${elves[@]}"; do ldd "$f"; done | awk -v dir="$runtime/" 'index($3, dir) == 1 { print $3 }' | sort -u |
    while read -r lib; do install -m 644 "$lib" "$private/"; done
[ -e "$private/libswiftCore.so" ] || { echo "make-deb: found no Swift runtime in $runtime" >&2; exit 1; }

if [ "$config" = release ]; then strip --strip-debug "${elves[@]}"; fi
# A RUNPATH only where a library of the private runtime is named (DT_NEEDED): porter and
# porterd, with the runtime linked in, and a C plugin need none.
names_private() {
    local name
    for name in $(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        if [ -e "$private/$name" ]; then return 0; fi
    done
    return 1
}
set_rpath() { # set_rpath FILE RPATH
    if names_private "$1"; then patchelf --set-rpath "$2" "$1"; else patchelf --remove-rpath "$1"; fi
}
for f in "$usr"/bin/*; do set_rpath "$f" '$ORIGIN/../lib/porter/swift'; done
# A plugin's RUNPATH also names the folder absolutely: porter opens a plugin through
# /proc/self/fd/N (the file it checked), where $ORIGIN means /proc/self/fd. In a worker the
# runtime is already loaded (the worker's own); in process in the static porter the plugin
# finds it itself. ($ORIGIN/../swift serves ldd on the staged files below.)
for f in "$usr"/lib/porter/plugins/*.so; do set_rpath "$f" '$ORIGIN/../swift:'"${private#"$stage"}"; done
for f in "$private"/*.so; do set_rpath "$f" '$ORIGIN'; done

# Every library now resolves inside the package or on the system, never in the toolchain.
resolved=$(for f in "${elves[@]}" "$private"/*.so; do ldd "$f"; done)
if grep -F -e "$runtime/" -e "not found" <<<"$resolved"; then
    echo "make-deb: a library still resolves to the toolchain, or not at all (above)" >&2
    exit 1
fi

# Depends: the package of every system library an ELF file of the package names itself
# (DT_NEEDED, as dpkg-shlibdeps counts; what those load in turn is theirs to depend on).
needed_paths() {
    local f=$1 map
    map=$(ldd "$f")
    readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | while read -r name; do
        awk -v n="$name" '$1 == n && $2 == "=>" { print $3 }' <<<"$map"
    done
}
depends=$(for f in "${elves[@]}" "$private"/*.so; do needed_paths "$f"; done | grep -v "^$stage/" | sort -u | while read -r lib; do
    owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null || dpkg -S "$(realpath "$lib")" 2>/dev/null || true)
    [ -n "$owner" ] || { echo "make-deb: no package owns $lib" >&2; exit 1; }
    echo "${owner%%:*}" | cut -d, -f1
done | sed 's/:.*//' | sort -u | paste -sd, | sed 's/,/, /g')
[ -n "$depends" ] || { echo "make-deb: no dependencies found" >&2; exit 1; }
# porter and porterd are linked with packed relative relocations (scripts/link-static.py),
# which only glibc 2.36 and later can load (they name the version GLIBC_ABI_DT_RELR).
for f in "${elves[@]}"; do
    if grep -q 'GLIBC_ABI_DT_RELR' <<<"$(readelf -V "$f" 2>/dev/null)"; then
        depends=$(sed -E 's/(^|, )libc6(,|$)/\1libc6 (>= 2.36)\2/' <<<"$depends")
        break
    fi
done

install -d -m 755 "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<EOF
Package: porter
Version: $version
Architecture: $arch
Maintainer: Porter developers <porter@localhost>
Section: web
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $depends
Recommends: libsecret-1-0
Suggests: gnome-keyring
Description: URL loading for Swift on Linux, with a curl-like command line
 Porter is URLSession rebuilt on libcurl: http, https, ftp, data, file and what
 plugins add (sftp and scp ship here), each plugin in a sandboxed worker process,
 and porterd, a per-user daemon for background transfers (systemd user units).
 This package holds the porter command, porterd, the plugin worker, the plugins,
 the C plugin header with its pkg-config file, the man page, completions for
 bash, zsh and fish, and the documentation. porter and porterd carry the Swift
 runtime; the shared one the worker and the Swift plugins use is private, in
 /usr/lib/porter/swift.
EOF
(cd "$stage" && find usr -type f -printf '%P\0' | LC_ALL=C sort -z | (cd usr && xargs -0 md5sum) | sed 's|  |  usr/|') \
    >"$stage/DEBIAN/md5sums"
chmod 644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"

mkdir -p "$out"
deb=$out/porter_${version}_${arch}.deb
dpkg-deb --root-owner-group -Z"${DEB_COMPRESSION:-xz}" --build "$stage" "$deb" >/dev/null
echo "$deb"
