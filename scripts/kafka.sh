#!/usr/bin/env bash
# Runs a single-node Apache Kafka broker (KRaft, broker+controller in one
# JVM) on 127.0.0.1 for tests and benchmarks, from the broker's jars on Maven
# Central. No Docker needed: Java 17+ and Maven.
#
#   scripts/kafka.sh up      start it (or find the running one); the LAST line
#                            of output is KAFKA_BROKERS=127.0.0.1:<port>, so
#                            eval "$(scripts/kafka.sh up | tail -1)" works
#   scripts/kafka.sh down    stop it (SIGTERM, SIGKILL after 20 s) and remove its state
#   scripts/kafka.sh status  print the line if running, exit 1 if not
#   scripts/kafka.sh restart stop and start it again on the same ports and data
#                            (after `kill`: start it again on them)
#   scripts/kafka.sh kill    SIGKILL the broker (a crash, not a clean stop),
#                            keeping its state for `restart`
#
# Environment:
#   KAFKA_VERSION      broker version (default pinned below)
#   REDRIVE_CACHE      jar cache, default ~/.cache/redrive (holds kafka-<version>/lib)
#   REDRIVE_KAFKA_DIR  state: config, data, log, pid; default /tmp/redrive-kafka
#   KAFKA_READY_TIMEOUT  seconds to wait for readiness, default 90
#
# Everything but the KAFKA_BROKERS line goes to stderr.
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
CACHE="${REDRIVE_CACHE:-$HOME/.cache/redrive}"
LIB="$CACHE/kafka-$KAFKA_VERSION/lib"
STATE="${REDRIVE_KAFKA_DIR:-/tmp/redrive-kafka}"
READY_TIMEOUT="${KAFKA_READY_TIMEOUT:-90}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
INSTALL_HINT="apt-get install -y openjdk-17-jre-headless maven"

die() { echo "kafka.sh: $*" >&2; exit 1; }
log() { echo "kafka.sh: $*" >&2; }

# running: a pid file whose process is alive and a port file (written only
# once the broker answered a metadata request).
running() {
  [[ -f "$STATE/pid" && -f "$STATE/port" ]] || return 1
  kill -0 "$(cat "$STATE/pid")" 2>/dev/null
}

line() { echo "KAFKA_BROKERS=127.0.0.1:$(cat "$STATE/port")"; }

# lock serialises up and down on one state dir, so a second `up` during a
# start waits for it and then reports the same broker. The lock file sits
# beside the state dir because `down` removes the dir.
lock() {
  mkdir -p "$(dirname "$STATE")"
  exec 9>"$STATE.lock"
  flock -w 180 9 || die "another kafka.sh holds $STATE.lock"
}

need_tools() {
  command -v java >/dev/null || die "java not found; Kafka $KAFKA_VERSION needs Java 17 or newer: $INSTALL_HINT"
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [[ -n "$v" && "$v" -ge 17 ]] || die "java is version '${v:-unknown}'; Kafka $KAFKA_VERSION needs Java 17 or newer: $INSTALL_HINT"
  command -v mvn >/dev/null || die "mvn not found; it fetches the broker from Maven Central: $INSTALL_HINT"
  command -v go >/dev/null || die "go not found; the readiness probe is a Go program (scripts/kafkaready)"
}

# mvn_fail explains a failed Maven run and exits.
mvn_fail() {
  local logf=$1
  tail -25 "$logf" >&2
  if grep -qiE 'could not transfer|unknown ?host|connect(ion)? (timed out|refused)|network is unreachable|no route to host|offline' "$logf"; then
    die "Maven Central cannot be reached (network, proxy or ~/.m2/settings.xml mirror?); the broker's jars for Kafka $KAFKA_VERSION are not in ~/.m2 either"
  fi
  die "Maven could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION (log above)"
}

