package lockwatchotel

import (
	"math"
	"sync"
)

// headroom keeps the least headroom noted since it was last taken. The
// zero value has none. It is safe for concurrent use.
type headroom struct {
	mu    sync.Mutex // guards least and seen
	least float64
	seen  bool
}

// note notes a headroom; NaN is ignored.
func (h *headroom) note(v float64) {
	if math.IsNaN(v) {
		return
	}
	h.mu.Lock()
	if !h.seen || v < h.least {
		h.least, h.seen = v, true
	}
	h.mu.Unlock()
}

// take returns the least headroom noted since the last take, and false
// when none was.
func (h *headroom) take() (float64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.least, h.seen
	h.least, h.seen = 0, false
	return v, ok
}
