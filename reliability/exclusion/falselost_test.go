package exclusion_test

// A renewal that reaches Redis after the holder's release script ran, and
// whose answer the watchdog reads before the holder's hook has seen the
// release's reply, must not report the released lock lost: the hook marks
// a release before sending it.
//
//	LOCKWATCH_REQUIRE_REDIS=1 go test -race -count=1 -run TestFalseLostOnRelease -v ./reliability/exclusion

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// slowReply delays, after the server answered, the reply of redislock's
// release script (v0.9.4's or v0.10.0's) on its way back to the registry
// hook (which it sits inside of, being added after Watch): a slow network
// or a descheduled goroutine does the same.
type slowReply struct {
	armed    atomic.Bool
	answered chan struct{} // closed when the release has run on the server
	proceed  chan struct{} // the reply goes on when this is closed
}

func (h *slowReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *slowReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		name, _ := a[0].(string)
		var sha string
		if len(a) > 1 {
			sha, _ = a[1].(string)
		}
		if strings.EqualFold(name, "evalsha") && isRedislockRelease(sha) && err == nil && h.armed.CompareAndSwap(true, false) {
			close(h.answered)
			<-h.proceed
		}
		return err
	}
}

func TestFalseLostOnRelease(t *testing.T) {
	srv := testredis.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := harness.Client(t, srv.Addr)
	reg := harness.Watch(t, rdb)
	h := &slowReply{answered: make(chan struct{}), proceed: make(chan struct{})}
	rdb.AddHook(h)
	lost := &harness.LostLog{}
	wd, err := watchdog.Attach(reg, watchdog.WithOnLost(lost.Record))
	if err != nil {
		t.Fatal(err)
	}
	defer wd.Stop()

	// Load the release script first, so that the release below is one EVALSHA.
	warm, err := redislock.Obtain(ctx, rdb, "warm", 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)

	l, err := redislock.Obtain(ctx, rdb, "job", 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- l.Release(ctx) }()
	select {
	case <-h.answered: // the key is deleted on the server; the hook has not seen the reply yet
	case err := <-released:
		t.Fatalf("Release returned (%v) without sending an EVALSHA of a known redislock release script (%s or %s): the scenario cannot hold its reply back", err, redislockV094ReleaseSHA1, redislockV010ReleaseSHA1)
	case <-ctx.Done():
		t.Fatalf("the release's reply never reached the delaying hook: %v", ctx.Err())
	}
	sweepErr := wd.Sweep(ctx)
	close(h.proceed)
	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
	t.Logf("Sweep: %v", sweepErr)
	if evs := lost.All(); len(evs) != 0 {
		t.Errorf("OnLost for a lock its holder released: %v, want no report", evs)
	}
}
