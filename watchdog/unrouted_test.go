package watchdog_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/internal/testkit/lagmeter"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// holdAnswer is a go-redis hook, added after the registry's, that holds
// the answer of the first command naming key that succeeds for d: the
// registry counts the lock as confirmed when its obtain was sent, and
// learns of it d later, as when a process starved of CPU reads the answer
// that late.
type holdAnswer struct {
	key string
	d   time.Duration
}

func (h *holdAnswer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdAnswer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.d > 0 && err == nil && strings.Contains(strings.Join(argStrings(cmd), " "), h.key) {
			d := h.d
			h.d = 0
			time.Sleep(d)
		}
		return err
	}
}

func (h *holdAnswer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// sentAt is a go-redis hook, added before the registry's, that records
// when the last command naming key that succeeded was sent: the command
// that set the key (redislock's EVAL after a NOSCRIPT answer to its
// EVALSHA, on a node that has not loaded the script yet), from which the
// key may expire.
type sentAt struct {
	key string
	mu  sync.Mutex
	at  time.Time
}

func (h *sentAt) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sentAt) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmd)
		if err == nil && slices.Contains(argStrings(cmd), h.key) {
			h.mu.Lock()
			h.at = sent
			h.mu.Unlock()
		}
		return err
	}
}

func (h *sentAt) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *sentAt) last() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.at
}

func argStrings(cmd redis.Cmder) []string {
	var out []string
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// A lock of a cluster slot the watchdog has no route for yet (the first
// lock of its slot) waits for the client's router, which asks go-redis
// which node serves the slot. In CI run 143's chaos soak a worker's
// first locks waited so for 1.9 s past their expiry, neither renewed nor
// told, and another worker took one of them (I15). Here the router runs
// 3 s late: the holder must still hear, by its tell time, that its lock
// may be lost, and a holder that asks for a context after that time has
// passed gets one cancelled already.
func TestUnroutedLocksToldInTime(t *testing.T) {
	cl := testredis.StartCluster(t, testredis.ClusterOptions{Masters: 3})
	restore := watchdog.SetRouteDelay(3 * time.Second)
	t.Cleanup(restore)
	hold := &holdAnswer{key: "unrouted:{late}"}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	slow := &sentAt{key: "unrouted:{slow}"}
	cc.AddHook(slow) // before the registry's: it sees a command sent before the registry does
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(cc); err != nil {
		t.Fatal(err)
	}
	cc.AddHook(hold) // after the registry's: the registry sees the answer when it lets it go
	wd, err := watchdog.Attach(reg, watchdog.WithSchedule("@every 1h"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wd.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	lag := lagmeter.Start(t)
	locker := redislock.New(cc)

	t.Run("router late", func(t *testing.T) {
		const ttl = 600 * time.Millisecond
		l, err := locker.Obtain(ctx, slow.key, ttl, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The key may expire a TTL after the command that set it was
		// sent: on a node new to the script, the EVAL that follows
		// NOSCRIPT, a round trip after the EVALSHA (CI's stop 44 took the
		// EVALSHA's send for it, and the server answered it late).
		sent := slow.last()
		jobCtx, stop := wd.Context(context.Background(), l.Key())
		defer stop()
		select {
		case <-jobCtx.Done():
		case <-time.After(3 * ttl):
		}
		told := time.Now()
		if !errors.Is(context.Cause(jobCtx), watchdog.ErrUnconfirmed) {
			t.Fatalf("after %v (the lock's TTL is %v): the job's context ended with %v, want ErrUnconfirmed", told.Sub(sent), ttl, context.Cause(jobCtx))
		}
		// Told before the key may expire, give or take how late this
		// process was woken meanwhile.
		if late := told.Sub(sent.Add(ttl)); late > lag.Between(sent, told) {
			t.Fatalf("told %v after the command that set the key was sent: %v after its key may have expired (this process was woken %v late at worst meanwhile)", told.Sub(sent), late, lag.Between(sent, told))
		}
		t.Logf("told %v after the command that set the key was sent (TTL %v): %v", told.Sub(sent), ttl, context.Cause(jobCtx))
	})

	t.Run("obtain answered past its expiry", func(t *testing.T) {
		const ttl = 500 * time.Millisecond
		held := ttl + 200*time.Millisecond
		hold.d = held
		l, err := locker.Obtain(ctx, hold.key, ttl, nil)
		if err != nil {
			t.Fatal(err)
		}
		jobCtx, stop := wd.Context(context.Background(), l.Key())
		defer stop()
		if !errors.Is(context.Cause(jobCtx), watchdog.ErrUnconfirmed) {
			t.Fatalf("an obtain answered %v after it was sent, of a lock of %v: the context Context returned ended with %v, want ErrUnconfirmed at once", held, ttl, context.Cause(jobCtx))
		}
		t.Logf("told at once: %v", context.Cause(jobCtx))
	})
}
