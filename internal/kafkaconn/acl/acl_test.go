package acl

import "testing"

func TestHints(t *testing.T) {
	named := Principal{Name: "User:redrive", Unknown: "redrive's principal"}
	unknown := Principal{Unknown: "the analyzer's principal"}
	for _, c := range []struct {
		name string
		h    Hint
		want string
	}{
		{"topic read", Topic(named, Read, "orders"), "topic orders: READ denied (TOPIC_AUTHORIZATION_FAILED): grant ACL READ on topic orders to User:redrive " +
			"(kafka-acls.sh --add --allow-principal User:redrive --operation Read --topic orders)"},
		{"topic write, no principal", Topic(unknown, Write, "orders.dlq"), "topic orders.dlq: WRITE denied (TOPIC_AUTHORIZATION_FAILED): grant ACL WRITE on topic orders.dlq to the analyzer's principal " +
			"(kafka-acls.sh --add --allow-principal User:<principal> --operation Write --topic orders.dlq)"},
		{"topic describe", Topic(named, Describe, "orders.results"), "topic orders.results: DESCRIBE denied (TOPIC_AUTHORIZATION_FAILED): grant ACL DESCRIBE on topic orders.results to User:redrive " +
			"(kafka-acls.sh --add --allow-principal User:redrive --operation Describe --topic orders.results)"},
		{"group", Group(named, "redrive.orders"), "consumer group redrive.orders: GROUP_AUTHORIZATION_FAILED: grant ACL READ on group redrive.orders to User:redrive " +
			"(kafka-acls.sh --add --allow-principal User:redrive --operation Read --group redrive.orders)"},
		{"transactional id", TransactionalID(named, Write, "redrive.orders.a"), "transactional id redrive.orders.a: WRITE denied (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): grant ACL WRITE on transactional id redrive.orders.a to User:redrive " +
			"(kafka-acls.sh --add --allow-principal User:redrive --operation Write --transactional-id redrive.orders.a)"},
		{"cluster", Cluster(unknown, IdempotentWrite), "the cluster: IDEMPOTENT_WRITE denied (CLUSTER_AUTHORIZATION_FAILED): grant ACL IDEMPOTENT_WRITE on the cluster to the analyzer's principal " +
			"(kafka-acls.sh --add --allow-principal User:<principal> --operation IdempotentWrite --cluster)"},
	} {
		if got := c.h.String(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func TestOpArg(t *testing.T) {
	for op, want := range map[Op]string{Read: "Read", Write: "Write", Describe: "Describe", IdempotentWrite: "IdempotentWrite", "DESCRIBE_CONFIGS": "DescribeConfigs"} {
		if got := op.arg(); got != want {
			t.Errorf("%s: %q, want %q", op, got, want)
		}
	}
}

func TestPrincipal(t *testing.T) {
	if p := (Principal{Name: "User:app", Unknown: "x"}); p.String() != "User:app" || p.arg() != "User:app" {
		t.Errorf("named: %q %q", p, p.arg())
	}
	if p := (Principal{Unknown: "redrive's principal"}); p.String() != "redrive's principal" || p.arg() != "User:<principal>" {
		t.Errorf("unknown: %q %q", p, p.arg())
	}
}
