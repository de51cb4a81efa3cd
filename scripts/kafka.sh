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
#   scripts/kafka.sh up --secure
#                            the same broker with one SASL_SSL listener
#                            (SCRAM-SHA-512; a throwaway CA and broker
#                            certificate made with openssl at start) and the
#                            StandardAuthorizer with ACLs. Users: `admin`
#                            (super user) and `redrive` (only what ACLs
#                            grant), random passwords. The last line is
#                            KAFKA_BROKERS=127.0.0.1:<port> KAFKA_CA=<ca.pem>
#                            KAFKA_CREDENTIALS=<file, mode 600>, eval-able.
#                            Its state dir defaults to /tmp/redrive-kafka-secure,
#                            so it runs beside the plain one; pass --secure to
#                            down, status, restart and kill too (or the same
#                            REDRIVE_KAFKA_DIR: the state dir knows it is secure).
#
# Environment:
#   KAFKA_VERSION      broker version (default pinned below: the newest 4.x
#                      Maven serves; share groups need 4.2 or newer, and
#                      4.1.1 is the oldest the consumer-group tests pass on,
#                      `make test-oldest`). restart uses the version the
#                      state dir was started with, whatever this says.
#   REDRIVE_CACHE      jar cache, default ~/.cache/redrive (holds kafka-<version>/lib)
#   REDRIVE_KAFKA_DIR  state: config, data, log, pid; default /tmp/redrive-kafka
#                      (/tmp/redrive-kafka-secure with --secure)
#   KAFKA_READY_TIMEOUT  seconds to wait for readiness, default 90
#   KAFKA_PORT         the listener's port when it is free (`make kafka-up`
#                      asks for 9092, the port redrive's examples name);
#                      default, or when it is in use: a free port
#
# Everything but the KAFKA_BROKERS line goes to stderr.
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
CACHE="${REDRIVE_CACHE:-$HOME/.cache/redrive}"
SECURE=0
case "${2:-}" in
  "") ;;
  --secure) SECURE=1 ;;
  *) echo "usage: $0 up|down|status|restart|kill [--secure]" >&2; exit 2 ;;
esac
if (( SECURE )); then
  STATE="${REDRIVE_KAFKA_DIR:-/tmp/redrive-kafka-secure}"
else
  STATE="${REDRIVE_KAFKA_DIR:-/tmp/redrive-kafka}"
fi
# A secure state dir says so, whichever way it was named.
[[ -f "$STATE/secure" ]] && SECURE=1
# A state dir keeps the version it was formatted with: restarting its data
# with other jars would be an upgrade or downgrade nobody asked for.
if [[ "${1:-}" != up && -f "$STATE/version" ]]; then KAFKA_VERSION=$(cat "$STATE/version"); fi
LIB="$CACHE/kafka-$KAFKA_VERSION/lib"
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

line() {
  if [[ -f "$STATE/secure" ]]; then
    printf 'KAFKA_BROKERS=127.0.0.1:%s KAFKA_CA=%q KAFKA_CREDENTIALS=%q\n' "$(cat "$STATE/port")" "$STATE/tls/ca.pem" "$STATE/credentials"
  else
    echo "KAFKA_BROKERS=127.0.0.1:$(cat "$STATE/port")"
  fi
}

# probe runs the readiness probe against the broker, over TLS with the
# admin user's SCRAM credentials when the broker is secure.
probe() {
  if [[ -f "$STATE/secure" ]]; then
    "$STATE/kafkaready" --ca "$STATE/tls/ca.pem" --credentials "$STATE/credentials" "127.0.0.1:$1"
  else
    "$STATE/kafkaready" "127.0.0.1:$1"
  fi
}

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
  if (( SECURE )); then
    command -v openssl >/dev/null || die "openssl not found; --secure makes its CA and broker certificate with it: apt-get install -y openssl"
  fi
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
# Share groups need 4.2+; on 4.4.0 format finalizes share.version by
# itself. The broker's share defaults are kept on purpose (record lock
# 30 s, delivery count limit 5): the ones users run with.
# No 3 s wait before the first rebalance; crash tests use short sessions.
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
PROPS
  if [[ -f "$STATE/secure" ]]; then secure_config "$port"; chmod 600 "$STATE/server.properties"; fi
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

# make_secrets writes, for a secure broker, a throwaway CA and a broker
# certificate it signed (SAN IP:127.0.0.1 and DNS:localhost) into
# $STATE/tls, the broker's PKCS12 keystore, and random passwords for the
# SCRAM users and the keystore into $STATE/credentials (mode 600).
make_secrets() {
  local tls="$STATE/tls"
  mkdir -p "$tls"; chmod 700 "$tls"
  local admin_pw user_pw store_pw
  admin_pw=$(openssl rand -hex 16); user_pw=$(openssl rand -hex 16); store_pw=$(openssl rand -hex 16)
  (
    umask 077
    cat > "$STATE/credentials" <<CREDS
# SCRAM-SHA-512 users of the secure test broker; written by scripts/kafka.sh.
KAFKA_SASL_MECHANISM=SCRAM-SHA-512
KAFKA_ADMIN_USER=admin
KAFKA_ADMIN_PASSWORD=$admin_pw
KAFKA_USER=redrive
KAFKA_PASSWORD=$user_pw
KAFKA_KEYSTORE_PASSWORD=$store_pw
CREDS
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=redrive test CA" \
      -keyout "$tls/ca.key" -out "$tls/ca.pem" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$tls/broker.key" -out "$tls/broker.csr"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' > "$tls/broker.ext"
    openssl x509 -req -in "$tls/broker.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
      -days 30 -sha256 -extfile "$tls/broker.ext" -out "$tls/broker.pem"
    openssl pkcs12 -export -name broker -in "$tls/broker.pem" -inkey "$tls/broker.key" -certfile "$tls/ca.pem" \
      -out "$tls/broker.p12" -passout "pass:$store_pw"
  ) >"$STATE/tls.log" 2>&1 || { cat "$STATE/tls.log" >&2; die "making the test CA and broker certificate with openssl failed"; }
  chmod 644 "$tls/ca.pem"
}

