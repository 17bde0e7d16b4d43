package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// The memory case measures what lockwatch adds to a process's memory as a
// user sees it: two processes side by side, one with a plain client and
// one with the client watched and a watchdog attached on a short schedule,
// each obtaining the same number of redislock locks through its client
// from memoryWorkers goroutines and keeping the *redislock.Lock values, as
// an application does; then releasing them all.
const (
	// memoryWorkers is how many goroutines obtain and release the locks.
	memoryWorkers = 32
	// memoryKeyLen is the length of the memory case's keys ("mw:0000000042").
	memoryKeyLen = 13
	// memoryObtainTicks is the least number of schedule periods the
	// obtaining spans (it is paced when Redis answers faster), so that
	// sweeps run while the table grows, at every size.
	memoryObtainTicks = 3
	// memoryHeldTicks is the least number of periods waited once the
	// locks are obtained, and memorySweeps the least number of the watched
	// process's sweeps that must have finished in that time (and again
	// after the release, with memoryReleasedTicks periods).
	memoryHeldTicks     = 3
	memoryReleasedTicks = 2
	memorySweeps        = 2
)

// defaultMemoryEvery is the watched process's schedule period unless
// -memory-every sets memoryEvery: the outside measurement's.
const defaultMemoryEvery = time.Second

var memoryEvery = defaultMemoryEvery

// memoryResult is one size of the -json "memory" list. Memory is the heap
// in use plus goroutine stacks (runtime.MemStats HeapInuse + StackInuse)
// after two forced GCs, each process's figure taken against its own
// before the locks were obtained.
type memoryResult struct {
	Locks      int    `json:"locks"`
	Goroutines int    `json:"goroutines"`
	Schedule   string `json:"schedule"`
	// KeyValueBytes is the average len(key)+len(value) of the locks.
	KeyValueBytes float64 `json:"key_value_bytes"`
	// WatchedBytesPerLock and UnwatchedBytesPerLock are each process's
	// growth per lock while holding them (the application's Lock values
	// included).
	WatchedBytesPerLock   float64 `json:"watched_bytes_per_lock"`
	UnwatchedBytesPerLock float64 `json:"unwatched_bytes_per_lock"`
	// BytesPerLock is watched minus unwatched: what lockwatch adds per
	// held lock; BeyondKeyValue is that minus KeyValueBytes.
	BytesPerLock   float64 `json:"bytes_per_lock"`
	BeyondKeyValue float64 `json:"bytes_per_lock_beyond_key_value"`
	// AfterReleaseMB is what stays once every lock was released and a few
	// sweeps ran, watched minus unwatched, in MB (2^20 bytes); the
	// Watched and Unwatched figures are each process's own.
	AfterReleaseMB          float64 `json:"after_release_mb"`
	WatchedAfterReleaseMB   float64 `json:"watched_after_release_mb"`
	UnwatchedAfterReleaseMB float64 `json:"unwatched_after_release_mb"`
	// RightAfterReleaseMB is the same, watched minus unwatched, taken as
	// soon as the last release answered, before any further sweep (the
	// watchdog's lanes forget released locks lazily).
	RightAfterReleaseMB float64 `json:"right_after_release_mb"`
	// Sweeps of the watched process: finished while the locks were being
	// obtained, then before the held figure was taken, then after the
	// release before the released figure was taken.
	SweepsWhileObtaining int64 `json:"sweeps_while_obtaining"`
	SweepsWhileHeld      int64 `json:"sweeps_while_held"`
	SweepsAfterRelease   int64 `json:"sweeps_after_release"`
	// TrackedAfterRelease is the registry's count once all were released.
	TrackedAfterRelease int `json:"tracked_after_release"`
	// ObtainMS and UnwatchedObtainMS are how long obtaining every lock
	// took in each process (both on the same server, at the same time).
	ObtainMS           float64 `json:"obtain_ms"`
	UnwatchedObtainMS  float64 `json:"unwatched_obtain_ms"`
	WatchedPeakRSSMB   float64 `json:"watched_peak_rss_mb"`
	UnwatchedPeakRSSMB float64 `json:"unwatched_peak_rss_mb"`
}

