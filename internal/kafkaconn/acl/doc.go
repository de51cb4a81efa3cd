// Package acl words what redrive says when the broker's authorizer
// refuses it: what was refused, and the ACL to grant, with the exact
// kafka-acls.sh arguments that grant it. The start-up check
// (internal/kafkaconn), the processor and the analyzer all word their
// refusals here, so that an operator reads one phrasing wherever it comes
// from.
//
// It is a leaf package (no import of redrive's own) so that processor and
// analyzer can use it: internal/kafkaconn imports internal/config, which
// imports them.
//
// It must never decide what is fatal or retried (its callers do), nor name
// a principal it was not given.
package acl
