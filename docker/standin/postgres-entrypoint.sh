#!/bin/bash
# The stand-in postgres image's entrypoint (postgres.Containerfile): first start initialises
# $PGDATA with POSTGRES_USER (superuser, password POSTGRES_PASSWORD, scram over TCP) and creates
# POSTGRES_DB; then runs the command as user postgres.
set -euo pipefail
if [ "${1:-}" != postgres ]; then exec "$@"; fi
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required (as for the official image)}"
user=${POSTGRES_USER:-postgres} db=${POSTGRES_DB:-${POSTGRES_USER:-postgres}}
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp) && printf '%s' "$POSTGRES_PASSWORD" > "$pwfile" && chown postgres "$pwfile"
    runuser -u postgres -- initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256
    rm -f "$pwfile"
    if [ "$db" != postgres ]; then
        echo "CREATE DATABASE \"$db\" OWNER \"$user\"" \
            | runuser -u postgres -- postgres --single -D "$PGDATA" -j postgres >/dev/null
    fi
fi
exec runuser -u postgres -- "$@"
