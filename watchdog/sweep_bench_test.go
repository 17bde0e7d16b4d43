package watchdog

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/scripts"
	"github.com/lockwatch/lockwatch/internal/table"
	"github.com/lockwatch/lockwatch/registry"
)

// renewedAnswer is the innermost hook of a client that answers every renew
// call itself, all its locks renewed: a sweep is measured without a
// server.
type renewedAnswer struct{}

func (renewedAnswer) DialHook(next redis.DialHook) redis.DialHook { return next }
func (renewedAnswer) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(context.Context, redis.Cmder) error { return nil }
}

func (renewedAnswer) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if c, ok := cmd.(*redis.Cmd); ok {
				c.SetVal(int64(renewCallLocks(c.Args())))
			}
		}
		return nil
	}
}

// renewCallLocks counts the locks of one renew call from its arguments.
func renewCallLocks(args []any) int {
	keys, _ := args[2].(int)
	if mode, _ := args[3+keys].(string); mode == scripts.ModeMulti {
		return (len(args) - 4 - keys) / 3
	}
	return keys
}

// answeredTable returns a registry watching a client that answers its
// renew calls itself (renewedAnswer), and the client's table; the client is
// closed when b ends.
func answeredTable(b *testing.B) (*registry.Registry, *table.Table) {
	b.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	b.Cleanup(func() { _ = c.Close() })
	reg := registry.New(nxAdapter{})
	if err := reg.Watch(c); err != nil {
		b.Fatal(err)
	}
	c.AddHook(renewedAnswer{})
	return reg, table.SetOf(reg).Tables()[0]
}

// BenchmarkSweep1M sweeps a million tracked locks through a client that
// answers itself: the watchdog's own cost, without a server. garbage-B/lock
// is what a sweep allocates per lock (the target is at most 16 bytes).
func BenchmarkSweep1M(b *testing.B) {
	const n = 1_000_000
	reg, t := answeredTable(b)
	now := time.Now()
	for i := range n {
		t.Apply(table.Change{Op: table.OpObtain, Key: fmt.Sprintf("bench:%07d", i), Value: "token-of-22-characters", TTL: time.Hour}, now)
	}
	w, err := Attach(reg, WithSchedule("@every 1h"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	ctx := context.Background()
	if err := w.Sweep(ctx); err != nil { // warm: pipelines and buffers made
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for range b.N {
		if err := w.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	sweeps := float64(b.N)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/sweeps/n, "garbage-B/lock")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/sweeps/n, "ns/lock")
	if got := w.Stats().Renewals; got < int64(n)*int64(b.N) {
		b.Fatalf("renewals = %d, want at least %d", got, n*b.N)
	}
}
