package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrive/redrive/internal/config"
	"github.com/redrive/redrive/internal/kafkaconn/acl"
	"github.com/redrive/redrive/topics"
)

// CheckTimeout bounds the start-up check: a command that cannot use the
// cluster says why well within 15 s.
const CheckTimeout = 10 * time.Second

// FatalError is a connection problem no retry can fix: the broker's
// certificate is not trusted, SASL authentication failed, the user may not
// use a consumer group. Its message names the cause and the fix.
type FatalError struct {
	msg string
	err error
}

func (e *FatalError) Error() string { return e.msg }
func (e *FatalError) Unwrap() error { return e.err }

// Need is what a command will use: the consumer groups it joins, the
// share groups it joins, the topics it reads, the topics it writes.
type Need struct {
	Groups []string
	// Shares are the share groups of pipelines with consume: share
	// (topics.ShareGroupID). The brokers must serve share groups
	// (topics.CheckShareGroups): a broker that does not is fatal.
	Shares []Share
	Read   []string
	Write  []string
}

// Share is a share group a command joins and the pipeline whose main
// topic it reads, for the error that names both.
type Share struct {
	Pipeline, Group string
}

// Check connects with c's settings and, within CheckTimeout, asks for the
// metadata of need's topics (with the operations the user may perform on
// them) and for the coordinator of each of need's groups (which needs the
// group's DESCRIBE ACL, implied by READ). It returns a *FatalError for
// what retrying cannot fix (Fatal classifies; a topic it must read and may
// not is one). A topic it writes and may not is a warning, not an error:
// the processor blocks on such a write and reports it until the ACL is
// granted. Share groups on brokers that do not serve them (Kafka before
// 4.2, or 4.1 without share.version=1) are a *FatalError naming the
// pipelines, the broker, its version and what it lacks; a share group's
// coordinator is looked up as a consumer group's is. Any other failure (a
// broker not up yet, a timeout) is returned as it is: a caller may go on,
// its clients retry those. A topic that does not exist is not checked
// here.
func Check(ctx context.Context, c *config.Config, need Need) (warnings []string, err error) {
	opts, err := Opts(c)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.DialTimeout(5*time.Second), kgo.RequestRetries(2))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	// kmsg, not kadm.Metadata: that one fails as a whole on one topic the
	// user may not describe, without naming it.
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // none: brokers only
	for _, t := range append(append([]string(nil), need.Read...), need.Write...) {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	req.IncludeTopicAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		if f := Fatal(c, err); f != nil {
			return nil, f
		}
		return nil, fmt.Errorf("brokers %s: %w", strings.Join(c.Brokers, ","), err)
	}
	md := map[string]topicAccess{}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			md[*t.Topic] = topicAccess{err: kerr.ErrorForCode(t.ErrorCode), ops: kadm.DecodeACLOperations(t.AuthorizedOperations)}
		}
	}
	for _, t := range need.Read {
		if !md[t].allowed(kadm.OpRead) {
			return nil, TopicDenied(c, t, "READ")
		}
	}
	for _, t := range need.Write {
		if !md[t].allowed(kadm.OpWrite) {
			warnings = append(warnings, TopicDenied(c, t, "WRITE").Error()+"; until then every write to it blocks, and nothing is committed past it")
		}
	}
	if len(need.Shares) > 0 {
		if err := shareSupport(ctx, c, cl, need.Shares); err != nil {
			return warnings, err
		}
	}
	groups := slices.Clone(need.Groups)
	share := make(map[string]bool, len(need.Shares))
	for _, s := range need.Shares {
		groups = append(groups, s.Group)
		share[s.Group] = true
	}
	if len(groups) == 0 {
		return warnings, nil
	}
	return warnings, coordinators(ctx, c, adm, groups, share)
}

// shareSupport is Check's verdict on the brokers for shares: a
// *FatalError when one does not serve share groups (no retry makes a
// broker upgrade itself), the request's error when they did not answer.
func shareSupport(ctx context.Context, c *config.Config, cl *kgo.Client, shares []Share) error {
	err := topics.CheckShareGroups(ctx, cl)
	if err == nil {
		return nil
	}
	if f := Fatal(c, err); f != nil {
		return f
	}
	var no *topics.NoShareGroupsError
	if !errors.As(err, &no) {
		return err
	}
	return &FatalError{err: err, msg: noShareGroups(shares, no)}
}

