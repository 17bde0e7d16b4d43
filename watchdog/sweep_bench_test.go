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
	return func(_ context.Context, cmd redis.Cmder) error {
		answerRenewed(cmd)
		return nil
	}
}

func (renewedAnswer) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			answerRenewed(cmd)
		}
		return nil
	}
}

// answerRenewed answers cmd, a renew call (one call goes as a command of
// its own, several as a pipeline), with all its locks renewed.
func answerRenewed(cmd redis.Cmder) {
	if c, ok := cmd.(*redis.Cmd); ok {
		c.SetVal(int64(renewCallLocks(c.Args())))
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
func answeredTable(b testing.TB) (*registry.Registry, *table.Table) {
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
// Locks of an hour on "@every 10s" are the tick's to renew, none the fast
// lane's (on "@every 1h", as this benchmark had it until 2026-11-30, every
// one of them was: a Sweep call then also moves each in the fast lane's
// wait heap, about 128 bytes a lock).
func BenchmarkSweep1M(b *testing.B) { benchmarkSweep(b, 1_000_000) }

// The sweep benchmark runs: its client's answers keep up with how the
// watchdog sends (CI does not run benchmarks, and from 2026-11-25 to
// 2026-11-30 BenchmarkSweep1M failed at once: one renew call goes as a
// command of its own, which the answering hook left unanswered).
func TestSweepBenchmarkRuns(t *testing.T) {
	r := testing.Benchmark(func(b *testing.B) { benchmarkSweep(b, 2_000) })
	if r.N == 0 {
		t.Fatal("the sweep benchmark failed (testing.Benchmark gives no result for a benchmark that fails; run it with go test -bench BenchmarkSweep1M to see why)")
	}
}

func benchmarkSweep(b *testing.B, n int) {
	reg, t := answeredTable(b)
	now := time.Now()
	for i := range n {
		t.Apply(table.Change{Op: table.OpObtain, Key: fmt.Sprintf("bench:%07d", i), Value: "token-of-22-characters", TTL: time.Hour}, now)
	}
	w, err := Attach(reg, WithSchedule("@every 10s"))
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
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/sweeps/float64(n), "garbage-B/lock")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/sweeps/float64(n), "ns/lock")
	if got := w.Stats().Renewals; got < int64(n)*int64(b.N) {
		b.Fatalf("renewals = %d, want at least %d", got, n*b.N)
	}
}
