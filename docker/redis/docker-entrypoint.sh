#!/bin/sh
# Entrypoint of the local redis:7 stand-in (built by scripts/images from
# Debian's redis-server). Same behaviour as the official image's entrypoint.
set -e

# Options only ("--port 7000") or a config file first: run redis-server with them.
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
	set -- redis-server "$@"
fi

# As root, redis-server runs as the redis user (the official image uses gosu);
# any other command (sh -c "... redis-server sentinel.conf --sentinel") runs as is.
if [ "$1" = 'redis-server' ] && [ "$(id -u)" = '0' ]; then
	find . \! -user redis -exec chown redis '{}' +
	exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
fi

# Files Redis writes are private unless a umask was chosen.
[ "$(umask)" != '0022' ] || umask 0077

exec "$@"
