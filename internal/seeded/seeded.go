// Package seeded is the deterministic randomness of redrive's fakes (the
// demo solver, the fake CaptchaAI and SMM panel): the same seed and inputs
// always draw the same numbers, so a test can predict what a fake does.
package seeded

// Hash is 64-bit FNV-1a of s.
func Hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Mix is the splitmix64 finaliser: spreads every input bit over the output.
func Mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Unit turns a mixed 64-bit value into a number in [0, 1).
func Unit(x uint64) float64 { return float64(x>>11) / (1 << 53) }
