package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// answer is the innermost hook of the benchmark clients: it answers every
// command itself, so that a benchmark measures the client and the hooks
// without a network or a server. Scripts answer 1, which redislock reads as
// obtained and released.
type answer struct{}

func (answer) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook answers cmd where go-redis's connection code (its pool, the
// RESP writer and reader, the net.Conn) would send it, after taking the
// stack about as deep as that code does (connStack).
func (answer) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		connStack(connFrames)
		answerCmd(cmd)
		return nil
	}
}

// connFrames frames of connStack (some 150 bytes each) reach about as deep
// as go-redis's connection code below the hooks: some 1.5 KB, to about
// 2.6 KB from the top of the goroutine redsync starts for each acquire,
// where go-redis's own path reaches about 3 KB (read with a frame-pointer
// probe in a net.Conn's Read). That goroutine starts with a 2 KB stack;
// go-redis's connection code grows it to 4 KB, watched or not, and the
// registry's hook, which does its work after next returns, then finds room.
// An answer hook that ended the path shallow would leave the growth (about
// 1.5 µs here: the stack is copied) to the registry's frames, charging the
// hook with a cost a real client pays anyway. BenchmarkRedsyncLockWire
// takes go-redis's whole path and cross-checks this one.
const connFrames = 10

// connStack uses n frames of stack (n at most 10) and returns. Each frame
// calls the next from a call site of its own, so that the frames have
// distinct return addresses, as go-redis's own frames (distinct functions)
// do: the runtime's stack copy looks every frame up by its return address,
// through a small cache, and frames of one recursive call site would all
// hit it. With that shortcut the copy of an unwatched stack came out some
// 1,500 instructions cheaper than a real client's, and any hook's one
// extra frame (a hook that only calls next did the same) tipped the cache
// into missing: the benchmark charged the hook with a cost that the wire
// benchmark, on go-redis's real path, does not show.
//
//go:noinline
func connStack(n int) byte {
	var pad [112]byte
	pad[n%len(pad)] = byte(n)
	var b byte
	switch n { // alike on purpose: each case is a call site of its own
	case 0:
		return pad[0]
	case 1:
		b = connStack(0)
	case 2:
		b = connStack(1)
	case 3:
		b = connStack(2)
	case 4:
		b = connStack(3)
	case 5:
		b = connStack(4)
	case 6:
		b = connStack(5)
	case 7:
		b = connStack(6)
	case 8:
		b = connStack(7)
	case 9:
		b = connStack(8)
	case 10:
		b = connStack(9)
	}
	return b + pad[(n*7)%len(pad)]
}

// ProcessPipelineHook answers the watchdog's renewals: 1, renewed.
func (answer) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			answerCmd(cmd)
		}
		return nil
	}
}

func answerCmd(cmd redis.Cmder) {
	switch c := cmd.(type) {
	case *redis.StringCmd:
		c.SetVal("value")
	case *redis.StatusCmd:
		c.SetVal("OK")
	case *redis.BoolCmd:
		c.SetVal(true)
	case *redis.Cmd:
		c.SetVal(int64(1))
	}
}

// answeredClient returns a client that never dials, watched by a registry
// with both adapters when watched is true.
func answeredClient(b testing.TB, watched bool) (*redis.Client, *registry.Registry) {
	b.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	b.Cleanup(func() { _ = c.Close() })
	var reg *registry.Registry
	if watched {
		reg = registry.New(bsmredislock.New(), goredsync.New())
		if err := reg.Watch(c); err != nil {
			b.Fatal(err)
		}
	}
	c.AddHook(answer{})
	return c, reg
}

func watchedOrNot(b *testing.B, run func(b *testing.B, c *redis.Client)) {
	for _, watched := range []bool{false, true} {
		name := "unwatched"
		if watched {
			name = "watched"
		}
		b.Run(name, func(b *testing.B) {
			c, _ := answeredClient(b, watched)
			b.ReportAllocs()
			run(b, c)
		})
	}
}

