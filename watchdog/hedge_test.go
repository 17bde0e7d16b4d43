package watchdog_test

import (
	"context"
	"encoding"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/watchdog"
)

// gate is a network before the watchdog's renew calls: a call (or a
// pipeline of them) reaches the server when pass returns nil, and fails
// with its error otherwise; other commands pass at once.
type gate func(ctx context.Context, cmds ...redis.Cmder) error

func (g gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g(ctx, cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (g gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g(ctx, cmds...); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// renewKeys returns the lock keys the renew calls among cmds carry (the
// renew script's EVALSHA; a release is an EVAL) and how many there are.
func renewKeys(cmds []redis.Cmder) (keys []string, n int) {
	for _, c := range cmds {
		a := c.Args()
		if c.Name() != "evalsha" || len(a) < 3 {
			continue
		}
		if k, ok := a[2].(int); ok {
			n += k
		}
		for _, v := range a[3:] {
			if m, ok := v.(encoding.BinaryMarshaler); ok { // a lock's key (table.Entry.KeyArg)
				if b, err := m.MarshalBinary(); err == nil {
					keys = append(keys, string(b))
				}
			}
		}
	}
	return keys, n
}

// hangKeys is a gate on which a renew call that carries a key with prefix
// hangs until its context ends (a slow connection, or one whose answer is
// never read in time), while the other calls reach the server at once.
func hangKeys(prefix string) gate {
	return func(ctx context.Context, cmds ...redis.Cmder) error {
		keys, _ := renewKeys(cmds)
		if slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, prefix) }) {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
}

// slowFullCalls is a gate on which a renew call of at least full keys
// reaches the server after delay, and a smaller one (a hedge's) hangs
// until its context ends: the call the lane hedged answers late, its
// hedges not at all.
func slowFullCalls(full int, delay time.Duration) gate {
	return func(ctx context.Context, cmds ...redis.Cmder) error {
		_, n := renewKeys(cmds)
		switch {
		case n == 0:
			return nil
		case n < full:
			<-ctx.Done()
			return ctx.Err()
		}
		select {
		case <-time.After(delay):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// heldLocks obtains n locks of ttl named prefix000 on, with a watchdog
// attached, runs the scenario for d and returns the watchdog, the keys
// reported lost and how many of the n the server still holds then.
func heldLocks(t *testing.T, e *env, prefix string, n int, ttl, d time.Duration, before func()) (wd *watchdog.Watchdog, lostKeys []string, held int) {
	t.Helper()
	lost := &lossLog{}
	wd = attach(t, e.reg, watchdog.WithOnLost(lost.onLost))
	if before != nil {
		before()
	}
	for i := range n {
		e.obtain(t, fmt.Sprintf("%s%03d", prefix, i), "me", ttl)
	}
	time.Sleep(d)
	synctest.Wait()
	lostKeys, _ = lost.get()
	for i := range n {
		if e.pttl(fmt.Sprintf("%s%03d", prefix, i)) > 0 {
			held++
		}
	}
	return wd, lostKeys, held
}

// A hedge's calls do not hold back the locks due beside them (I16): the
// calls that send a hedged call's keys again are a quarter of its size
// and count against the lane's limit by their keys, so the lane sends a
// full call of other locks beside them. Before, each of a hedge's four
// calls counted as a full call: at GOMAXPROCS=1 beside four spinning
// goroutines (TestStarvedHolder) a hedge's calls that did not answer kept
// the other 100 locks due with them waiting for 300 ms, past their
// expiry, and they were lost together.
//
// 100 locks of 3 s whose renew calls hang (their hedges too) and 100 of
// 300 ms whose calls are answered at once: for 3 s, none of the short
// ones may be lost. Seen failing before the fix: 100 of 100 lost.
func TestHedgeDoesNotHoldBackDueLocks(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.rdb.AddHook(hangKeys("slow:"))
		const n = 100
		wd, lost, held := heldLocks(t, e, "short:", n, 300*time.Millisecond, 3*time.Second, func() {
			for i := range n {
				e.obtain(t, fmt.Sprintf("slow:%03d", i), "me", 3*time.Second)
			}
		})
		defer wd.Stop()
		short := slices.DeleteFunc(lost, func(k string) bool { return !strings.HasPrefix(k, "short:") })
		st := wd.Stats()
		if len(short) > 0 || held < n {
			t.Errorf("the short locks beside a hedge: %d of %d reported lost (%v), %d of %d still held on the server, want none lost and all held; stats %+v",
				len(short), n, head(short, 3), held, n, st)
		}
		if st.Hedges == 0 {
			t.Errorf("Stats().Hedges = 0, want the slow locks' calls hedged (the scenario did not happen); stats %+v", st)
		}
		for i := range n {
			e.release(t, fmt.Sprintf("short:%03d", i), "me")
		}
	})
}

func head(s []string, n int) []string { return s[:min(n, len(s))] }

// A call is hedged when it has not answered a wait after it was sent, not
// after it was built: in a process starved of CPU a call's goroutine may
// start tens of milliseconds after the scheduler built it, and a call
// hedged before its first attempt went out doubles what the process
// cannot do (TestStarvedHolder at GOMAXPROCS=2 beside four spinning
// goroutines: a call was hedged 2 ms after it was built, its goroutine
// started 38 ms late, its hedges later still, and 75 locks were lost
// together). Calls that start 60 ms late and are answered at once are
// never hedged. Seen failing before the fix: every call hedged.
func TestHedgeWaitsFromTheSend(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		restore := func() {}
		defer func() { restore() }()
		const n = 100
		wd, lost, held := heldLocks(t, e, "k", n, 300*time.Millisecond, 2*time.Second, func() {
			restore = watchdog.SetStartDelay(60 * time.Millisecond)
		})
		defer wd.Stop()
		st := wd.Stats()
		if st.Renewals == 0 {
			t.Fatalf("Stats().Renewals = 0, want the locks renewed; stats %+v", st)
		}
		if st.Hedges > 0 {
			t.Errorf("Stats().Hedges = %d, want none: every call was answered as soon as it was sent; stats %+v", st.Hedges, st)
		}
		if len(lost) > 0 || held < n {
			t.Errorf("%d locks reported lost (%v), %d of %d still held, want none lost and all held", len(lost), head(lost, 3), held, n)
		}
		restore()
		for i := range n {
			e.release(t, fmt.Sprintf("k%03d", i), "me")
		}
	})
}

// A hedge whose locks the late answer of the call it replaced renewed is
// waited for no more: its locks are renewed again when they are due, not
// held in a call that does not answer (I16). At GOMAXPROCS=1 beside four
// spinning goroutines (TestStarvedHolder), hedges on new connections did
// not answer for 350 ms while the call they replaced had renewed their
// locks; the locks expired in them, 50 at once.
//
// 100 locks of 300 ms whose full calls answer 150 ms late and whose
// hedges never answer: for 3 s, none may be lost. Seen failing before the
// fix: 100 of 100 lost.
func TestSupersededHedgeLetsItsLocksGo(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.rdb.AddHook(slowFullCalls(50, 150*time.Millisecond))
		const n = 100
		wd, lost, held := heldLocks(t, e, "k", n, 300*time.Millisecond, 3*time.Second, nil)
		defer wd.Stop()
		st := wd.Stats()
		if len(lost) > 0 || held < n {
			t.Errorf("%d of %d locks reported lost (%v), %d still held on the server, want none lost and all held; stats %+v", len(lost), n, head(lost, 3), held, st)
		}
		if st.Hedges == 0 {
			t.Errorf("Stats().Hedges = 0, want the late calls hedged (the scenario did not happen); stats %+v", st)
		}
		for i := range n {
			e.release(t, fmt.Sprintf("k%03d", i), "me")
		}
	})
}

