package fakeapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/redrive/redrive/internal/seeded"
)

// unit draws a number in [0, 1) from seed, what it is for and a sequence
// number: the same inputs always give the same draw.
func unit(seed uint64, what string, n uint64) float64 {
	return seeded.Unit(seeded.Mix(seed ^ seeded.Hash(what) ^ seeded.Mix(n)))
}

// between draws a duration in [lo, hi] (lo when hi <= lo).
func between(seed uint64, what string, n uint64, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(unit(seed, what, n)*float64(hi-lo+1))
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
