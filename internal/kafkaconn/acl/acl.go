package acl

import (
	"fmt"
	"strings"
)

// Op is an ACL operation as Kafka's authorizer names it ("READ",
// "IDEMPOTENT_WRITE").
type Op string

// The operations redrive needs.
const (
	Read            Op = "READ"
	Write           Op = "WRITE"
	Describe        Op = "DESCRIBE"
	IdempotentWrite Op = "IDEMPOTENT_WRITE"
)

// arg is op as kafka-acls.sh --operation spells it ("Read",
// "IdempotentWrite").
func (op Op) arg() string {
	var b strings.Builder
	for w := range strings.SplitSeq(string(op), "_") {
		if w != "" {
			b.WriteString(w[:1] + strings.ToLower(w[1:]))
		}
	}
	return b.String()
}

// Principal is who an ACL is granted to.
type Principal struct {
	// Name is the authorizer's name for the client ("User:redrive" for
	// sasl.user redrive); "" when not known (no SASL: a TLS client
	// certificate's principal is the broker's mapping of its name).
	Name string
	// Unknown names the principal in words when Name is ""
	// ("redrive's principal"); the command then has "User:<principal>"
	// to fill in.
	Unknown string
}

// String is how a message names p: its Name, else its Unknown words.
func (p Principal) String() string {
	if p.Name == "" {
		return p.Unknown
	}
	return p.Name
}

// arg is the --allow-principal argument: the name, or a placeholder.
func (p Principal) arg() string {
	if p.Name == "" {
		return "User:<principal>"
	}
	return p.Name
}

// Hint words one refusal. Callers join the two parts with ": " (String),
// or put their own words between them.
type Hint struct {
	// Refused is what the authorizer refused, with Kafka's error code:
	// "topic orders: READ denied (TOPIC_AUTHORIZATION_FAILED)".
	Refused string
	// Grant is the ACL that allows it and the command that adds it:
	// "grant ACL READ on topic orders to User:redrive (kafka-acls.sh
	// --add --allow-principal User:redrive --operation Read --topic
	// orders)".
	Grant string
}

// String is the whole hint: Refused, then Grant.
func (h Hint) String() string { return h.Refused + ": " + h.Grant }

// grant words the ACL op on a resource ("topic orders", "the cluster")
// and its kafka-acls.sh resource arguments ("--topic orders",
// "--cluster").
func grant(p Principal, op Op, resource, args string) string {
	return fmt.Sprintf("grant ACL %s on %s to %s (kafka-acls.sh --add --allow-principal %s --operation %s %s)",
		op, resource, p, p.arg(), op.arg(), args)
}

// Topic is the hint for op (Read, Write, Describe) refused on topic.
func Topic(p Principal, op Op, topic string) Hint {
	return Hint{
		Refused: fmt.Sprintf("topic %s: %s denied (TOPIC_AUTHORIZATION_FAILED)", topic, op),
		Grant:   grant(p, op, "topic "+topic, "--topic "+topic),
	}
}

// Group is the hint for a consumer group p may not use: joining,
// fetching its offsets and committing all need READ on it.
func Group(p Principal, group string) Hint {
	return Hint{
		Refused: fmt.Sprintf("consumer group %s: GROUP_AUTHORIZATION_FAILED", group),
		Grant:   grant(p, Read, "group "+group, "--group "+group),
	}
}

// ShareGroup is the hint for a share group p may not use: joining it,
// fetching and acknowledging records in it all need READ on it, as a
// consumer group's do.
func ShareGroup(p Principal, group string) Hint {
	return Hint{
		Refused: fmt.Sprintf("share group %s: GROUP_AUTHORIZATION_FAILED", group),
		Grant:   grant(p, Read, "group "+group, "--group "+group),
	}
}

// TransactionalID is the hint for op (Write, Describe) refused on a
// transactional id: an exactly-once producer needs both.
func TransactionalID(p Principal, op Op, id string) Hint {
	return Hint{
		Refused: fmt.Sprintf("transactional id %s: %s denied (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)", id, op),
		Grant:   grant(p, op, "transactional id "+id, "--transactional-id "+id),
	}
}

// Cluster is the hint for op (IdempotentWrite, Describe) refused on the
// cluster.
func Cluster(p Principal, op Op) Hint {
	return Hint{
		Refused: fmt.Sprintf("the cluster: %s denied (CLUSTER_AUTHORIZATION_FAILED)", op),
		Grant:   grant(p, op, "the cluster", "--cluster"),
	}
}