// memoryChild is one process's answer.
type memoryChild struct {
	Watched bool `json:"watched"`
	// Before, Held and Released are HeapInuse+StackInuse after two GCs:
	// before obtaining, while holding every lock, after releasing them.
	Before   int64 `json:"before"`
	Held     int64 `json:"held"`
	Released int64 `json:"released"`
	// ReleasedNow is taken as soon as the last release answered.
	ReleasedNow int64   `json:"released_now"`
	KV          int64   `json:"kv"`
	ObtainNS    int64   `json:"obtain_ns"`
	PeakRSS     float64 `json:"peak_rss_mb"`
	// Of the watched process only.
	SweepsObtaining int64 `json:"sweeps_obtaining"`
	SweepsHeld      int64 `json:"sweeps_held"`
	SweepsReleased  int64 `json:"sweeps_released"`
	RenewedHeld     int64 `json:"renewed_held"`
	Tracked         int   `json:"tracked"`
}

// heapInUse is the heap in use plus goroutine stacks after two full GCs.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}

// marginal is lockwatch's growth per lock between two sizes, and what
// remains of the smaller size's figure beyond that growth (bytes).
func marginal(lo, hi memoryResult) (perLock, fixed float64) {
	l, h := lo.BytesPerLock*float64(lo.Locks), hi.BytesPerLock*float64(hi.Locks)
	perLock = (h - l) / float64(hi.Locks-lo.Locks)
	return perLock, l - perLock*float64(lo.Locks)
}

// memoryKey names the i-th lock of the memory case: memoryKeyLen bytes.
func memoryKey(prefix string, i int) string { return fmt.Sprintf("%s:%010d", prefix, i) }

