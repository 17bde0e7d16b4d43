package main

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// poll reads, every storm.poll, the first idLen bytes of every held lock's
// key through spy (a client nothing watches), a pipeline of stormPollChunk
// keys at a time, until stop is closed, and marks the locks whose key was
// gone or held another value. A lock is judged only when it was held, the
// same lock, from before the read was sent until its answer was read. It
// returns the number of passes.
func (st *stormState) poll(ctx context.Context, spy *redis.Client, stop <-chan struct{}) int {
	passes := 0
	for {
		start := time.Now()
		for a := 0; a < len(st.slots); a += stormPollChunk {
			select {
			case <-stop:
				return passes
			default:
			}
			st.pollChunk(ctx, spy, a, min(a+stormPollChunk, len(st.slots)))
		}
		passes++
		select {
		case <-stop:
			return passes
		case <-time.After(time.Until(start.Add(storm.poll))):
		}
	}
}

// pollChunk polls slots a to b-1.
func (st *stormState) pollChunk(ctx context.Context, spy *redis.Client, a, b int) {
	type read struct {
		i   int
		in  *instance
		gen uint64
		cmd *redis.StringCmd
	}
	reads := make([]read, 0, b-a)
	pipe := spy.Pipeline()
	for i := a; i < b; i++ {
		in, gen := st.slots[i].peek()
		if in == nil {
			continue
		}
		reads = append(reads, read{i, in, gen, pipe.GetRange(ctx, st.keys[i], 0, idLen-1)})
	}
	if len(reads) == 0 {
		return
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return // a failed poll judges nothing
	}
	for _, r := range reads {
		got, err := r.cmd.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			continue
		}
		if in, gen := st.slots[r.i].peek(); in != r.in || gen != r.gen {
			continue // released meanwhile: the read may have seen that
		}
		switch {
		case got == "":
			st.mark(r.in, foundPollGone)
		case got != r.in.id:
			st.mark(r.in, foundPollOther)
		}
	}
}

// headrooms is an observer of the renewal pipelines' headroom: how much
// of its TTL the most urgent lock of each pipeline had left when it was
// sent.
type headrooms struct {
	mu        sync.Mutex
	pipelines int64   // guarded by mu
	late      int64   // guarded by mu
	least     float64 // guarded by mu
}

var _ watchdog.Observer = (*headrooms)(nil)

func newHeadrooms() *headrooms { return &headrooms{least: math.Inf(1)} }

func (h *headrooms) Renewed(_ string, _ int, headroom float64) {
	h.mu.Lock()
	h.pipelines++
	if headroom <= 1.0/3 {
		h.late++
	}
	h.least = min(h.least, headroom)
	h.mu.Unlock()
}

func (*headrooms) RenewFailed(string, int, error) {}
func (*headrooms) Lost(registry.Lock, error)      {}
func (*headrooms) Swept(string, time.Duration)    {}

// fill sets w's pipeline figures.
func (h *headrooms) fill(w *stormWatchdog) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.Pipelines, w.Late = h.pipelines, h.late
	if h.pipelines > 0 {
		w.LeastHeadroom = h.least
	}
}
