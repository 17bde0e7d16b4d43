package watchdog

import (
	"context"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// BenchmarkContextErr asks a context whether the job may still act, as a
// job does before each step: a plain cancellable context, and the one
// Context returns for a tracked lock of 8 s confirmed just now (its tell
// time not reached, so an ask costs a clock read besides the plain one).
func BenchmarkContextErr(b *testing.B) {
	b.Run("context.WithCancelCause", func(b *testing.B) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		b.ReportAllocs()
		for b.Loop() {
			if ctx.Err() != nil {
				b.Fatal("cancelled")
			}
		}
	})
	b.Run("watchdog.Context", func(b *testing.B) {
		w := trackedJob(b)
		defer w.Stop()
		ctx, cancel := w.Context(context.Background(), "job")
		defer cancel()
		b.ReportAllocs()
		for b.Loop() {
			if ctx.Err() != nil {
				b.Fatalf("cancelled: %v", context.Cause(ctx))
			}
		}
	})
}

// BenchmarkContextNew makes and ends the context of one job, as a job
// that asks for its lock's context does once: a plain cancellable
// context, and the one Context returns for a tracked lock of 8 s
// confirmed just now (its registration, and the timer that tells a job
// waiting on Done alone at the lock's tell time).
func BenchmarkContextNew(b *testing.B) {
	b.Run("context.WithCancelCause", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, cancel := context.WithCancelCause(context.Background())
			cancel(nil)
		}
	})
	b.Run("watchdog.Context", func(b *testing.B) {
		w := trackedJob(b)
		defer w.Stop()
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := w.Context(context.Background(), "job")
			if ctx.Err() != nil {
				b.Fatalf("cancelled: %v", context.Cause(ctx))
			}
			cancel()
		}
	})
}

// trackedJob attaches a watchdog to a table that tracks one lock of 8 s,
// "job", confirmed just now.
func trackedJob(b *testing.B) *Watchdog {
	reg, t := answeredTable(b)
	w, err := Attach(reg)
	if err != nil {
		b.Fatal(err)
	}
	if _, tracked := t.ApplyNow(&table.Change{Op: table.OpObtain, Key: "job", Value: "token", TTL: 8 * time.Second}); !tracked {
		w.Stop()
		b.Fatal("obtain not tracked")
	}
	return w
}
