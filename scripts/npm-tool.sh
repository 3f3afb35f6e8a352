# Sourced by the test-server scripts: `npm_tool DIR PACKAGE@VERSION` installs
# the package into DIR once (and Node.js, if missing).
npm_tool() {
  local dir=$1 package=$2
  [ -d "$dir/node_modules/${package%@*}" ] && return 0
  command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; }
  echo "installing $package into $dir" >&2
  mkdir -p "$dir"
  npm install --silent --no-audit --no-fund --prefix "$dir" "$package" >/dev/null
}
