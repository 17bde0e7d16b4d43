package watchdog

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/memconn"
	"github.com/lockwatch/lockwatch/registry"
)

// hangRenewals holds every renew call until its context ends: an endpoint
// that has stopped answering.
type hangRenewals struct{}

func (hangRenewals) DialHook(next redis.DialHook) redis.DialHook { return next }

func (hangRenewals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

func (hangRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }) {
			<-ctx.Done()
			for _, c := range cmds {
				c.SetErr(ctx.Err())
			}
			return ctx.Err()
		}
		return next(ctx, cmds)
	}
}

// A lane that may send no more calls while its due locks wait does not
// spin: it runs again when a call ends or a lock's time comes, not in a
// loop on a CPU the application needs. It did spin from when its most
// urgent ready lock had waited a twelfth of its TTL past its renewal time
// (its wake-up time was then in the past) until a call ended: with
// renewals that hang, for as long as they hang.
func TestBlockedLaneDoesNotSpin(t *testing.T) {
	m := miniredis.NewMiniRedis()
	t.Cleanup(m.Close)
	rdb := redis.NewClient(&redis.Options{Addr: memconn.Addr, Dialer: memconn.Dialer(m)})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(hangRenewals{})
	reg := registry.New(nxAdapter{})
	if err := reg.Watch(rdb); err != nil {
		t.Fatal(err)
	}
	w, err := Attach(reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	const ttl = time.Second
	ctx := context.Background()
	for i := range 5 * 100 { // five calls' worth: more than the lane may send at once
		if !rdb.SetNX(ctx, fmt.Sprint("k", i), "v", ttl).Val() {
			t.Fatalf("SET NX k%d failed", i)
		}
	}
	l := laneOf(w)
	// From renewAt plus a twelfth of the TTL the most urgent lock has
	// waited behind the calls in flight, which never answer.
	time.Sleep(ttl/3 + ttl/12 + 50*time.Millisecond)
	before := l.passes.Load()
	const window = 300 * time.Millisecond
	time.Sleep(window)
	// A pass for each hedge, abandon, tell and retry in the window is a
	// few dozen; a spinning scheduler runs tens of thousands.
	if runs := l.passes.Load() - before; runs > 1000 {
		t.Errorf("the scheduler ran %d passes in %v while its calls hung, want a few dozen: it spins", runs, window)
	} else {
		t.Logf("%d passes in %v", runs, window)
	}
}
