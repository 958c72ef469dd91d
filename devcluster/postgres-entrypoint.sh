#!/bin/sh
# The PostgreSQL image's entry point: initialise the data directory on first start (superuser "postgres" with
# the password in $POSTGRES_PASSWORD, password logins only, over TCP from anywhere), then run the server.
set -eu
: "${PGDATA:=/var/lib/postgresql/data/pgdata}"
BIN=/usr/lib/postgresql/15/bin
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set for the first start}"
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  "$BIN/initdb" --pgdata="$PGDATA" --username=postgres --pwfile="$pwfile" --auth=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pwfile"
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
fi
unset POSTGRES_PASSWORD
exec "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp
