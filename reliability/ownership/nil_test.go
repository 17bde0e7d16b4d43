package ownership_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/watchdog"
)

// TestNilWatchdog: an application that failed to Attach (or never did)
// and calls the watchdog anyway, as `defer wd.Stop()` after an ignored
// error does, must get errors, not panics:
//
//   - wd.Stop() returns;
//   - wd.Sweep(ctx) returns an error matching ErrNilWatchdog;
//   - wd.Context(ctx, "k") returns a context already cancelled, with a
//     cause matching ErrNilWatchdog, and a cancel func that can be called;
//   - wd.Stats() returns the zero Stats.
//
// A panic is recovered and fails the case. It needs no server.
func TestNilWatchdog(t *testing.T) {
	var wd *watchdog.Watchdog
	for _, c := range []struct {
		name string
		call func(t *testing.T)
	}{
		{"Stop", func(t *testing.T) {
			// On a goroutine of its own, so that a hang fails the case; a
			// panic there is recovered there.
			var p any
			if !harness.Within(time.Second, func() {
				defer func() { p = recover() }()
				wd.Stop()
			}) {
				t.Fatalf("(*Watchdog)(nil).Stop() did not return within 1s, want it to return")
			}
			if p != nil {
				t.Errorf("(*Watchdog)(nil).Stop panicked: %v, want no panic", p)
			}
		}},
		{"Sweep", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := wd.Sweep(ctx); !errors.Is(err, watchdog.ErrNilWatchdog) {
				t.Errorf("(*Watchdog)(nil).Sweep(ctx) = %v, want an error matching ErrNilWatchdog", err)
			}
		}},
		{"Context", func(t *testing.T) {
			ctx, cancel := wd.Context(context.Background(), "k")
			if ctx == nil || cancel == nil {
				t.Fatalf("(*Watchdog)(nil).Context(ctx, %q) = %v, %v, want a context and a cancel func", "k", ctx, cancel)
			}
			defer cancel()
			select {
			case <-ctx.Done():
			default:
				t.Fatalf("(*Watchdog)(nil).Context(ctx, %q): the context is not done, want it cancelled at once", "k")
			}
			if cause := context.Cause(ctx); !errors.Is(cause, watchdog.ErrNilWatchdog) {
				t.Errorf("context.Cause((*Watchdog)(nil).Context(ctx, %q)) = %v, want a cause matching ErrNilWatchdog", "k", cause)
			}
		}},
		{"Stats", func(t *testing.T) {
			if s := wd.Stats(); !reflect.DeepEqual(s, watchdog.Stats{}) {
				t.Errorf("(*Watchdog)(nil).Stats() = %+v, want the zero Stats", s)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("(*Watchdog)(nil).%s panicked: %v, want no panic", c.name, p)
				}
			}()
			c.call(t)
		})
	}
}
