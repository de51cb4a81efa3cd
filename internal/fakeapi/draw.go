package fakeapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// unit draws a number in [0, 1) from seed, what it is for and a sequence
// number: the same inputs always give the same draw.
func unit(seed uint64, what string, n uint64) float64 {
	return float64(mix(seed^fnv(what)^mix(n))>>11) / (1 << 53)
}

// between draws a duration in [lo, hi] (lo when hi <= lo).
func between(seed uint64, what string, n uint64, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(unit(seed, what, n)*float64(hi-lo+1))
}

// fnv is 64-bit FNV-1a.
func fnv(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix is the splitmix64 finaliser: spreads every input bit over the output.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// ratio clamps a share to [0, 1]; NaN is 0.
func ratio(f float64) float64 { return min(max(f, 0), 1) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