// A lock refreshed to a shorter TTL while it waits in the ready queue
// moves up to its new place there: its holder is told by its new tell
// time (I15), not by the one its old TTL gave it. Before, the refresh
// left its ready slot keyed by the old TTL's tell time, and while the
// lane was busy with locks whose old keys came first the lock waited
// behind them past its new expiry: in TestRefreshRacingRenewals under
// -race beside three other test binaries and two CPU burners, a lock
// refreshed from 3 s to 300 ms was told 693 ms after its key could
// expire, and lost.
//
// Every renew call hangs. A lock of 900 ms and 400 of 300 ms fall due
// together (its ready slot is the last); 10 ms later its holder refreshes
// it to 150 ms. Its context must end by its new expiry minus Redlock's
// drift allowance. Seen failing before the fix.
func TestRefreshToShorterTTLMovesUpTheReadyQueue(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.rdb.AddHook(hangKeys(""))
		wd := attach(t, e.reg)
		defer wd.Stop()
		e.obtain(t, "long", "me", 900*time.Millisecond)
		time.Sleep(200 * time.Millisecond)
		const n = 400
		for i := range n {
			e.obtain(t, fmt.Sprintf("short:%03d", i), "me", 300*time.Millisecond)
		}
		time.Sleep(110 * time.Millisecond) // every lock is due: the long one waits behind the short ones
		ctx, cancel := wd.Context(context.Background(), "long")
		defer cancel()
		const ttl = 150 * time.Millisecond
		sent := time.Now()
		e.refresh(t, "long", "me", ttl)
		told := make(chan time.Time, 1)
		go func() {
			<-ctx.Done()
			told <- time.Now()
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		drift := ttl/100 + 2*time.Millisecond
		by := sent.Add(ttl - drift)
		select {
		case at := <-told:
			if at.After(by) {
				t.Errorf("the lock refreshed to %v was told %v after its refresh, want by %v (its new expiry minus the drift allowance); cause: %v; stats %+v",
					ttl, at.Sub(sent), by.Sub(sent), context.Cause(ctx), wd.Stats())
			}
		default:
			t.Errorf("the lock refreshed to %v was never told, though no renew call answers; stats %+v", ttl, wd.Stats())
		}
	})
}

