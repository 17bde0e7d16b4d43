package harness_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newClient returns a client of a fresh miniredis, and the miniredis.
func newClient(t *testing.T) (*redis.Client, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	return harness.Client(t, m.Addr()), m
}

// TestAppObtainRelease follows the start-up contract on a miniredis: both
// libraries' locks are tracked as obtained, read back from outside, and
// released; a lock deleted behind the holder's back is reported once.
func TestAppObtainRelease(t *testing.T) {
	c, m := newClient(t)
	sent := harness.Record(c)
	a := harness.NewApp(t, []*redis.Client{c}, harness.Config{Options: []watchdog.Option{watchdog.WithSchedule("@every 1h")}})
	spy := harness.NewSpy(t, m.Addr())
	ctx := context.Background()
	var hs []*harness.Held
	for _, lib := range harness.Libs {
		h := harness.MustObtain(t, lib, c, "harness:"+lib, time.Minute)
		if h.Lib != lib || h.Client != redis.UniversalClient(c) || !strings.Contains(h.String(), h.Key) {
			t.Errorf("MustObtain(%s) = %v (client %v), want a %s lock through c", lib, h, h.Client, lib)
		}
		if l, ok := a.Tracked(h.Key); !ok || l.Value != h.Value {
			t.Errorf("Tracked(%q) = %+v, %v, want the value %q", h.Key, l, ok, h.Value)
		}
		hs = append(hs, h)
	}
	for _, mode := range []harness.ReadMode{harness.Pipelined, harness.Atomic} {
		st := harness.ReadKeys(ctx, spy, append(harness.KeysOf(hs), "harness:none"), mode)
		for _, h := range hs {
			if s := st[h.Key]; !s.Holds(h.Value) || s.PTTL <= 0 {
				t.Errorf("ReadKeys(mode %d)[%q] = %v, want %q with a TTL", mode, h.Key, s, h.Value)
			}
		}
		if s := st["harness:none"]; s.Exists || s.Err != nil || s.String() != "gone" {
			t.Errorf("ReadKeys(mode %d) of a missing key = %+v (%v), want gone", mode, s, s)
		}
	}
	if n := len(sent.Since(time.Time{})); n == 0 || n != sent.Mark() || len(sent.After(n-1)) != 1 {
		t.Errorf("SentLog: %d commands since the start, Mark %d, want the same, and one after Mark-1", n, sent.Mark())
	}
	if err := hs[0].Release(ctx); err != nil {
		t.Errorf("release %v: %v", hs[0], err)
	}
	m.Del(hs[1].Key)
	if err := a.WD.Sweep(ctx); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if evs := a.Lost.WaitOf(hs[1].Key, hs[1].Value, time.Second); len(evs) != 1 || !errors.Is(evs[0].Err, watchdog.ErrLockGone) {
		t.Errorf("OnLost of the deleted lock: %v, want one ErrLockGone", evs)
	}
	if err := hs[1].Release(ctx); err == nil {
		t.Errorf("redsync release of a deleted lock: nil, want an error (not held)")
	}
	if evs := a.Lost.ForKey(hs[0].Key); len(evs) != 0 {
		t.Errorf("OnLost of the released lock: %v, want none", evs)
	}
	renews := 0
	for _, cmd := range sent.After(0) {
		if cmd.IsRenew() {
			renews++
		}
	}
	if renews == 0 {
		t.Errorf("renew calls recorded through c: 0, want the Sweep's")
	}
}

func TestLogs(t *testing.T) {
	var b harness.LockedBuffer
	for i := range 5 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if got, want := b.Tail(2), "... 3 earlier lines\nline 3\nline 4"; got != want {
		t.Errorf("Tail(2) = %q, want %q", got, want)
	}
	if got, want := b.Ends(3), "line 0\n... 2 lines between\nline 3\nline 4"; got != want {
		t.Errorf("Ends(3) = %q, want %q", got, want)
	}
	if got := b.Ends(5); got != strings.TrimSpace(b.String()) {
		t.Errorf("Ends(5) = %q, want the whole log", got)
	}
	if got := b.Tail(0); got != strings.TrimSpace(b.String()) {
		t.Errorf("Tail(0) = %q, want the whole log", got)
	}
	var l harness.LostLog
	l.Record(registry.Lock{Key: "k", Value: "v"}, watchdog.ErrLockGone)
	if got := l.WaitKey("other", time.Millisecond); got != nil {
		t.Errorf("WaitKey(other) = %v, want nothing", got)
	}
	if got := l.Of("k", "v"); len(got) != 1 || !strings.Contains(harness.DescribeLost(got, time.Now(), 1), "k value v") {
		t.Errorf("Of(k, v) = %v (%s), want the one report", got, harness.DescribeLost(got, time.Now(), 1))
	}
	if got := l.Take(); len(got) != 1 || len(l.All()) != 0 {
		t.Errorf("Take() = %v, then All() = %v, want the report once", got, l.All())
	}
}

func TestMatching(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", watchdog.ErrLockTaken)
	if got := harness.Matching(err, harness.WatchdogSentinels...); strings.Join(got, ",") != "ErrLost,ErrLockTaken" {
		t.Errorf("Matching(ErrLockTaken) = %v, want [ErrLost ErrLockTaken]", got)
	}
	if got := harness.FirstMatch(errors.New("x"), "other", harness.UpstreamSentinels...); got != "other" {
		t.Errorf("FirstMatch(unknown) = %q, want other", got)
	}
}
