# Shared by the scripts: install what a fresh machine lacks (Debian packages, as root or sudo).

# install_packages PKG...: apt-get install them (one apt-get update first).
install_packages() {
    [ $# -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing: $*" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# ensure_packages COMMAND:PKG...: install PKG for each COMMAND not on the PATH.
ensure_packages() {
    local missing=()
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
    done
    install_packages "${missing[@]}"
}
