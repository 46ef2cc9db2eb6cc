#!/usr/bin/env bash
# Unpacks into DEST a Rust compiler that builds for linux-x86_64 and linux-aarch64: Debian's
# rustc-web with its standard library for both architectures. `make dist` builds the shipped
# native code with it (through zig, for glibc 2.17), because rustup's standard library for
# aarch64 comes from a server this build cannot reach, and Debian ships one per architecture.
#
#   scripts/debian_rustc.sh DEST     then: RUSTC=DEST/rustc cargo zigbuild --target ...
#   scripts/debian_rustc.sh --check DEST
#
# Nothing is installed but the LLVM library rustc links (from apt). The arm64 package list is
# read into DEST, so the machine's own apt configuration (its architectures) is left alone.
# --check (make dist-smoke) installs and downloads nothing: it names the packages apt would
# fetch, and checks DEST/rustc's standard libraries if an earlier run unpacked it.
set -euo pipefail

check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
dest=$(realpath -m "${1:?usage: debian_rustc.sh [--check] DEST}")
apt_quiet=(-qq -o APT::Sandbox::User=root)

# Both targets' standard libraries, as cargo zigbuild will ask DEST/rustc for them.
check_rustc() {
    for target in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
        ls "$("$dest/rustc" --print target-libdir --target "$target")"/libstd-*.rlib >/dev/null
    done
    echo "debian_rustc.sh: $("$dest/rustc" --version) in $dest, for x86_64 and aarch64"
}

version=$(apt-cache policy rustc-web | sed -n 's/^ *Candidate: //p')
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    apt-get update -qq
    version=$(apt-cache policy rustc-web | sed -n 's/^ *Candidate: //p')
fi
[ -n "$version" ] && [ "$version" != "(none)" ] || { echo "debian_rustc.sh: apt knows no rustc-web" >&2; exit 1; }
series=$(echo "$version" | sed -E 's/^([0-9]+\.[0-9]+).*/\1/')
driver="libstd-rust-web-$series"     # librustc_driver, which links Debian's LLVM
llvm=$(apt-cache depends "$driver=$version" | sed -n 's/^ *Depends: \(libllvm[0-9]*\)$/\1/p' | head -1)
[ -n "$llvm" ] || { echo "debian_rustc.sh: cannot tell which libllvm $driver $version needs" >&2; exit 1; }
if [ "$check" = 1 ]; then
    echo "debian_rustc.sh: apt has rustc-web $version, $driver and $llvm"
    if [ -x "$dest/rustc" ]; then check_rustc; fi
    exit 0
fi
apt-get install -y "${apt_quiet[@]}" "$llvm"

rm -rf "$dest" && mkdir -p "$dest/debs" "$dest/root"
cd "$dest/debs"
apt-get download "${apt_quiet[@]}" "rustc-web=$version" "$driver=$version" "libstd-rust-web-dev=$version"

# The arm64 standard library, from an arm64 package list kept in DEST.
lists="$dest/apt-arm64"
mkdir -p "$lists/lists/partial" "$lists/archives/partial" && touch "$lists/status"
arm64=(-o "Dir::State::Lists=$lists/lists" -o "Dir::State::status=$lists/status" -o "Dir::Cache=$lists"
       -o "Dir::Cache::Archives=$lists/archives" -o APT::Architecture=arm64 -o APT::Architectures=arm64
       -o Debug::NoLocking=1)
apt-get "${apt_quiet[@]}" "${arm64[@]}" update
apt-get "${apt_quiet[@]}" "${arm64[@]}" download "libstd-rust-web-dev:arm64=$version"

for deb in *.deb; do
    dpkg-deb -x "$deb" "$dest/root"
done
cat > "$dest/rustc" <<EOF
#!/bin/sh
# Debian's rustc $version, unpacked by scripts/debian_rustc.sh; its sysroot is $dest/root/usr.
LD_LIBRARY_PATH="$dest/root/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dest/root/usr/bin/rustc" "\$@"
EOF
chmod +x "$dest/rustc"
cd "$dest"  # out of the directory removed next: rustc refuses to run in a deleted one
rm -rf "$dest/debs" "$lists"
check_rustc
