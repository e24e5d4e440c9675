#!/bin/bash
# Starts the broker as apache/kafka does: every KAFKA_FOO_BAR variable becomes the property
# foo.bar (a `__` becomes `_`, a `___` becomes `-`), CLUSTER_ID formats the log dirs once.
set -euo pipefail

config=/opt/kafka/config/server.properties
: >"$config"
for name in $(compgen -e); do
    case "$name" in
    KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_JVM_PERFORMANCE_OPTS | KAFKA_LOG4J_OPTS | KAFKA_JMX_OPTS) ;;
    KAFKA_*)
        key="${name#KAFKA_}"
        key="${key,,}"
        key="${key//___/-}"
        key="${key//__/@}"
        key="${key//_/.}"
        key="${key//@/_}"
        printf '%s=%s\n' "$key" "${!name}" >>"$config"
        ;;
    esac
done

read -r -a heap <<<"${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m}"
java=(java "${heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError
    -Djava.awt.headless=true -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.xml
    -cp '/opt/kafka/libs/*')
: "${CLUSTER_ID:?CLUSTER_ID is needed to format the KRaft storage}"
"${java[@]}" kafka.tools.StorageTool format --ignore-formatted -t "$CLUSTER_ID" -c "$config"
exec "${java[@]}" kafka.Kafka "$config"