// noShareGroups words a broker without share groups for the pipelines
// that need them: "pipeline orders has consume: share, but the broker at
// ... does not support share groups (...)".
func noShareGroups(shares []Share, no *topics.NoShareGroupsError) string {
	names := make([]string, len(shares))
	for i, s := range shares {
		names[i] = s.Pipeline
	}
	who := "pipeline " + names[0] + " has"
	if len(names) > 1 {
		who = "pipelines " + strings.Join(names, ", ") + " have"
	}
	return who + " consume: share, but " + no.Error()
}

// coordinatorWait bounds how long the check waits for a group's
// coordinator while the broker still loads it. A fresh broker answers
// COORDINATOR_NOT_AVAILABLE until it has created __consumer_offsets, a
// few seconds; that is not a problem to warn about, and the clients would
// wait for it anyway.
const coordinatorWait = 8 * time.Second

// coordinators finds the coordinator of each group, asking again every
// 250 ms within coordinatorWait for the groups whose answer was a
// retriable error (the coordinator not available or still loading). A
// share group's coordinator is a group coordinator too; share names the
// share groups, for the errors.
func coordinators(ctx context.Context, c *config.Config, adm *kadm.Client, groups []string, share map[string]bool) error {
	wait, cancel := context.WithTimeout(ctx, coordinatorWait)
	defer cancel()
	pending := groups
	for {
		var errs []error
		var retry []string
		for g, r := range adm.FindGroupCoordinators(ctx, pending...) {
			if r.Err == nil {
				continue
			}
			if f := Fatal(c, r.Err); f != nil {
				switch {
				case errors.Is(r.Err, kerr.GroupAuthorizationFailed) && share[g]:
					f = ShareGroupDenied(c, g, r.Err)
				case errors.Is(r.Err, kerr.GroupAuthorizationFailed):
					f = GroupDenied(c, g, r.Err)
				}
				return f
			}
			if kerr.IsRetriable(r.Err) {
				retry = append(retry, g)
			}
			kind := "consumer group"
			if share[g] {
				kind = "share group"
			}
			errs = append(errs, fmt.Errorf("%s %s: %w", kind, g, r.Err))
		}
		if len(errs) == 0 || len(retry) < len(errs) {
			return errors.Join(errs...)
		}
		select {
		case <-wait.Done():
			return errors.Join(errs...)
		case <-time.After(250 * time.Millisecond):
		}
		pending = retry
	}
}

// topicAccess is a topic's metadata error and the operations the user may
// perform on it.
type topicAccess struct {
	err error
	ops []kadm.ACLOperation
}

// allowed says whether a topic's metadata shows op allowed: false only for
// a topic the user may not describe (TOPIC_AUTHORIZATION_FAILED) or whose
// authorized operations (a broker since Kafka 2.3) lack op. A topic that
// does not exist, was not in the answer or came without operations counts
// as allowed: others report it.
func (a topicAccess) allowed(op kadm.ACLOperation) bool {
	if errors.Is(a.err, kerr.TopicAuthorizationFailed) {
		return false
	}
	if a.err != nil || a.ops == nil {
		return true
	}
	for _, o := range a.ops {
		if o == op || o == kadm.OpAll {
			return true
		}
	}
	return false
}

// TopicDenied is the error for a topic the user may not read or write
// (op: READ or WRITE).
func TopicDenied(c *config.Config, topic, op string) *FatalError {
	h := acl.Topic(principal(c), acl.Op(op), topic)
	return &FatalError{err: kerr.TopicAuthorizationFailed, msg: h.Refused + ": " + who(c) + " may not " + strings.ToLower(op) + " it; " + h.Grant}
}

// GroupDenied is the error for a consumer group the user may not use.
func GroupDenied(c *config.Config, group string, err error) *FatalError {
	h := acl.Group(principal(c), group)
	return &FatalError{err: err, msg: h.Refused + ": " + who(c) + " may not use it; " + h.Grant}
}

// ShareGroupDenied is the error for a share group the user may not use.
func ShareGroupDenied(c *config.Config, group string, err error) *FatalError {
	h := acl.ShareGroup(principal(c), group)
	return &FatalError{err: err, msg: h.Refused + ": " + who(c) + " may not use it; " + h.Grant}
}