// A hedge splits the call it replaces into calls of a quarter of its
// size, but none smaller than a quarter of a full call unless the call
// was smaller: each call takes a connection of its own, and a hedge of a
// few locks in calls of one or two needs as many connections as it has
// calls. In TestStarvedHolder at GOMAXPROCS=1 beside five burner
// processes (runtime trace, 2026-12-03), the hedge of an 11-lock call
// went out as six calls; four dialled new connections (a handshake costs
// a turn of the process's goroutines, 95 ms there) and another waited
// 100 ms for the pool (PoolSize 10), and 8 locks expired in them.
//
// 12 locks of 3 s whose first renew call hangs: their hedge must be one
// call of 12. Seen failing before the fix: four calls of 3.
func TestSmallCallHedgedWhole(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		var mu sync.Mutex
		var sizes []int
		e.rdb.AddHook(gate(func(ctx context.Context, cmds ...redis.Cmder) error {
			mu.Lock()
			first := len(sizes) == 0
			for _, c := range cmds {
				if _, k := renewKeys([]redis.Cmder{c}); k > 0 {
					sizes = append(sizes, k)
				}
			}
			first = first && len(sizes) > 0
			mu.Unlock()
			if first {
				<-ctx.Done() // the first call never answers
				return ctx.Err()
			}
			return nil
		}))
		const n = 12
		wd, lost, held := heldLocks(t, e, "few:", n, 3*time.Second, 1500*time.Millisecond, nil)
		defer wd.Stop()
		st := wd.Stats()
		mu.Lock()
		got := slices.Clone(sizes)
		mu.Unlock()
		if st.Hedges == 0 || len(got) < 2 {
			t.Fatalf("Stats().Hedges = %d, renew calls %v: want the first call hedged (the scenario did not happen); stats %+v", st.Hedges, got, st)
		}
		if got[0] != n || got[1] != n {
			t.Errorf("renew calls of %v keys: want the first of %d and its hedge one call of %d", got, n, n)
		}
		if len(lost) > 0 || held < n {
			t.Errorf("%d of %d locks reported lost (%v), %d still held, want none lost", len(lost), n, head(lost, 3), held)
		}
		for i := range n {
			e.release(t, fmt.Sprintf("few:%03d", i), "me")
		}
	})
}
