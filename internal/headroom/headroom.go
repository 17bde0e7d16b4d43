// Package headroom keeps the least headroom (remaining TTL over TTL) seen
// at a renewal since it was last read, for the metrics modules under extra/.
package headroom

import (
	"math"
	"sync"
)

// Least keeps the least headroom noted since it was last taken. The
// zero value has none. It is safe for concurrent use.
type Least struct {
	mu    sync.Mutex // guards least and seen
	least float64
	seen  bool
}

// Note notes a headroom; NaN is ignored.
func (h *Least) Note(v float64) {
	if math.IsNaN(v) {
		return
	}
	h.mu.Lock()
	if !h.seen || v < h.least {
		h.least, h.seen = v, true
	}
	h.mu.Unlock()
}

// Take returns the least headroom noted since the last take, and false
// when none was.
func (h *Least) Take() (float64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.least, h.seen
	h.least, h.seen = 0, false
	return v, ok
}
