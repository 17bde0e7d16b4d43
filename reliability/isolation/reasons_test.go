package isolation_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/watchdog"
)

// TestLostReasonWrapsCause: locks of 300 ms, 1 s and 2 s, through both
// libraries; a lock that cannot be kept because its
// renewals keep failing is reported with a reason that matches
// watchdog.ErrUnreachable and wraps the last renewal error, so that the
// application can tell a timeout from a refused connection from a cluster
// answer:
//
//   - "timeout": the server is SIGSTOPped; the cause is a timeout (an
//     error in the chain whose Timeout() is true, such as
//     context.DeadlineExceeded or os.ErrDeadlineExceeded).
//   - "refused": the server is SIGKILLed; the cause is ECONNREFUSED.
//   - "tryagain": the server answers every command with -TRYAGAIN (a
//     miniredis told to: a real server sends it for a multi-key command in
//     a slot being migrated, which a correct watchdog avoids, so only a
//     server that answers TRYAGAIN to everything keeps a lock from being
//     renewed); the cause is a redis.Error starting with TRYAGAIN.
//
// The chain is followed through Unwrap() error and Unwrap() []error, as
// errors.Is and errors.As do.
func TestLostReasonWrapsCause(t *testing.T) {
	const ttl = time.Second
	var killed *testredis.Server // the "refused" case's server
	for _, c := range []struct {
		name  string
		fault func(t *testing.T, addr string)
		start func(t *testing.T) (addr string, fault func())
		want  string
		match func(error) bool
		// silentFor, when set, is how long the fault left the server
		// silent before its cause could show: a lock whose TTL is under
		// 10 times that may be given up as not answered (ErrUnreachable
		// with a timeout) instead.
		silentFor func() time.Duration
		// noShort: the case holds no 300 ms lock. For miniredis, which
		// answers from the test process: under -race on a loaded machine
		// (CI run 2 of issue 27, two CPU burners) its answer to a 300 ms
		// lock's renewal took over 200 ms, and the lock was rightly given
		// up as not answered before the TRYAGAIN came.
		noShort bool
	}{
		{
			name: "timeout",
			start: func(t *testing.T) (string, func()) {
				srv := testredis.Start(t)
				t.Cleanup(func() { srv.Resume(t) })
				return srv.Addr, func() { srv.Pause(t) }
			},
			want: "a timeout (Timeout() true)",
			match: func(err error) bool {
				var to interface{ Timeout() bool }
				return errors.As(err, &to) && to.Timeout()
			},
		},
		{
			name: "refused",
			start: func(t *testing.T) (string, func()) {
				srv := testredis.Start(t)
				killed = srv
				return srv.Addr, func() { srv.Kill(t) }
			},
			want:  "syscall.ECONNREFUSED",
			match: func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) },
			// A SIGKILLed redis-server exits in a few milliseconds, but
			// beside two burners and the -race suite CI saw exits of 0.3 s
			// and up to 6.7 s (reliability/quorum): until then it keeps
			// its port and answers nothing.
			silentFor: func() time.Duration { return killed.KillTook() },
		},
		{
			name: "tryagain",
			start: func(t *testing.T) (string, func()) {
				m := miniredis.RunT(t)
				return m.Addr(), func() { m.SetError("TRYAGAIN Multiple keys request during rehashing of slot") }
			},
			want:    "a redis.Error starting with TRYAGAIN",
			noShort: true,
			match: func(err error) bool {
				var re redis.Error
				return errors.As(err, &re) && strings.HasPrefix(re.Error(), "TRYAGAIN")
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			addr, fault := c.start(t)
			cl := harness.Client(t, addr)
			a := newApp(t, []redis.UniversalClient{cl}, appConfig{})
			// Several TTLs and both libraries: whichever way the watchdog
			// gives a lock up, each must carry its cause.
			var hs []*harness.Held
			ttls := []time.Duration{300 * time.Millisecond, ttl, 2 * ttl}
			if c.noShort {
				ttls = ttls[1:]
			}
			for _, d := range ttls {
				hs = append(hs,
					obtainRedislock(t, cl, fmt.Sprintf("iso:reason:%s:redislock:%v", c.name, d), d, addr),
					obtainRedsync(t, []redis.UniversalClient{cl}, fmt.Sprintf("iso:reason:%s:redsync:%v", c.name, d), d, addr))
			}
			time.Sleep(200 * time.Millisecond)
			faulted := time.Now()
			fault()
			// A silent endpoint's lock is given up by E + TTL + min(4 lag,
			// TTL) (watchdog's TestGivenUpWithinBoundWhenSilentLagging): up
			// to three TTLs after the fault for a scheduler that lags. The
			// wait is for the longest lock, and a second more. It was 3 s
			// and a second, under the 2 s locks' bound once the scheduler
			// lagged by 100 ms (CI run 164 here: 2 of 6 not reported).
			within := 3*ttls[len(ttls)-1] + time.Second
			if missing := waitReported(a.Lost, cl, hs, within); len(missing) > 0 {
				t.Fatalf("%d of %d locks not reported within %v of the fault, want each reported with ErrUnreachable; %s", len(missing), len(hs), within, lostSummary(a.Lost))
			}
			time.Sleep(200 * time.Millisecond) // a second report would come now
			for _, h := range hs {
				evs := a.Lost.ForLock(cl, h.Key)
				if len(evs) != 1 {
					t.Errorf("%v reported %d times, want once: %s", h, len(evs), describeLost(a.Lost, h, faulted))
				}
				err := evs[0].Err
				if errors.Is(err, watchdog.ErrUnreachable) && !c.match(err) && c.silentFor != nil && c.silentFor() > h.TTL/10 && timeoutIn(err) {
					t.Logf("%v reported with %q: the server was silent for %v after the fault, over a tenth of the TTL, and the lock given up as not answered", h, err, c.silentFor().Round(time.Millisecond))
					continue
				}
				if !errors.Is(err, watchdog.ErrUnreachable) || !c.match(err) {
					t.Errorf("%v reported at %+.3fs with %q: errors.Is(ErrUnreachable) = %v, wraps %s = %v, want both; the reason's chain:%s",
						h, evs[0].At.Sub(faulted).Seconds(), err, errors.Is(err, watchdog.ErrUnreachable), c.want, c.match(err), testredis.ErrChain(err))
				} else {
					t.Logf("%v: %v", h, err)
				}
			}
		})
	}
}

// timeoutIn reports whether err's chain holds a timeout (Timeout() true).
func timeoutIn(err error) bool {
	var to interface{ Timeout() bool }
	return errors.As(err, &to) && to.Timeout()
}
