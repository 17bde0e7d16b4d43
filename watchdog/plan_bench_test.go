package watchdog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/registry"
)

// okHook answers every command itself: SET NX succeeds. The benchmark's
// client never dials.
type okHook struct{}

func (okHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (okHook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		if c, ok := cmd.(*redis.BoolCmd); ok {
			c.SetVal(true)
		}
		return nil
	}
}
func (okHook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(context.Context, []redis.Cmder) error { return nil }
}

// BenchmarkPlanSweep1M plans one sweep of a million tracked locks, batch by
// batch as a tick does, and builds every renew command, without I/O: what a
// tick costs the client before and besides the network. ns/lock is per
// tracked lock.
func BenchmarkPlanSweep1M(b *testing.B) {
	const n = 1_000_000
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	reg := registry.New(nxAdapter{})
	if err := reg.Watch(c); err != nil {
		b.Fatal(err)
	}
	c.AddHook(okHook{})
	ctx := context.Background()
	for i := range n {
		c.SetNX(ctx, fmt.Sprintf("bench:lock:%07d", i), "0123456789abcdefghijkl", time.Hour)
	}
	if got := reg.Len(); got != n {
		b.Fatalf("tracked %d locks, want %d", got, n)
	}
	w := &Watchdog{reg: reg, o: defaultOptions()} // tests planning without I/O
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		planned := 0
		w.reg.PlanBatches(c, time.Time{}, nil, sweepBatch, func(refs, held []registry.Ref) bool {
			groupByTTL(refs)
			planned += len(refs) + len(held)
			ends := chunkEnds(refs, w.o.chunkSize, false)
			start := 0
			for _, end := range ends {
				if args := renewCommand(refs[start:end]); len(args) != 3+2*(end-start)+1 {
					b.Fatalf("renew command has %d arguments for %d keys", len(args), end-start)
				}
				start = end
			}
			return true
		})
		if planned != n {
			b.Fatalf("planned %d locks, want %d", planned, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/lock")
}
