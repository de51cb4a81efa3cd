#!/usr/bin/env bash
# Runs a single-node Apache Kafka broker (KRaft, broker+controller) on
# 127.0.0.1 for tests and benchmarks, from the broker jars on Maven Central.
#
#   scripts/kafka.sh up      start (or find the running one); last line: KAFKA_BROKERS=127.0.0.1:<port>
#   scripts/kafka.sh down    stop it and remove its data
#   scripts/kafka.sh status  print the line if running, exit 1 if not
#
# Environment: KAFKA_VERSION (pinned default below), REDRIVE_CACHE (jar
# cache, default ~/.cache/redrive), REDRIVE_KAFKA_DIR (state, default
# /tmp/redrive-kafka).
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
CACHE="${REDRIVE_CACHE:-$HOME/.cache/redrive}"
LIB="$CACHE/kafka-$KAFKA_VERSION/lib"
STATE="${REDRIVE_KAFKA_DIR:-/tmp/redrive-kafka}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() { echo "kafka.sh: $*" >&2; exit 1; }
log() { echo "kafka.sh: $*" >&2; }

running() {
  [[ -f "$STATE/pid" && -f "$STATE/port" ]] || return 1
  kill -0 "$(cat "$STATE/pid")" 2>/dev/null
}

need_tools() {
  command -v java >/dev/null || die "java not found: install Java 17 or newer (apt-get install -y openjdk-17-jre-headless)"
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [[ -n "$v" && "$v" -ge 17 ]] || die "Java $v found; Kafka $KAFKA_VERSION needs Java 17 or newer"
  command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install -y maven)"
}

resolve() {
  [[ -f "$LIB/.complete" ]] && return 0
  log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION from Maven Central into $LIB"
  local pom; pom=$(mktemp -d)
  cat > "$pom/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>redrive</groupId><artifactId>kafka-broker</artifactId><version>1</version>
<dependencies><dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency></dependencies></project>
POM
  rm -rf "$LIB"; mkdir -p "$LIB"
  if ! (cd "$pom" && mvn -B -q org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$LIB" >"$pom/mvn.log" 2>&1); then
    tail -20 "$pom/mvn.log" >&2
    die "could not resolve the Kafka broker from Maven Central (network, proxy or ~/.m2 settings?)"
  fi
  ls "$LIB"/kafka_2.13-*.jar >/dev/null 2>&1 || die "resolution finished but no kafka_2.13 jar in $LIB"
  touch "$LIB/.complete"
  rm -rf "$pom"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# ready asks the broker for metadata with the project's own Go client.
ready() {
  (cd "$HERE/.." && go run ./scripts/kafkaready "127.0.0.1:$1") >/dev/null 2>&1
}

up() {
  if running; then
    echo "KAFKA_BROKERS=127.0.0.1:$(cat "$STATE/port")"
    return 0
  fi
  need_tools
  resolve
  rm -rf "$STATE"; mkdir -p "$STATE/data"
  local port cport
  port=$(free_port); cport=$(free_port)
  while [[ "$cport" == "$port" ]]; do cport=$(free_port); done
  cat > "$STATE/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$STATE/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
PROPS
  cat > "$STATE/log4j2.properties" <<'L4J'
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
L4J
  local cp="$LIB/*" id
  id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
  [[ ${#id} -eq 22 ]] || die "StorageTool random-uuid gave '$id'"
  java -cp "$cp" -Dlog4j2.configurationFile="$STATE/log4j2.properties" kafka.tools.StorageTool format \
    --cluster-id "$id" --config "$STATE/server.properties" --standalone >"$STATE/format.log" 2>&1 \
    || { cat "$STATE/format.log" >&2; die "formatting the data dir failed"; }
  log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$port (controller $cport), log $STATE/kafka.log"
  nohup java -Xms256m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$STATE/log4j2.properties" \
    -cp "$cp" kafka.Kafka "$STATE/server.properties" >"$STATE/kafka.log" 2>&1 &
  echo $! > "$STATE/pid"
  # Build the readiness probe while the JVM starts.
  (cd "$HERE/.." && go build -o "$STATE/kafkaready" ./scripts/kafkaready) || die "building scripts/kafkaready failed"
  local deadline=$((SECONDS + 120))
  until "$STATE/kafkaready" "127.0.0.1:$port" >/dev/null 2>&1; do
    if ! kill -0 "$(cat "$STATE/pid")" 2>/dev/null; then
      tail -30 "$STATE/kafka.log" >&2; die "the broker exited during start-up"
    fi
    if (( SECONDS > deadline )); then
      tail -30 "$STATE/kafka.log" >&2; down >/dev/null 2>&1 || true; die "the broker did not answer a metadata request within 120 s"
    fi
    sleep 0.5
  done
  echo "$port" > "$STATE/port"
  grep -q "Kafka Server started" "$STATE/kafka.log" && log "$(grep -m1 'Kafka Server started' "$STATE/kafka.log" | sed 's/^\[[^]]*\] //')"
  echo "KAFKA_BROKERS=127.0.0.1:$port"
}

down() {
  if [[ -f "$STATE/pid" ]]; then
    local pid; pid=$(cat "$STATE/pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && { log "broker did not stop in 20 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
    fi
  fi
  rm -rf "$STATE"
  log "stopped"
}

status() {
  if running; then echo "KAFKA_BROKERS=127.0.0.1:$(cat "$STATE/port")"; else echo "kafka.sh: not running" >&2; exit 1; fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
