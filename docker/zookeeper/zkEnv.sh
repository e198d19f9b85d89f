# zkEnv.sh of the local zookeeper:3.8 stand-in, sourced by Debian's
# /usr/share/zookeeper/bin/zkServer.sh and zkCli.sh. It replaces Debian's,
# which points at /etc/zookeeper/conf, with the official image's layout:
# config in $ZOOCFGDIR (/conf), logs in $ZOO_LOG_DIR (/logs).
ZOOCFGDIR=${ZOOCFGDIR:-${ZOO_CONF_DIR:-/conf}}
ZOOCFG=${ZOOCFG:-$ZOOCFGDIR/zoo.cfg}
ZOO_LOG_DIR=${ZOO_LOG_DIR:-/logs}
ZOOMAIN=org.apache.zookeeper.server.quorum.QuorumPeerMain
JAVA=${JAVA:-/usr/bin/java}
# zookeeper.jar's manifest lists the jars it needs in /usr/share/java, all
# but a logger for SLF4J (without which ZooKeeper logs nothing), log4j 1.2,
# and the servlet API (without which the admin server on 8080 does not start).
CLASSPATH="$ZOOCFGDIR:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar:/usr/share/java/servlet-api.jar${CLASSPATH:+:$CLASSPATH}"
# Heap limits as upstream's zkEnv.sh sets them (MB).
SERVER_JVMFLAGS="-Xmx${ZK_SERVER_HEAP:-1000}m $SERVER_JVMFLAGS"
CLIENT_JVMFLAGS="-Xmx${ZK_CLIENT_HEAP:-256}m $CLIENT_JVMFLAGS"