# resolve copies the broker's runtime classpath into $LIB once; the marker
# file is written only after everything succeeded.
resolve() {
  [[ -f "$LIB/.complete" ]] && return 0
  log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION from Maven Central into $LIB"
  local work; work=$(mktemp -d)
  cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>redrive.local</groupId><artifactId>kafka-broker-classpath</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
  </dependencies>
</project>
POM
  rm -rf "$LIB"; mkdir -p "$LIB"
  (cd "$work" && mvn -B -q org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$LIB" >"$work/mvn.log" 2>&1) || mvn_fail "$work/mvn.log"
  ls "$LIB"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1 || die "Maven finished but $LIB has no kafka_2.13-$KAFKA_VERSION.jar"

  # The broker's pom brings log4j-core but no SLF4J binding (the release
  # tarball adds one), so without this the broker logs nothing at all. Add
  # the binding for the resolved log4j and SLF4J versions.
  local log4j slf4j binding
  log4j=$(ls "$LIB" | sed -n 's/^log4j-api-\(.*\)\.jar$/\1/p' | head -1)
  slf4j=$(ls "$LIB" | sed -n 's/^slf4j-api-\([0-9]*\)\..*\.jar$/\1/p' | head -1)
  [[ -n "$log4j" ]] || die "no log4j-api in the resolved classpath; cannot configure broker logging"
  binding=log4j-slf4j-impl
  [[ "$slf4j" == 1 ]] || binding=log4j-slf4j2-impl
  (cd "$work" && mvn -B -q org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
      -Dartifact="org.apache.logging.log4j:$binding:$log4j" -DoutputDirectory="$LIB" >"$work/mvn-binding.log" 2>&1) \
    || mvn_fail "$work/mvn-binding.log"

  touch "$LIB/.complete"
  rm -rf "$work"
  log "cached $(ls "$LIB" | wc -l) jars"
}

free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
  else
    # No python3: a random high port that nothing listens on (bash's /dev/tcp).
    local p
    while :; do
      p=$((20000 + RANDOM % 40000))
      (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
  fi
}

write_config() {
  local port=$1 cport=$2
  cat > "$STATE/server.properties" <<PROPS
# Single combined KRaft node for tests; written by scripts/kafka.sh.
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
# Tests rely on a missing topic being an error.
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# No 3 s wait before the first rebalance; crash tests use short sessions.
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
PROPS
  cat > "$STATE/log4j2.properties" <<L4J
status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $STATE/kafka.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
L4J
}

# start_jvm starts the broker on the state dir's config and waits until it
# answers a metadata request; the caller holds the lock.
start_jvm() {
  local port=$1 cport=$2 cp="$LIB/*"
  log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$port (controller 127.0.0.1:$cport), log $STATE/kafka.log"
  # Its own session, so a Ctrl-C in the terminal that ran `up` does not reach
  # it; the inner shell records its pid and becomes the JVM.
  STATE="$STATE" setsid bash -c 'echo $$ > "$STATE/pid"; exec "$@"' kafka \
    java -Xms256m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$STATE/log4j2.properties" \
      -cp "$cp" kafka.Kafka "$STATE/server.properties" \
    </dev/null >"$STATE/stdout.log" 2>&1 9>&- &

  # Build the readiness probe while the JVM starts.
  (cd "$ROOT" && go build -o "$STATE/kafkaready" ./scripts/kafkaready) || { down_locked; die "building scripts/kafkaready failed"; }
  for _ in 1 2 3 4 5 6 7 8 9 10; do [[ -s "$STATE/pid" ]] && break; sleep 0.1; done
  local pid; pid=$(cat "$STATE/pid")
  local deadline=$((SECONDS + READY_TIMEOUT)) out
  until out=$("$STATE/kafkaready" "127.0.0.1:$port" 2>/dev/null); do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -30 "$STATE/kafka.log" "$STATE/stdout.log" >&2 2>/dev/null || true
      die "the broker exited during start-up (state kept in $STATE)"
    fi
    if (( SECONDS >= deadline )); then
      tail -30 "$STATE/kafka.log" "$STATE/stdout.log" >&2 2>/dev/null || true
      down_locked
      die "the broker did not answer a metadata request within $READY_TIMEOUT s (log tail above)"
    fi
    sleep 0.5
  done
  log "$out; $(grep -m1 -o 'Kafka Server started' "$STATE/kafka.log" || echo 'no start line in the log')"
}

up() {
  lock
  if running; then
    log "already running (pid $(cat "$STATE/pid"), state $STATE)"
    line
    return 0
  fi
  need_tools
  resolve
  [[ -f "$STATE/pid" ]] && log "stale state in $STATE (broker gone): starting afresh"
  rm -rf "$STATE"; mkdir -p "$STATE/data"
  local port cport
  port=$(free_port); cport=$(free_port)
  while [[ "$cport" == "$port" ]]; do cport=$(free_port); done
  write_config "$port" "$cport"

  local cp="$LIB/*" id
  id=$(java -cp "$cp" -Dlog4j2.configurationFile="$STATE/log4j2.properties" kafka.tools.StorageTool random-uuid 2>"$STATE/format.log" | tail -1)
  [[ ${#id} -eq 22 ]] || { cat "$STATE/format.log" >&2; die "StorageTool random-uuid gave '$id'"; }
  java -cp "$cp" -Dlog4j2.configurationFile="$STATE/log4j2.properties" kafka.tools.StorageTool format \
    --cluster-id "$id" --config "$STATE/server.properties" --standalone >>"$STATE/format.log" 2>&1 \
    || { cat "$STATE/format.log" >&2; die "formatting $STATE/data failed"; }

  start_jvm "$port" "$cport"
  echo "$port" > "$STATE/port"
  flock -u 9
  line
}

# down_locked stops the broker and removes the state; the caller holds the lock.
down_locked() {
  if [[ -f "$STATE/pid" ]]; then
    local pid; pid=$(cat "$STATE/pid")
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      if kill -0 "$pid" 2>/dev/null; then
        log "the broker did not stop within 20 s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      fi
    fi
  fi
  rm -rf "$STATE"
}

down() {
  lock
  if [[ -d "$STATE" ]]; then down_locked; log "stopped; removed $STATE"; else log "not running"; fi
}

# stop_jvm stops the broker (SIGTERM, SIGKILL after 20 s), keeping its state.
stop_jvm() {
  local pid; pid=$(cat "$STATE/pid" 2>/dev/null || true)
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      log "the broker did not stop within 20 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
  fi
}

# restart stops the running broker and starts it again on the same ports
# and data (a broker restart, for tests of what clients do meanwhile).
restart() {
  lock
  [[ -f "$STATE/port" && -f "$STATE/server.properties" ]] || die "no broker state in $STATE: nothing to restart"
  local port cport
  port=$(cat "$STATE/port")
  cport=$(sed -n 's/^controller.quorum.bootstrap.servers=127.0.0.1:\([0-9]*\)$/\1/p' "$STATE/server.properties")
  log "restarting the broker on 127.0.0.1:$port"
  stop_jvm
  rm -f "$STATE/pid"
  start_jvm "$port" "$cport"
  flock -u 9
  line
}

# kill_broker SIGKILLs the broker (as a crash or the OOM killer would),
# keeping its state and ports so that `restart` brings it back.
kill_broker() {
  lock
  running || die "not running (state $STATE): nothing to kill"
  local pid; pid=$(cat "$STATE/pid")
  log "SIGKILL to the broker (pid $pid)"
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  ! kill -0 "$pid" 2>/dev/null || die "the broker (pid $pid) survived SIGKILL"
}

status() {
  if running; then line; else log "not running (state $STATE)"; exit 1; fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  restart) restart ;;
  kill) kill_broker ;;
  *) echo "usage: $0 up|down|status|restart|kill" >&2; exit 2 ;;
esac
