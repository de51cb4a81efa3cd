package config

// Principal is who the broker's authorizer sees redrive as, when the
// config says: "User:<sasl.user>" with SASL (PLAIN and SCRAM principals
// are the user name), "" otherwise (a TLS client certificate's principal
// is the broker's mapping of its name, not known here).
func (c *Config) Principal() string {
	if c.SASL != nil && c.SASL.User != "" {
		return "User:" + c.SASL.User
	}
	return ""
}
