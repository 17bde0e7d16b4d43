package storm_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// poller reads, every pollEvery, the token of every held lock's key
// through spy, a client nothing watches, and after each pass looks at the
// registry's locks for any not confirmed in time. Its fields other than
// misses and stale are run's alone until run has returned.
type poller struct {
	s   *storm
	spy *redis.Client
	reg *registry.Registry

	passes int
	seen   map[*redislock.Lock]bool // the locks found lost
	oldest time.Duration            // the oldest confirmation seen
	misses harness.Log[string]
	stale  harness.Log[staleLock]
}

// staleLock is a tracked lock a look found confirmed age ago.
type staleLock struct {
	key string
	age time.Duration
	at  time.Time
}

func (o staleLock) String() string {
	return fmt.Sprintf("%s confirmed %v before %s", o.key, o.age.Round(time.Millisecond), o.at.Format("15:04:05.000"))
}

// look looks at the registry's locks for those whose last confirmation
// is older than two thirds of their TTL.
func (p *poller) look() {
	now := time.Now()
	for _, l := range p.reg.Locks() {
		age := now.Sub(l.ConfirmedAt)
		p.oldest = max(p.oldest, age)
		if age > 2*l.TTL/3 {
			p.stale.Add(staleLock{l.Key, age, now})
		}
	}
}

// run polls until stop is closed.
func (p *poller) run(ctx context.Context, stop <-chan struct{}) {
	for {
		start := time.Now()
		for a := 0; a < len(p.s.keys); a += pollChunk {
			select {
			case <-stop:
				return
			default:
			}
			p.chunk(ctx, a, min(a+pollChunk, len(p.s.keys)))
		}
		p.passes++
		p.look()
		select {
		case <-stop:
			return
		case <-time.After(time.Until(start.Add(pollEvery))):
		}
	}
}

// chunk reads the keys a to b-1 in one pipeline. A lock is judged only
// when it was held, the same lock, from before its read was sent until
// the answer was read; a read that failed judges nothing.
func (p *poller) chunk(ctx context.Context, a, b int) {
	type read struct {
		i     int
		lock  *redislock.Lock
		gen   uint64
		since time.Time
		cmd   *redis.StringCmd
	}
	reads := make([]read, 0, b-a)
	pipe := p.spy.Pipeline()
	for i := a; i < b; i++ {
		sl := &p.s.slots[i]
		sl.mu.Lock()
		l, gen, since := sl.lock, sl.gen, sl.since
		sl.mu.Unlock()
		if l != nil {
			reads = append(reads, read{i, l, gen, since, pipe.GetRange(ctx, p.s.keys[i], 0, int64(len(l.Token())-1))})
		}
	}
	if len(reads) == 0 {
		return
	}
	_, _ = pipe.Exec(ctx) // each command's error is looked at below
	for _, r := range reads {
		got, err := r.cmd.Result()
		if err != nil {
			continue
		}
		sl := &p.s.slots[r.i]
		sl.mu.Lock()
		same := sl.lock == r.lock && sl.gen == r.gen
		sl.mu.Unlock()
		if !same || got == r.lock.Token() || p.seen[r.lock] {
			continue
		}
		p.seen[r.lock] = true
		what := "gone"
		if got != "" {
			what = "holding another value"
		}
		p.misses.Add(fmt.Sprintf("%s %s, held for %v", p.s.keys[r.i], what, time.Since(r.since).Round(time.Millisecond)))
	}
}

// headrooms is an observer of the renewal pipelines: how many, and how
// much of its TTL the most urgent lock of each had left when it was sent.
type headrooms struct {
	pipelines, late atomic.Int64
	mu              sync.Mutex
	least           float64 // guarded by mu
}

var _ watchdog.Observer = (*headrooms)(nil)

func (h *headrooms) Renewed(_ string, _ int, headroom float64) {
	h.pipelines.Add(1)
	if headroom <= 1.0/3 {
		h.late.Add(1)
	}
	h.mu.Lock()
	h.least = math.Min(h.least, headroom)
	h.mu.Unlock()
}

func (*headrooms) RenewFailed(string, int, error) {}
func (*headrooms) Lost(registry.Lock, error)      {}
func (*headrooms) Swept(string, time.Duration)    {}

func (h *headrooms) leastNow() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.least
}
