#!/usr/bin/env bash
# Installs what Porter's build, demo and tests need and is missing. Safe to run often:
# it does nothing when everything is there.
set -euo pipefail

need=()
[ -f /etc/mime.types ] || need+=(media-types)
{ command -v setpriv && command -v script; } >/dev/null 2>&1 || need+=(util-linux bsdutils)
[ -x /usr/bin/time ] || need+=(time)   # GNU time: a child's true peak RSS in tests and benchmarks
command -v strace >/dev/null 2>&1 || need+=(strace)   # tests watch the system calls that create private files
# libcurl (http/https) and the real servers the protocol tests start on loopback.
[ -f /usr/include/x86_64-linux-gnu/curl/curl.h ] || [ -f /usr/include/curl/curl.h ] || need+=(libcurl4-openssl-dev)
[ -f /usr/include/openssl/x509.h ] || need+=(libssl-dev)   # the shim's public-key pinning helper
[ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)   # gzip / deflate bodies are decoded by Porter (bounded memory while paused)
[ -f /usr/include/brotli/decode.h ] || need+=(libbrotli-dev)   # br bodies, decoded the same way
[ -f /usr/include/zstd.h ] || need+=(libzstd-dev)   # zstd bodies, decoded the same way
{ command -v brotli && command -v zstd; } >/dev/null 2>&1 || need+=(brotli zstd)   # the tests compress their fixtures' files
[ -x /usr/sbin/nginx ] || need+=(nginx)
[ -f /usr/lib/nginx/modules/ngx_http_echo_module.so ] || need+=(libnginx-mod-http-echo)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
[ -x /usr/bin/tinyproxy ] || need+=(tinyproxy)
[ -x /usr/sbin/danted ] || need+=(dante-server)
[ -x /usr/sbin/lighttpd ] || need+=(lighttpd)
# Authentication against real servers: MIT Kerberos's KDC (krb5kdc, kdb5_util),
# kadmin.local and kinit for a test realm; Apache with mod_auth_gssapi (Negotiate);
# squid (a proxy asking for Negotiate, Digest and Basic).
[ -x /usr/sbin/krb5kdc ] || need+=(krb5-kdc)
[ -x /usr/sbin/kadmin.local ] || need+=(krb5-admin-server)
[ -x /usr/bin/kinit ] || need+=(krb5-user)
[ -x /usr/sbin/apache2 ] || need+=(apache2-bin)   # also mod_auth_digest and mod_proxy_wstunnel (WebSocket handshake auth)
# The WebSocket handshake's Negotiate opens libgssapi_krb5.so.2 with dlopen (no headers needed).
ldconfig -p 2>/dev/null | grep -q 'libgssapi_krb5\.so\.2 ' || need+=(libgssapi-krb5-2)
[ -f /usr/lib/apache2/modules/mod_auth_gssapi.so ] || need+=(libapache2-mod-auth-gssapi)
[ -x /usr/sbin/squid ] || need+=(squid)
# Plugins: event hooks on libffi, the sftp plugin on libssh2, OpenSSH's sshd to test it.
[ -f /usr/include/x86_64-linux-gnu/ffi.h ] || [ -f /usr/include/ffi.h ] || need+=(libffi-dev)
[ -f /usr/include/libssh2.h ] || need+=(libssh2-1-dev)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)   # the plugin scaffold test builds with the Makefile porter plugin new writes
# Background sessions: a network namespace test (ip), the systemd user units' check and
# socket activation (systemd-analyze, systemd-socket-activate), python3's http.server.
[ -x /usr/sbin/ip ] || need+=(iproute2)
{ command -v systemd-analyze && command -v systemd-socket-activate; } >/dev/null 2>&1 || need+=(systemd)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# Stores: SQLite for GRDB; public suffixes through libpsl and the system's list.
[ -f /usr/include/sqlite3.h ] || need+=(libsqlite3-dev)
[ -f /usr/include/libpsl.h ] || need+=(libpsl-dev)
[ -f /usr/share/publicsuffix/public_suffix_list.dafsa ] || need+=(publicsuffix)   # the loader tests build small C plugins
# Credentials in the Secret Service: Porter opens libsecret-1.so.0 on first use (no
# build dependency); libsecret-1-dev only for the test that checks Porter's own
# declarations against its headers; a private session bus (dbus-daemon),
# gnome-keyring-daemon, secret-tool (which brings libsecret-1-0) and gdbus for the tests.
[ -f /usr/include/libsecret-1/libsecret/secret.h ] || need+=(libsecret-1-dev)
{ command -v dbus-daemon && command -v dbus-run-session; } >/dev/null 2>&1 || need+=(dbus-daemon)
command -v gnome-keyring-daemon >/dev/null 2>&1 || need+=(gnome-keyring)
command -v secret-tool >/dev/null 2>&1 || need+=(libsecret-tools)
command -v gdbus >/dev/null 2>&1 || need+=(libglib2.0-bin)
# make install's check: pkg-config for the plugin header, man and groff for the man page.
command -v pkg-config >/dev/null 2>&1 || need+=(pkgconf)
# make deb: the packaged programs' RUNPATH is set to Porter's private Swift runtime.
command -v patchelf >/dev/null 2>&1 || need+=(patchelf)
# make install's static link and its check: readelf and nm read the installed programs.
{ command -v readelf && command -v nm; } >/dev/null 2>&1 || need+=(binutils)
command -v man >/dev/null 2>&1 || need+=(man-db)
command -v groff >/dev/null 2>&1 || need+=(groff-base)

if ! command -v swift >/dev/null 2>&1; then
    echo "install-deps: no 'swift' on PATH; Porter needs Swift 6 (swift.org toolchain)" >&2
    exit 1
fi

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
            echo "install-deps: missing ${need[*]} and not root (no sudo): install them with apt-get" >&2
            exit 1
        fi
    else
        SUDO=
    fi
    echo "install-deps: installing ${need[*]}"
    # Keep apt from starting system daemons on their default ports.
    if [ ! -f /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
        $SUDO chmod +x /usr/sbin/policy-rc.d
    fi
    # A dpkg run killed earlier on this machine makes apt refuse everything ("dpkg was
    # interrupted"): finish it first, as apt's message asks.
    if [ -n "$(dpkg --audit 2>/dev/null)" ]; then
        echo "install-deps: dpkg was interrupted earlier; running dpkg --configure -a"
        DEBIAN_FRONTEND=noninteractive $SUDO dpkg --configure -a --force-confold || true
    fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# pyftpdlib for the FTP tests, in a venv under .build (Debian's python3-pyftpdlib 1.5.7
# breaks FTPS downloads with this libcurl); `websockets` for the WebSocket tests;
# pyspnego for the NTLM acceptor of the authentication tests (ntlmserver.py).
venv="$(dirname "$0")/../.build/ftp-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import pyftpdlib, OpenSSL, websockets, spnego' 2>/dev/null; then
    echo "install-deps: making the pyftpdlib venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q pyftpdlib pyopenssl websockets pyspnego
fi
