#!/usr/bin/env python3
"""redrive interop client on Python confluent-kafka (librdkafka).

  redrive_interop.py produce BROKERS < spec
      Produces every line of spec, one record a line, tab-separated:
        topic, compression, key, value, timestamp, headers
      key and value are base64 ("-": null), timestamp is Unix ms
      ("-": the producer's clock), headers is "" or comma-separated
      name:value pairs, both base64 (value "-" for a null header value).
      One producer per compression type; exits 1 if a delivery failed.

  redrive_interop.py dlq BROKERS TOPIC [--reason R] [--code C]
      A dead-letter consumer: reads TOPIC from the beginning to its end and
      prints, one JSON object a line, the dead letters whose
      redrive-reason is R and redrive-error-code is C (either filter may be
      left out). Keys, values and header values are base64, so binary
      bytes come through unchanged.
"""
import argparse
import base64
import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


def b64(b):
    return None if b is None else base64.b64encode(b).decode("ascii")


def unb64(s):
    return None if s == "-" else base64.b64decode(s)


def produce(brokers):
    producers = {}
    failures = []

    def delivered(err, msg):
        if err is not None:
            failures.append("%s: %s" % (msg.topic(), err))

    for n, line in enumerate(sys.stdin, 1):
        line = line.rstrip("\n")
        if not line:
            continue
        topic, comp, key, value, ts, hdrs = line.split("\t")
        p = producers.get(comp)
        if p is None:
            p = Producer({
                "bootstrap.servers": brokers,
                "compression.type": comp,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 20,
            })
            producers[comp] = p
        headers = []
        for pair in filter(None, hdrs.split(",")):
            k, v = pair.split(":")
            headers.append((base64.b64decode(k).decode("utf-8"), unb64(v)))
        kwargs = {"value": unb64(value), "key": unb64(key), "on_delivery": delivered}
        if headers:
            kwargs["headers"] = headers
        if ts != "-":
            kwargs["timestamp"] = int(ts)
        p.produce(topic, **kwargs)
        p.poll(0)
    for p in producers.values():
        left = p.flush(30)
        if left:
            failures.append("%d records not delivered within 30s" % left)
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)


def header(headers, name):
    for k, v in headers or []:
        if k == name:
            return None if v is None else v.decode("utf-8", "replace")
    return None


def dlq(brokers, topic, reason, code):
    c = Consumer({
        "bootstrap.servers": brokers,
        "group.id": "redrive-interop-%d" % time.time_ns(),
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    md = c.list_topics(topic, timeout=30)
    parts = md.topics[topic].partitions
    if not parts:
        sys.exit("no partitions in %s" % topic)
    c.assign([TopicPartition(topic, p, -2) for p in parts])  # -2: beginning
    at_end = set()
    deadline = time.time() + 60
    while len(at_end) < len(parts):
        if time.time() > deadline:
            sys.exit("did not reach the end of %s within 60s" % topic)
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
                continue
            sys.exit("consume %s: %s" % (topic, m.error()))
        hs = m.headers() or []
        if reason is not None and header(hs, "redrive-reason") != reason:
            continue
        if code is not None and header(hs, "redrive-error-code") != code:
            continue
        print(json.dumps({
            "partition": m.partition(),
            "offset": m.offset(),
            "key": b64(m.key()),
            "value": b64(m.value()),
            "headers": [[k, b64(v)] for k, v in hs],
        }))
    c.close()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce")
    p.add_argument("brokers")
    d = sub.add_parser("dlq")
    d.add_argument("brokers")
    d.add_argument("topic")
    d.add_argument("--reason")
    d.add_argument("--code")
    a = ap.parse_args()
    if a.cmd == "produce":
        produce(a.brokers)
    else:
        dlq(a.brokers, a.topic, a.reason, a.code)


if __name__ == "__main__":
    main()
    # confluent-kafka 1.7.0 (Debian 12's python3-confluent-kafka) releases
    # None once too often for every null header value it returns, and the
    # interpreter then aborts at shutdown ("none_dealloc"). Everything is
    # written by now: leave without the interpreter's finalization.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
