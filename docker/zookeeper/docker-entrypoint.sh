#!/bin/bash
# Entrypoint of the local zookeeper:3.8 stand-in (built by scripts/images from
# Debian's zookeeper package). It follows the official image's entrypoint:
# zoo.cfg is written from the ZOO_* variables (defaults in the image's ENV)
# only if $ZOO_CONF_DIR/zoo.cfg does not exist, myid only if absent, then the
# command runs (zkServer.sh start-foreground by default).
set -e

# As root, run the server as the zookeeper user (the official image uses gosu).
if [[ "$1" = 'zkServer.sh' && "$(id -u)" = '0' ]]; then
	chown -R zookeeper "$ZOO_DATA_DIR" "$ZOO_DATA_LOG_DIR" "$ZOO_LOG_DIR"
	exec setpriv --reuid=zookeeper --regid=zookeeper --init-groups "$0" "$@"
fi

if [[ ! -f "$ZOO_CONF_DIR/zoo.cfg" ]]; then
	CONFIG="$ZOO_CONF_DIR/zoo.cfg"
	{
		echo "dataDir=$ZOO_DATA_DIR"
		echo "dataLogDir=$ZOO_DATA_LOG_DIR"
		echo "tickTime=$ZOO_TICK_TIME"
		echo "initLimit=$ZOO_INIT_LIMIT"
		echo "syncLimit=$ZOO_SYNC_LIMIT"
		echo "autopurge.snapRetainCount=$ZOO_AUTOPURGE_SNAPRETAINCOUNT"
		echo "autopurge.purgeInterval=$ZOO_AUTOPURGE_PURGEINTERVAL"
		echo "maxClientCnxns=$ZOO_MAX_CLIENT_CNXNS"
		echo "standaloneEnabled=$ZOO_STANDALONE_ENABLED"
		echo "admin.enableServer=$ZOO_ADMINSERVER_ENABLED"
	} >>"$CONFIG"
	# No ZOO_SERVERS: one server, which standaloneEnabled=true runs standalone.
	# The client port comes from the ";2181" part of the server lines.
	if [[ -z $ZOO_SERVERS ]]; then
		ZOO_SERVERS="server.1=localhost:2888:3888;2181"
	fi
	for server in $ZOO_SERVERS; do
		echo "$server" >>"$CONFIG"
	done
	if [[ -n $ZOO_4LW_COMMANDS_WHITELIST ]]; then
		echo "4lw.commands.whitelist=$ZOO_4LW_COMMANDS_WHITELIST" >>"$CONFIG"
	fi
	# Space-separated key=value lines, e.g. "preAllocSize=4096 snapCount=1000".
	for cfg_extra_entry in $ZOO_CFG_EXTRA; do
		echo "$cfg_extra_entry" >>"$CONFIG"
	done
fi

if [[ ! -f "$ZOO_DATA_DIR/myid" ]]; then
	echo "${ZOO_MY_ID:-1}" >"$ZOO_DATA_DIR/myid"
fi

# Read by $ZOO_CONF_DIR/log4j.properties (Debian's ZooKeeper logs with log4j).
export SERVER_JVMFLAGS="$SERVER_JVMFLAGS -Dzookeeper.log.appender=$ZOO_LOG_APPENDER -Dzookeeper.log.level=$ZOO_LOG_LEVEL"

exec "$@"