// principal is who c connects as, for the ACL a message asks for.
func principal(c *config.Config) acl.Principal {
	p := acl.Principal{Unknown: "redrive's principal"}
	if c != nil {
		p.Name = c.Principal()
	}
	return p
}

// who names whom the broker refused: "user <sasl.user>", or "redrive's
// principal" without SASL (a TLS client certificate's principal is the
// broker's mapping of its name, not known here).
func who(c *config.Config) string {
	if c == nil || c.SASL == nil || c.SASL.User == "" {
		return principal(c).Unknown
	}
	return "user " + c.SASL.User
}

// user names c's SASL user for messages ("<user>" without one).
func user(c *config.Config) string {
	if c != nil && c.SASL != nil && c.SASL.User != "" {
		return c.SASL.User
	}
	return "<user>"
}

// Fatal classifies err from any client built with c's options: a
// *FatalError naming the cause and the fix when retrying cannot help, nil
// otherwise.
func Fatal(c *config.Config, err error) *FatalError {
	if err == nil {
		return nil
	}
	var f *FatalError
	if errors.As(err, &f) {
		return f
	}
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var recHdr tls.RecordHeaderError
	var firstEOF *kgo.ErrFirstReadEOF
	brokers := strings.Join(c.Brokers, ",")
	switch {
	case errors.As(err, &unknownCA):
		return &FatalError{err: err, msg: fmt.Sprintf("TLS: the certificate of broker %s is not trusted (%v): set tls.ca_file to the CA that signed it", brokers, err)}
	case errors.As(err, &badHost):
		return &FatalError{err: err, msg: fmt.Sprintf("TLS: the certificate of broker %s is not for that name (%v): connect by a name it has, or set tls.server_name to one", brokers, err)}
	case errors.As(err, &invalid), errors.As(err, &verify):
		return &FatalError{err: err, msg: fmt.Sprintf("TLS: the certificate of broker %s does not verify (%v): check tls.ca_file and the broker's certificate", brokers, err)}
	case errors.As(err, &recHdr):
		return &FatalError{err: err, msg: fmt.Sprintf("TLS: broker %s does not speak TLS on that port (%v): unset tls.enabled or use its SSL/SASL_SSL listener", brokers, err)}
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return &FatalError{err: err, msg: fmt.Sprintf("SASL authentication failed for user %s (%s) at %s: %v; check sasl.user and sasl.password (and sasl.mechanism)", user(c), mech(c), brokers, err)}
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return &FatalError{err: err, msg: fmt.Sprintf("SASL: broker %s does not enable mechanism %s (%v): set sasl.mechanism to one it enables", brokers, mech(c), err)}
	case errors.Is(err, kerr.IllegalSaslState):
		return &FatalError{err: err, msg: fmt.Sprintf("SASL: broker %s refused the handshake (%v): is sasl set for a listener without SASL?", brokers, err)}
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return &FatalError{err: err, msg: fmt.Sprintf("GROUP_AUTHORIZATION_FAILED: %s may not use a consumer group (%v); grant ACL READ on the group to %s", who(c), err, principal(c))}
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return &FatalError{err: err, msg: fmt.Sprintf("CLUSTER_AUTHORIZATION_FAILED: %s lacks a cluster ACL (%v)", who(c), err)}
	case errors.As(err, &firstEOF):
		return &FatalError{err: err, msg: fmt.Sprintf("broker %s closed the connection before answering (%v): a TLS listener without tls.enabled, or a SASL listener without sasl?", brokers, err)}
	}
	return nil
}

func mech(c *config.Config) string {
	if c.SASL == nil || c.SASL.Mechanism == "" {
		return "no SASL"
	}
	return strings.ToUpper(c.SASL.Mechanism)
}

// Unreachable reports whether err is a failure to connect to a broker at
// all (refused, no such host, a dial timeout), as opposed to a broker that
// answered with an error.
func Unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns)
}

// BrokersHint says where the brokers redrive dialled came from and how to
// point it elsewhere: the line a user needs after "connection refused".
func BrokersHint(c *config.Config) string {
	return fmt.Sprintf("redrive tried the brokers %s (%s); point it at your cluster with --brokers HOST:PORT, the %s variable, or brokers: in the config file (make kafka-up prints its broker's address)",
		strings.Join(c.Brokers, ","), c.BrokersFrom(), config.EnvBrokers)
}
