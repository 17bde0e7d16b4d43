package watchdog_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	renewed  int
	minHead  float64
	failed   int
	lost     []string
	reasons  []error
	swept    int
	endpoint string
}

func (r *recorder) Renewed(endpoint string, n int, headroom float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renewed += n
	if r.minHead == 0 || headroom < r.minHead {
		r.minHead = headroom
	}
	r.endpoint = endpoint
}

func (r *recorder) RenewFailed(endpoint string, calls int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed += calls
}

func (r *recorder) Lost(l registry.Lock, reason error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = append(r.lost, l.Key)
	r.reasons = append(r.reasons, reason)
}

func (r *recorder) Swept(endpoint string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.swept++
}

func TestObserver(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		wd := attach(t, e.reg, watchdog.WithSchedule("@every 1s"))
		var rec recorder
		remove := wd.AddObserver(&rec)
		wd.AddObserver(nil)()
		e.obtain(t, "a", "me", 3*time.Second)
		e.obtain(t, "b", "me", 3*time.Second)
		time.Sleep(2500 * time.Millisecond)
		e.observer.Del(context.Background(), "b")
		time.Sleep(2 * time.Second) // a renewal finds it gone: one a 5/12 of its TTL at least
		e.m.SetError("LOADING Redis is loading the dataset in memory")
		time.Sleep(3500 * time.Millisecond)
		e.m.SetError("")
		rec.mu.Lock()
		if rec.renewed < 2 || rec.minHead <= 0 || rec.minHead > 1 || rec.endpoint == "" {
			t.Errorf("Renewed: %d locks, least headroom %v, endpoint %q; want renewals with a headroom in (0, 1]", rec.renewed, rec.minHead, rec.endpoint)
		}
		if rec.swept < 3 {
			t.Errorf("Swept %d times in 8s under @every 1s, want at least 3", rec.swept)
		}
		if rec.failed == 0 {
			t.Error("RenewFailed never called while Redis answered LOADING")
		}
		if len(rec.lost) != 2 || rec.lost[0] != "b" || !errors.Is(rec.reasons[0], watchdog.ErrLockGone) ||
			rec.lost[1] != "a" || !errors.Is(rec.reasons[1], watchdog.ErrUnreachable) {
			t.Errorf("Lost = %v %v, want b (gone) then a (unreachable)", rec.lost, rec.reasons)
		}
		rec.mu.Unlock()
		st := wd.Stats()
		if st.Losses != (watchdog.Losses{Gone: 1, Unreachable: 1}) || st.RenewErrors == 0 || st.Tracked != 0 {
			t.Errorf("Stats() = %+v, want one gone, one unreachable, renew errors counted, nothing tracked", st)
		}
		remove()
		remove()
		before := rec.renewed
		e.obtain(t, "c", "me", 300*time.Millisecond)
		time.Sleep(time.Second)
		if rec.renewed != before {
			t.Errorf("a removed observer was told of %d renewals", rec.renewed-before)
		}
	})
}

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{watchdog.ErrLockGone, watchdog.ReasonGone},
		{watchdog.ErrLockTaken, watchdog.ReasonTaken},
		{&watchdog.UnreachableError{Endpoint: "x", Err: errors.New("boom")}, watchdog.ReasonUnreachable},
		{watchdog.ErrMaxHold, watchdog.ReasonMaxHold},
		{watchdog.ErrQuorumLost, watchdog.ReasonQuorum},
		{errors.New("other"), ""},
	} {
		if got := watchdog.Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