// What watching a client adds to commands that are not lock commands: the
// difference between the watched and unwatched sub-benchmarks (the target
// is at most 50 ns and no allocation).
func BenchmarkClientGET(b *testing.B) {
	ctx := context.Background()
	watchedOrNot(b, func(b *testing.B, c *redis.Client) {
		for b.Loop() {
			_ = c.Get(ctx, "user:42")
		}
	})
}

func BenchmarkClientSET(b *testing.B) {
	ctx := context.Background()
	watchedOrNot(b, func(b *testing.B, c *redis.Client) {
		for b.Loop() {
			_ = c.Set(ctx, "user:42", "value", time.Minute)
		}
	})
}

// A redislock obtain and release through a client: what the registry adds
// to the lock path itself (classifying both commands, tracking and
// untracking the lock).
func BenchmarkRedislockObtainRelease(b *testing.B) {
	ctx := context.Background()
	watchedOrNot(b, func(b *testing.B, c *redis.Client) {
		lc := redislock.New(c)
		i := 0
		for b.Loop() {
			l, err := lc.Obtain(ctx, fmt.Sprint("job:", i%1024), time.Minute, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// The application's own SET key value PX n NX: a lock-shaped command that is
// no lock of a library lockwatch knows. Watching costs the check that
// redsync did not send it (the target is at most 300 ns and no allocation).
func BenchmarkClientSETNX(b *testing.B) {
	ctx := context.Background()
	watchedOrNot(b, func(b *testing.B, c *redis.Client) {
		for b.Loop() {
			_ = c.SetNX(ctx, "idempotency:42", "value", time.Minute)
		}
	})
}

// benchMutexes returns 1024 redsync mutexes over c, each on a key of its
// own, with a fixed value (no random source in the figures).
func benchMutexes(c *redis.Client) []*redsync.Mutex {
	rs := redsync.New(goredis.NewPool(c))
	mutexes := make([]*redsync.Mutex, 1024)
	for i := range mutexes {
		mutexes[i] = rs.NewMutex(fmt.Sprint("job:", i), redsync.WithGenValueFunc(func() (string, error) { return "token", nil }))
	}
	return mutexes
}

// redsync's acquire and release through a client watched or not: what the
// registry adds to the lock path (the target is at most 500 ns and no
// allocation for the acquire).
func BenchmarkRedsyncLockUnlock(b *testing.B) {
	ctx := context.Background()
	watchedOrNot(b, func(b *testing.B, c *redis.Client) {
		mutexes := benchMutexes(c)
		i := 0
		for b.Loop() {
			m := mutexes[i%len(mutexes)]
			if err := m.LockContext(ctx); err != nil {
				b.Fatal(err)
			}
			if _, err := m.UnlockContext(ctx); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// The application's own SET NX under a context with a deadline: the hook
// cannot rule redsync out from the context, and tells them apart by the
// call site, whose verdict it remembers.
func BenchmarkClientSETNXDeadline(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	watchedOrNot(b, func(b *testing.B, c *redis.Client) {
		for b.Loop() {
			_ = c.SetNX(ctx, "idempotency:42", "value", time.Minute)
		}
	})
}

// redsync's acquire alone (Mutex.Lock: one SET NX), unwatched, watched by a
// registry, and watched by a registry with a watchdog attached on its
// default schedule. redsync's default 8 s expiry cannot wait for the
// default 10 s tick, so every mutex takes the fast lane, as it does for a
// redsync user who keeps both defaults. The mutexes are unlocked a batch at
// a time with the timer stopped. The target is at most 500 ns more than
// unwatched.
func BenchmarkRedsyncLock(b *testing.B) { benchRedsyncLock(b, answeredClient) }

// BenchmarkRedsyncLockPaired is BenchmarkRedsyncLock with the three modes
// taking turns within one benchmark (benchRedsyncPaired): its registry-Δns
// and watchdog-Δns metrics are what the hook and the watchdog add to an
// acquire (the target is at most 500 ns), and they stay put while this
// shared machine's speed drifts under a run, which separate sub-benchmarks
// run one after another do not.
func BenchmarkRedsyncLockPaired(b *testing.B) { benchRedsyncPaired(b, answeredClient) }

// pairedBatch is how many acquires one mode makes in a turn.
const pairedBatch = 32

// benchRedsyncPaired runs redsync's acquire over clients made by newClient
// in the three redsyncModes, taking turns a batch at a time (the order
// rotating from one round to the next), and reports each mode's time per
// acquire (mode-ns) and the watched modes' differences from the unwatched
// one (Δns). Only the acquires are timed: the releases between rounds of
// each mode's mutexes count in ns/op, which covers everything, not in
// these metrics.
func benchRedsyncPaired(b *testing.B, newClient func(testing.TB, bool) (*redis.Client, *registry.Registry)) {
	ctx := context.Background()
	type turn struct {
		mutexes []*redsync.Mutex
		next    int
		spent   time.Duration
		n       int
	}
	turns := make([]*turn, len(redsyncModes))
	for i, mode := range redsyncModes {
		c, _ := clientFor(b, newClient, mode)
		turns[i] = &turn{mutexes: benchMutexes(c)}
	}
	round := 0
	for b.Loop() {
		for k := range turns {
			t := turns[(k+round)%len(turns)]
			start := time.Now()
			for range pairedBatch {
				if err := t.mutexes[t.next].LockContext(ctx); err != nil {
					b.Fatal(err)
				}
				t.next++
			}
			t.spent += time.Since(start)
			t.n += pairedBatch
			if t.next == len(t.mutexes) {
				for _, m := range t.mutexes {
					_, _ = m.UnlockContext(ctx)
				}
				t.next = 0
			}
		}
		round++
	}
	for _, t := range turns {
		for _, m := range t.mutexes[:t.next] {
			_, _ = m.UnlockContext(ctx)
		}
	}
	perAcquire := func(t *turn) float64 { return float64(t.spent.Nanoseconds()) / float64(max(t.n, 1)) }
	for i, mode := range redsyncModes {
		b.ReportMetric(perAcquire(turns[i]), mode+"-ns")
	}
	b.ReportMetric(perAcquire(turns[1])-perAcquire(turns[0]), "registry-Δns")
	b.ReportMetric(perAcquire(turns[2])-perAcquire(turns[0]), "watchdog-Δns")
}

// redsyncModes are the ways the redsync benchmarks run: the client
// unwatched, watched by a registry, and watched with a watchdog attached
// on its defaults.
var redsyncModes = []string{"unwatched", "watched", "watched+watchdog"}

// clientFor returns a client made by newClient for mode, one of
// redsyncModes, with a watchdog attached for "watched+watchdog", and its
// registry (nil unwatched).
func clientFor(tb testing.TB, newClient func(testing.TB, bool) (*redis.Client, *registry.Registry), mode string) (*redis.Client, *registry.Registry) {
	tb.Helper()
	c, reg := newClient(tb, mode != "unwatched")
	if mode == "watched+watchdog" {
		w, err := watchdog.Attach(reg)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(w.Stop)
	}
	return c, reg
}

// benchRedsyncLock runs redsync's acquire in the three modes over clients
// made by newClient.
func benchRedsyncLock(b *testing.B, newClient func(testing.TB, bool) (*redis.Client, *registry.Registry)) {
	ctx := context.Background()
	for _, mode := range redsyncModes {
		b.Run(mode, func(b *testing.B) {
			c, _ := clientFor(b, newClient, mode)
			b.ReportAllocs()
			mutexes := benchMutexes(c)
			i := 0
			for b.Loop() {
				if err := mutexes[i].LockContext(ctx); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(mutexes) {
					b.StopTimer()
					for _, m := range mutexes {
						_, _ = m.UnlockContext(ctx)
					}
					i = 0
					b.StartTimer()
				}
			}
			for _, m := range mutexes[:i] {
				_, _ = m.UnlockContext(ctx)
			}
		})
	}
}