# cred NAME prints one value of the credentials file.
cred() { sed -n "s/^$1=//p" "$STATE/credentials"; }

# secure_config appends the SASL_SSL listener, SCRAM, TLS and the
# authorizer to server.properties.
secure_config() {
  local port=$1 props="$STATE/server.properties"
  sed -i \
    -e "s|^listeners=PLAINTEXT://|listeners=SASL_SSL://|" \
    -e "s|^advertised.listeners=PLAINTEXT://|advertised.listeners=SASL_SSL://|" \
    -e "s|^inter.broker.listener.name=PLAINTEXT|inter.broker.listener.name=SASL_SSL|" \
    -e "s|^listener.security.protocol.map=.*|listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL|" \
    "$props"
  cat >> "$props" <<PROPS
# --secure: clients (and the broker to itself) only over SASL_SSL with
# SCRAM-SHA-512; the certificate is signed by the throwaway CA in tls/.
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(cred KAFKA_ADMIN_PASSWORD)";
ssl.keystore.type=PKCS12
ssl.keystore.location=$STATE/tls/broker.p12
ssl.keystore.password=$(cred KAFKA_KEYSTORE_PASSWORD)
ssl.truststore.type=PEM
ssl.truststore.location=$STATE/tls/ca.pem
ssl.client.auth=none
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
# Nothing is allowed that no ACL allows.
allow.everyone.if.no.acl.found=false
# admin: the tests' and tools' super user (creates ACLs and topics).
# ANONYMOUS: the principal of the PLAINTEXT CONTROLLER listener. In this
# combined KRaft node the broker registers with and heartbeats to its own
# controller over that listener, which needs CLUSTER_ACTION; SCRAM cannot
# authenticate a controller listener (its credentials live in the metadata
# log the controller serves), so the listener stays PLAINTEXT, bound to
# 127.0.0.1 and not a client listener (no client is told about it), and
# its ANONYMOUS principal is a super user. No client listener maps to
# ANONYMOUS: SASL_SSL always names a SCRAM user.
super.users=User:admin;User:ANONYMOUS
PROPS
}

# start_jvm starts the broker on the state dir's config and waits until it
# answers a metadata request; the caller holds the lock.
start_jvm() {
  local port=$1 cport=$2 cp="$LIB/*"
  local what=""; [[ -f "$STATE/secure" ]] && what=" (SASL_SSL, SCRAM-SHA-512, ACLs)"
  log "starting Kafka $KAFKA_VERSION$what on 127.0.0.1:$port (controller 127.0.0.1:$cport), log $STATE/kafka.log"
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
  until out=$(probe "$port" 2>/dev/null); do
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
    if (( SECURE )) && [[ ! -f "$STATE/secure" ]]; then
      die "a plain broker runs with state $STATE; --secure needs a state dir of its own (unset REDRIVE_KAFKA_DIR or pick another)"
    fi
    local have; have=$(cat "$STATE/version" 2>/dev/null || echo unknown)
    log "already running: Kafka $have (pid $(cat "$STATE/pid"), state $STATE)"
    [[ "$have" == "$KAFKA_VERSION" ]] || log "warning: Kafka $KAFKA_VERSION was asked for but $have runs; down first to change it"
    line
    return 0
  fi
  need_tools
  resolve
  [[ -f "$STATE/pid" ]] && log "stale state in $STATE (broker gone): starting afresh"
  rm -rf "$STATE"; mkdir -p "$STATE/data"
  echo "$KAFKA_VERSION" > "$STATE/version"
  local -a scram=()
  if (( SECURE )); then
    touch "$STATE/secure"
    make_secrets
    scram=(--add-scram "SCRAM-SHA-512=[name=admin,password=$(cred KAFKA_ADMIN_PASSWORD)]"
           --add-scram "SCRAM-SHA-512=[name=redrive,password=$(cred KAFKA_PASSWORD)]")
  fi
  local port cport
  if [[ -n "${KAFKA_PORT:-}" ]] && ! (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; then
    port=$KAFKA_PORT
  else
    [[ -n "${KAFKA_PORT:-}" ]] && log "port $KAFKA_PORT is in use: taking a free one"
    port=$(free_port)
  fi
  cport=$(free_port)
  while [[ "$cport" == "$port" ]]; do cport=$(free_port); done
  write_config "$port" "$cport"

  local cp="$LIB/*" id
  id=$(java -cp "$cp" -Dlog4j2.configurationFile="$STATE/log4j2.properties" kafka.tools.StorageTool random-uuid 2>"$STATE/format.log" | tail -1)
  [[ ${#id} -eq 22 ]] || { cat "$STATE/format.log" >&2; die "StorageTool random-uuid gave '$id'"; }
  java -cp "$cp" -Dlog4j2.configurationFile="$STATE/log4j2.properties" kafka.tools.StorageTool format \
    --cluster-id "$id" --config "$STATE/server.properties" --standalone "${scram[@]}" >>"$STATE/format.log" 2>&1 \
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
  *) echo "usage: $0 up|down|status|restart|kill [--secure]" >&2; exit 2 ;;
esac
