package analyzer

// SetMaxHeldBytes sets what a rule worker's partition may hold
// unfinished, for a test; it returns the old value.
func SetMaxHeldBytes(n int64) (old int64) {
	old, maxHeldBytes = maxHeldBytes, n
	return old
}