// measureMemory runs the unwatched and the watched process side by side
// at n locks.
func measureMemory(ctx context.Context, addr string, n int) (memoryResult, error) {
	var (
		kids [2]memoryChild
		errs [2]error
		wg   sync.WaitGroup
	)
	for i, mode := range []string{"memory-unwatched", "memory-watched"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = spawnJSON(ctx, []string{"-child", mode, "-n", strconv.Itoa(n), "-redis", addr,
				"-memory-every", memoryEvery.String()}, &kids[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return memoryResult{}, err
	}
	u, w := kids[0], kids[1]
	const mb = 1 << 20
	r := memoryResult{
		Locks:                   n,
		Goroutines:              memoryWorkers,
		Schedule:                "@every " + memoryEvery.String(),
		KeyValueBytes:           float64(w.KV) / float64(n),
		WatchedBytesPerLock:     float64(w.Held-w.Before) / float64(n),
		UnwatchedBytesPerLock:   float64(u.Held-u.Before) / float64(n),
		WatchedAfterReleaseMB:   float64(w.Released-w.Before) / mb,
		UnwatchedAfterReleaseMB: float64(u.Released-u.Before) / mb,
		SweepsWhileObtaining:    w.SweepsObtaining,
		SweepsWhileHeld:         w.SweepsHeld,
		SweepsAfterRelease:      w.SweepsReleased,
		TrackedAfterRelease:     w.Tracked,
		ObtainMS:                ms(time.Duration(w.ObtainNS)),
		UnwatchedObtainMS:       ms(time.Duration(u.ObtainNS)),
		WatchedPeakRSSMB:        w.PeakRSS,
		UnwatchedPeakRSSMB:      u.PeakRSS,
	}
	r.BytesPerLock = r.WatchedBytesPerLock - r.UnwatchedBytesPerLock
	r.BeyondKeyValue = r.BytesPerLock - r.KeyValueBytes
	r.AfterReleaseMB = r.WatchedAfterReleaseMB - r.UnwatchedAfterReleaseMB
	r.RightAfterReleaseMB = float64((w.ReleasedNow-w.Before)-(u.ReleasedNow-u.Before)) / mb
	return r, nil
}

// runMemory is one memory process: see the memory case above.
func runMemory(ctx context.Context, addr string, n int, watched bool) (memoryChild, error) {
	out := memoryChild{Watched: watched}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	p := &memoryProc{n: n, watched: watched, prefix: "mu", stats: func() watchdog.Stats { return watchdog.Stats{} }}
	if watched {
		p.prefix = "mw"
		p.reg = registry.New(bsmredislock.New())
		if err := p.reg.Watch(rdb); err != nil {
			return out, err
		}
		wd, err := watchdog.Attach(p.reg, watchdog.WithSchedule("@every "+memoryEvery.String()))
		if err != nil {
			return out, err
		}
		defer wd.Stop()
		p.stats = wd.Stats
	}
	if err := warm(ctx, rdb, memoryWorkers); err != nil {
		return out, err
	}
	p.lc = redislock.New(rdb)
	out.Before = heapInUse()

	locks, s1, err := p.obtain(ctx, &out)
	if err != nil {
		return out, err
	}
	if err := p.hold(ctx, &out, locks, s1); err != nil {
		return out, err
	}
	if err := p.release(ctx, &out, locks); err != nil {
		return out, err
	}
	out.PeakRSS = peakRSSMB()
	return out, nil
}

// memoryProc is one memory process: its client's locks, watched by reg
// or not.
type memoryProc struct {
	n       int
	watched bool
	prefix  string
	lc      *redislock.Client
	reg     *registry.Registry // nil unwatched
	// stats are the watchdog's, zero unwatched.
	stats func() watchdog.Stats
}

// obtain obtains the locks, paced so that it spans at least
// memoryObtainTicks periods, and returns them and the watchdog's stats
// once they were obtained.
func (p *memoryProc) obtain(ctx context.Context, out *memoryChild) ([]*redislock.Lock, watchdog.Stats, error) {
	n := p.n
	locks := make([]*redislock.Lock, n)
	span := memoryObtainTicks * memoryEvery
	s0 := p.stats()
	start := time.Now()
	var kv atomic.Int64
	err := forEach(n, func(i int) error {
		if d := time.Until(start.Add(span * time.Duration(i) / time.Duration(n))); d > 0 {
			time.Sleep(d)
		}
		l, err := p.lc.Obtain(ctx, memoryKey(p.prefix, i), lockTTL, nil)
		if err != nil {
			return fmt.Errorf("obtain %s: %w", memoryKey(p.prefix, i), err)
		}
		kv.Add(int64(len(l.Key()) + len(l.Token()) + len(l.Metadata())))
		locks[i] = l
		return nil
	})
	if err != nil {
		return nil, watchdog.Stats{}, err
	}
	out.ObtainNS = int64(time.Since(start))
	out.KV = kv.Load()
	s1 := p.stats()
	out.SweepsObtaining = s1.Sweeps - s0.Sweeps
	if p.watched {
		if got := p.reg.Len(); got != n {
			return nil, s1, fmt.Errorf("registry tracks %d locks, want %d", got, n)
		}
	}
	return locks, s1, nil
}

// hold holds the locks while sweeps renew every one at least once more
// since s1, and takes the held figure between two sweeps.
func (p *memoryProc) hold(ctx context.Context, out *memoryChild, locks []*redislock.Lock, s1 watchdog.Stats) error {
	if err := settle(ctx, p.stats, s1, memoryHeldTicks, int64(p.n), p.watched); err != nil {
		return fmt.Errorf("holding %d locks: %w", p.n, err)
	}
	if err := betweenSweeps(ctx, p.stats, p.watched); err != nil {
		return err
	}
	s2 := p.stats()
	out.SweepsHeld, out.RenewedHeld = s2.Sweeps-s1.Sweeps, s2.Renewals-s1.Renewals
	out.Held = heapInUse()
	runtime.KeepAlive(locks)
	return nil
}

// release releases every lock through the client, then forgets them,
// and takes the released figures: right away, then once sweeps ran.
func (p *memoryProc) release(ctx context.Context, out *memoryChild, locks []*redislock.Lock) error {
	err := forEach(p.n, func(i int) error {
		if err := locks[i].Release(ctx); err != nil {
			return fmt.Errorf("release %s: %w", locks[i].Key(), err)
		}
		locks[i] = nil
		return nil
	})
	if err != nil {
		return err
	}
	locks = nil
	s3 := p.stats()
	out.ReleasedNow = heapInUse()
	if err := settle(ctx, p.stats, s3, memoryReleasedTicks, 0, p.watched); err != nil {
		return fmt.Errorf("after releasing %d locks: %w", p.n, err)
	}
	if err := betweenSweeps(ctx, p.stats, p.watched); err != nil {
		return err
	}
	out.SweepsReleased = p.stats().Sweeps - s3.Sweeps
	out.Released = heapInUse()
	if p.watched {
		out.Tracked = p.reg.Len()
	}
	return nil
}

// forEach calls f for 0..n-1 from memoryWorkers goroutines and returns the
// first errors (each goroutine stops at its first).
func forEach(n int, f func(int) error) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range memoryWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// settle waits ticks schedule periods; in the watched process, also until
// memorySweeps sweeps finished since from and, when renewed is positive,
// until that many renewals were made since from.
func settle(ctx context.Context, stats func() watchdog.Stats, from watchdog.Stats, ticks int, renewed int64, watched bool) error {
	t := time.NewTimer(time.Duration(ticks) * memoryEvery)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !watched {
		return nil
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s := stats()
		if s.Ticks-from.Ticks >= int64(ticks) && s.Sweeps-from.Sweeps >= memorySweeps && s.Renewals-from.Renewals >= renewed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 2 min: %d ticks, %d sweeps and %d renewals since, want %d, %d and %d",
				s.Ticks-from.Ticks, s.Sweeps-from.Sweeps, s.Renewals-from.Renewals, ticks, memorySweeps, renewed)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// betweenSweeps waits until half a period after the next sweep ends, so
// that the heap is read between two sweeps, as an application that reads
// its memory at a random moment mostly does (settle ends on a tick, with a
// sweep in flight; its pipelines, some hundred kilobytes, are let go of
// when it ends on an endpoint with few locks). The unwatched process waits
// as long.
func betweenSweeps(ctx context.Context, stats func() watchdog.Stats, watched bool) error {
	if watched {
		from := stats().Sweeps
		deadline := time.Now().Add(2 * time.Minute)
		for stats().Sweeps == from {
			if time.Now().After(deadline) {
				return fmt.Errorf("no sweep ended within 2 min")
			}
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-time.After(memoryEvery / 2):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func printMemory(w io.Writer, rs []memoryResult) {
	if len(rs) == 0 {
		return
	}
	r0 := rs[0]
	fmt.Fprintf(w, "\nmemory: redislock locks obtained by %d goroutines through a client, keys of %d bytes, redislock's %.0f-byte token, *redislock.Lock values kept;\n",
		r0.Goroutines, memoryKeyLen, r0.KeyValueBytes-memoryKeyLen)
	fmt.Fprintf(w, "  two processes side by side, the client unwatched in one, watched with a watchdog on %q in the other (sweeps run while the locks are obtained,\n", r0.Schedule)
	fmt.Fprintf(w, "  over at least %d periods, and while they are held); heap in use + stacks after two GCs, read half a period after a sweep ended, each against its own before obtaining\n", memoryObtainTicks)
	tw := newTable(w)
	fmt.Fprintln(tw, "locks\tobtain s unwatched/watched\tsweeps obtaining/held\tunwatched B/lock\twatched B/lock\tlockwatch B/lock\tbeyond key+value\tafter release MB: unwatched\twatched\tlockwatch\tlockwatch right after\ttracked after\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t%.1f/%.1f\t%d/%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t\n",
			r.Locks, r.UnwatchedObtainMS/1000, r.ObtainMS/1000, r.SweepsWhileObtaining, r.SweepsWhileHeld,
			r.UnwatchedBytesPerLock, r.WatchedBytesPerLock, r.BytesPerLock, r.BeyondKeyValue,
			r.UnwatchedAfterReleaseMB, r.WatchedAfterReleaseMB, r.AfterReleaseMB, r.RightAfterReleaseMB, r.TrackedAfterRelease)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  lockwatch B/lock = watched minus unwatched; beyond key+value subtracts the key and value bytes; after release: what stays once every lock was released and sweeps ran (right after: before any sweep), in MB (2^20 bytes)")
	if lo, hi := rs[0], rs[len(rs)-1]; hi.Locks > lo.Locks {
		per, fixed := marginal(lo, hi)
		fmt.Fprintf(w, "  from %d to %d locks: %.0f B more per added lock (%.0f beyond key+value); the rest, %.2f MB, does not grow with the locks\n",
			lo.Locks, hi.Locks, per, per-hi.KeyValueBytes, fixed/(1<<20))
	}
}
