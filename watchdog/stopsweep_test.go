package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// A sweep whose calls wait for Redis when Stop is called returns
// ErrStopped, even to a caller woken late, when the calls Stop's
// cancellation ended have ended the sweep too (CI run 78, the newest Go's
// -short suite beside two CPU burners: TestLifecycleStopWithSweepInFlight's
// Sweep returned "context canceled"; Sweep's select picks at random among
// the cases ready). The caller here looks 50 ms late, each round. Seen
// failing before the fix.
func TestStopEndsSweepInFlightWithErrStopped(t *testing.T) {
	const rounds = 20
	restore := watchdog.SetSweepWaitDelay(50 * time.Millisecond)
	defer restore()
	bad := 0
	var first error
	for range rounds {
		func() {
			e := newEnv(t)
			e.rdb.AddHook(hangKeys(""))
			wd := attach(t, e.reg, watchdog.WithSchedule("@every 1h"))
			for i := range 10 {
				e.obtain(t, fmt.Sprintf("k%02d", i), "me", time.Minute)
			}
			done := make(chan error, 1)
			go func() { done <- wd.Sweep(context.Background()) }()
			time.Sleep(10 * time.Millisecond) // its calls wait in the gate
			wd.Stop()
			if err := <-done; !errors.Is(err, watchdog.ErrStopped) {
				bad++
				if first == nil {
					first = err
				}
			}
			for i := range 10 {
				e.releaseQuiet(fmt.Sprintf("k%02d", i), "me")
			}
		}()
	}
	if bad > 0 {
		t.Errorf("a sweep in flight at Stop returned %v in %d of %d rounds, want ErrStopped", first, bad, rounds)
	}
}
