#!/usr/bin/env bash
# Entrypoint of the local postgres:15 stand-in (built by scripts/images from
# Debian's postgresql-15). The subset of the official image's entrypoint that
# fencelock relies on, with the same variables and defaults:
#   POSTGRES_PASSWORD   superuser password; required unless
#                       POSTGRES_HOST_AUTH_METHOD=trust
#   POSTGRES_USER       superuser name (postgres)
#   POSTGRES_DB         database created on first start ($POSTGRES_USER)
#   POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD (default: the
#                       password_encryption setting, scram-sha-256)
# On the first start (no $PGDATA/PG_VERSION) it runs initdb, lets every host
# in with that method (local socket connections are trusted, as initdb's
# default), creates the database, runs /docker-entrypoint-initdb.d/*.sh|*.sql,
# then runs postgres in the foreground as the postgres user.
set -Eeo pipefail

# Only options ("-c fsync=off"): they are for postgres.
if [ "${1:0:1}" = '-' ]; then
	set -- postgres "$@"
fi

case " $* " in *' --help '* | *' -V '* | *' --version '* | *' --describe-config '*) exec "$@" ;; esac
[ "$1" = postgres ] || exec "$@"

export POSTGRES_USER="${POSTGRES_USER:-postgres}"
export POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"

# As root: own the data and socket directories, then start again as postgres.
if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chmod 00700 "$PGDATA" || :
	chmod 03775 /var/run/postgresql || :
	find "$PGDATA" /var/run/postgresql \! -user postgres -exec chown postgres '{}' +
	export HOME=/var/lib/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
		echo >&2 'Error: Database is uninitialized and superuser password is not specified.'
		echo >&2 '       Set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust).'
		exit 1
	fi
	ls /docker-entrypoint-initdb.d/ >/dev/null

	eval 'initdb --username="$POSTGRES_USER" --pwfile=<(printf "%s\n" "$POSTGRES_PASSWORD") '"$POSTGRES_INITDB_ARGS"

	# Remote hosts: the method that matches how passwords are stored.
	shift # "postgres"; the rest may set password_encryption
	: "${POSTGRES_HOST_AUTH_METHOD:=$(postgres -C password_encryption "$@")}"
	printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"
	set -- postgres "$@"

	# A socket-only server for the setup.
	export PGPASSWORD="${PGPASSWORD:-$POSTGRES_PASSWORD}"
	PGUSER="$POSTGRES_USER" pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
	sql() { PGHOST= PGHOSTADDR= psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc "$@"; }
	if [ -z "$(sql --dbname postgres --set db="$POSTGRES_DB" --tuples-only <<<"SELECT 1 FROM pg_database WHERE datname = :'db'")" ]; then
		sql --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db"'
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
			*.sh) echo "$0: running $f"; if [ -x "$f" ]; then "$f"; else . "$f"; fi ;;
			*.sql) echo "$0: running $f"; sql --dbname "$POSTGRES_DB" -f "$f" ;;
			*.sql.gz) echo "$0: running $f"; gunzip -c "$f" | sql --dbname "$POSTGRES_DB" ;;
			*) [ ! -e "$f" ] || echo "$0: ignoring $f" ;;
		esac
	done
	PGUSER="$POSTGRES_USER" pg_ctl -D "$PGDATA" -m fast -w stop
	unset PGPASSWORD
	printf '\nPostgreSQL init process complete; ready for start up.\n\n'
else
	printf '\nPostgreSQL Database directory appears to contain a database; Skipping initialization\n\n'
fi

exec "$@"
