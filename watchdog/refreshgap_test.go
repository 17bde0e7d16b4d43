package watchdog_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// refreshOnRenewed refreshes a lock to a shorter TTL from inside the
// first Renewed it sees: on the goroutine that settles a renewal, after
// the renewal's answer is applied and before the settled locks get their
// next slot in the schedule. The holder's refresh waits only for the
// renewal to be in flight no more, so it can land there.
type refreshOnRenewed struct {
	once    sync.Once
	refresh func() error
	done    chan error // the refresh's result, once
}

func (o *refreshOnRenewed) Renewed(string, int, float64) {
	o.once.Do(func() { o.done <- o.refresh() })
}
func (*refreshOnRenewed) RenewFailed(string, int, error) {}
func (*refreshOnRenewed) Lost(registry.Lock, error)      {}
func (*refreshOnRenewed) Swept(string, time.Duration)    {}

// A holder's refresh to a shorter TTL that lands between a renewal's
// answer and the scheduling of its next renewal must still be renewed by
// its new TTL: the next slot is computed from the lock as it is when it
// is scheduled, not as it was when the answer came. CI (stop 39: 3 s
// locks refreshed to 300 ms while renewed, under "@every 10s") lost one
// lock of 300 so: its next renewal came a third of the old TTL after the
// refresh, 700 ms after the new one had run out.
func TestRefreshBetweenAnswerAndNextSlot(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		var losses lossLog
		const short = 300 * time.Millisecond
		obs := &refreshOnRenewed{done: make(chan error, 1), refresh: func() error {
			return e.rdb.Eval(context.Background(), refreshScript, []string{"job"}, "me", short.Milliseconds()).Err()
		}}
		wd := attach(t, e.reg, watchdog.WithSchedule("@every 10s"), watchdog.WithMaxHold(0), watchdog.WithOnLost(losses.onLost))
		defer wd.AddObserver(obs)()
		e.obtain(t, "job", "me", 3*time.Second)
		lowest := time.Hour
		for range 40 { // 4 s: past the first renewal (about 1 s in) and three of the new TTL after it
			time.Sleep(100 * time.Millisecond)
			lowest = min(lowest, e.pttl("job"))
		}
		select {
		case err := <-obs.done:
			if err != nil {
				t.Fatalf("the holder's refresh to %v: %v", short, err)
			}
		default:
			t.Fatalf("no renewal was observed in 4 s; stats %+v", wd.Stats())
		}
		keys, errs := losses.get()
		if lowest < short/3 || len(keys) > 0 {
			t.Errorf("refreshed from 3s to %v as its renewal settled: lowest PTTL %v (want >= %v; a key gone reads -2ns), losses %v %v; stats %+v",
				short, lowest, short/3, keys, errs, wd.Stats())
		}
		e.release(t, "job", "me")
		wd.Stop()
	})
}
