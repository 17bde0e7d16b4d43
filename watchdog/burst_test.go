package watchdog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"

	"github.com/lockwatch/lockwatch/internal/table"
	"github.com/lockwatch/lockwatch/internal/testkit/memconn"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/scripts"
)

// nxAdapter tracks every SET NX with an expiry as an obtain.
type nxAdapter struct{}

func (nxAdapter) Name() string                { return "nx" }
func (nxAdapter) Probe(context.Context) error { return nil }
func (nxAdapter) Classify(c registry.Command) registry.Action {
	unit := map[any]time.Duration{"px": time.Millisecond, "ex": time.Second}
	if c.Name != "set" || c.Err != nil || len(c.Args) != 6 || unit[c.Args[3]] == 0 {
		return registry.Action{}
	}
	key, _ := c.Args[1].(string)
	val, _ := c.Args[2].(string)
	n, _ := c.Args[4].(int64)
	return registry.Action{Op: registry.OpObtain, Key: key, Value: val, TTL: time.Duration(n) * unit[c.Args[3]]}
}

// fastLaneEnv starts, inside a synctest bubble, a miniredis whose TTLs
// follow the bubble's clock, a client of it watched by a registry with
// adapter a, and a watchdog attached on its defaults (ticks every 10 s:
// locks of a few seconds take the fast lane); all of it ends with the test.
func fastLaneEnv(t *testing.T, a registry.Adapter, opts ...Option) (*miniredis.Miniredis, *redis.Client, *Watchdog) {
	t.Helper()
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	rdb := redis.NewClient(&redis.Options{Addr: memconn.Addr, Dialer: memconn.Dialer(m)})
	t.Cleanup(m.Close)
	t.Cleanup(func() { _ = rdb.Close() })
	reg := registry.New(a)
	if err := reg.Watch(rdb); err != nil {
		t.Fatal(err)
	}
	w, err := Attach(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	synctest.Wait()
	return m, rdb, w
}

// laneOf returns the lane of w's one client, making it (a client gets its
// lanes with its first lock otherwise).
func laneOf(w *Watchdog) *lane {
	c, _ := w.clientOf(w.set.Tables()[0])
	return c.single
}

// obtainAndRelease obtains n locks short:0, short:1... with ttl through
// locker, releasing each right after.
func obtainAndRelease(t *testing.T, locker *redislock.Client, n int, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		l, err := locker.Obtain(ctx, fmt.Sprint("short:", i), ttl, nil)
		if err != nil {
			t.Fatalf("Obtain(short:%d) = %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release(short:%d) = %v", i, err)
		}
	}
}

// A burst of short locks must not make the due loop look at its whole list
// once per lock: that would be quadratic.
func TestFastLaneBurstIsNotQuadratic(t *testing.T) {
	Bubble(t, func(t *testing.T) {
		_, rdb, w := fastLaneEnv(t, nxAdapter{})
		lane := laneOf(w)
		before := lane.passes.Load()
		const n = 2000
		ctx := context.Background()
		for i := range n {
			// A millisecond apart, so each newcomer is due after the first.
			if !rdb.SetNX(ctx, fmt.Sprint("burst:", i), "v", 900*time.Millisecond+time.Duration(i)*time.Millisecond).Val() {
				t.Fatalf("SET NX burst:%d failed", i)
			}
		}
		synctest.Wait()
		if runs := lane.passes.Load() - before; runs > 10 {
			t.Errorf("the due loop ran %d times for a burst of %d obtains, want a handful", runs, n)
		}
		if got := w.Stats().FastLane; got != n {
			t.Errorf("Stats().FastLane = %d, want %d", got, n)
		}
		time.Sleep(3 * time.Second)
		if s := w.Stats(); s.Lost != 0 || s.Renewals < n {
			t.Errorf("Stats() after 3s = %+v, want every lock renewed, none lost", s)
		}
	})
}

// Locks released long before they would be due must not pile up in the
// fast lane's due list until their due time: the releases ask the due loop
// to drop them once they outnumber the live ones. The table holds many
// long locks, so that the short ones are listed at once (freshWalk).
func TestFastLaneForgetsReleasedLocks(t *testing.T) {
	Bubble(t, func(t *testing.T) {
		_, rdb, w := fastLaneEnv(t, bsmredislock.New()) // a 3 s lock takes the fast lane
		lane := laneOf(w)
		ctx := context.Background()
		locker := redislock.New(rdb)
		for i := range 100 {
			if _, err := locker.Obtain(ctx, fmt.Sprint("long:", i), time.Hour, nil); err != nil {
				t.Fatal(err)
			}
		}
		live, err := locker.Obtain(ctx, "short:live", 3*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		const n = 5000
		before := lane.passes.Load()
		obtainAndRelease(t, locker, n, 3*time.Second)
		synctest.Wait()
		lane.c.t.Lock() // guards the due list
		held := lane.listed
		lane.c.t.Unlock()
		if held == 0 {
			t.Fatal("the due list is empty: the test needs its locks in the fast lane")
		}
		if held >= 2*minStale {
			t.Errorf("the due list holds %d entries after %d locks were obtained and released (one is held), want fewer than %d", held, n, 2*minStale)
		}
		if got := w.Stats().FastLane; got != held {
			t.Errorf("Stats().FastLane = %d, want the due list's %d", got, held)
		}
		if runs := lane.passes.Load() - before; runs > 2*n/minStale+10 {
			t.Errorf("the due loop ran %d times for %d releases, want about one per %d", runs, n, minStale)
		}
		time.Sleep(5 * time.Second)
		if s := w.Stats(); s.Lost != 0 || s.Renewals == 0 {
			t.Errorf("Stats() after 5s = %+v, want the held lock renewed, nothing lost", s)
		}
		if err := live.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// When go-redis gets no connection at all it returns the error from Exec
// and leaves the commands untouched: the renewal must fail with that error,
// not with a confusing reply-type error.
func TestPipeReportsExecErrorWhenNoConnection(t *testing.T) {
	refused := errors.New("dial refused by test")
	c := redis.NewClient(&redis.Options{
		Addr:       "127.0.0.1:1",
		Dialer:     func(context.Context, string, string) (net.Conn, error) { return nil, refused },
		MaxRetries: -1,
	})
	defer c.Close()
	tab, _ := table.NewSet([]string{"nx"}, nil).Add(c)
	p := &pipe{entries: []*table.Entry{{Key: "a", Value: "v", TTL: time.Second}, {Key: "b", Value: "v", TTL: time.Second}}}
	p.build(tab, 1, 0, 0, 0)
	p.run(context.Background(), tab, time.Second)
	if fmt.Sprint(p.res) != fmt.Sprint([]int8{table.Failed, table.Failed}) {
		t.Fatalf("results = %v, want both failed", p.res)
	}
	if !errors.Is(p.err, refused) || strings.Contains(p.err.Error(), "unexpected type") {
		t.Errorf("error = %v, want it to wrap %v", p.err, refused)
	}
}

// A renew command's arguments print as keys and values, as a tracing hook
// or a log shows them (cmd.String()), though they are passed as pointers to
// the locks' records so that a sweep allocates nothing per lock.
func TestRenewCommandPrintsKeysAndValues(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	tab, _ := table.NewSet([]string{"nx"}, nil).Add(c)
	p := &pipe{entries: []*table.Entry{{Key: "job:1", Value: "token-1", TTL: time.Second}, {Key: "job:2", Value: "token-2", TTL: time.Second}}}
	p.build(tab, 10, 0, 0, 0)
	got := redis.NewCmd(context.Background(), p.args[0]...).String()
	want := fmt.Sprintf("evalsha %s 2 job:1 job:2 s token-1 token-2 1000", scripts.RenewSHA1)
	if !strings.HasPrefix(got, want) {
		t.Errorf("renew command prints as %q, want %q", got, want)
	}
}

// A client watched after Attach gets its lanes with its first lock (the
// hook finds no lane for it and leaves that to after the table lock), and
// a lock that cannot wait for the next tick still takes the fast lane.
func TestFastLaneOfAClientWatchedAfterAttach(t *testing.T) {
	Bubble(t, func(t *testing.T) {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		rdb := redis.NewClient(&redis.Options{Addr: memconn.Addr, Dialer: memconn.Dialer(m)})
		defer m.Close()
		defer rdb.Close()
		reg := registry.New(nxAdapter{})
		w, err := Attach(reg) // ticks every 10 s
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if err := reg.Watch(rdb); err != nil {
			t.Fatal(err)
		}
		if !rdb.SetNX(context.Background(), "late", "v", 900*time.Millisecond).Val() {
			t.Fatal("SET NX late failed")
		}
		synctest.Wait()
		if got := w.Stats().FastLane; got != 1 {
			t.Errorf("Stats().FastLane = %d after a 900 ms lock, want 1", got)
		}
		time.Sleep(3 * time.Second)
		if !m.Exists("late") {
			t.Fatal("the 900 ms lock expired within 3 s: it was not renewed")
		}
		if s := w.Stats(); s.Lost != 0 || s.Renewals == 0 {
			t.Errorf("Stats() after 3s = %+v, want the lock renewed, nothing lost", s)
		}
	})
}

// A short lock released within a third of its TTL never enters a due list
// (the due loop lists fresh locks only when the first of them is due);
// one still held then is listed and renewed, and Stats counts it in the
// fast lane all along.
func TestFastLaneListsFreshLocksWhenTheyMayBeRenewed(t *testing.T) {
	Bubble(t, func(t *testing.T) {
		m, rdb, w := fastLaneEnv(t, bsmredislock.New()) // a 3 s lock takes the fast lane
		lane := laneOf(w)
		listed := func() int {
			lane.c.t.Lock()
			defer lane.c.t.Unlock()
			return lane.listed
		}
		ctx := context.Background()
		locker := redislock.New(rdb)
		held, err := locker.Obtain(ctx, "short:held", 3*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		const n = 1000
		obtainAndRelease(t, locker, n, 3*time.Second)
		synctest.Wait()
		if got := listed(); got != 0 {
			t.Errorf("due list holds %d entries before any lock may be renewed, want 0", got)
		}
		if got := w.Stats().FastLane; got != 1 {
			t.Errorf("Stats().FastLane = %d with one short lock held, want 1", got)
		}
		time.Sleep(1300 * time.Millisecond) // past 5/12 of 3 s: the held lock is due
		synctest.Wait()
		if got := listed(); got != 1 {
			t.Errorf("due list holds %d entries once the held lock is due, want 1", got)
		}
		time.Sleep(4 * time.Second)
		if !m.Exists("short:held") {
			t.Fatal("short:held expired: the fast lane did not renew it")
		}
		if s := w.Stats(); s.Lost != 0 || s.Renewals == 0 || s.FastLane != 1 {
			t.Errorf("Stats() after 5.3 s = %+v, want the held lock renewed and in the fast lane, nothing lost", s)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A client with nothing to renew gives its lanes back after idleRetire:
// their goroutines end and it leaves Stats. A client that locks again gets
// lanes anew. Many clients that come and go (a tenant's each) cost
// nothing once idle.
func TestIdleClientsGiveBackTheirLanes(t *testing.T) {
	Bubble(t, func(t *testing.T) {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		t.Cleanup(m.Close)
		reg := registry.New(nxAdapter{})
		w, err := Attach(reg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		// Every connection the clients open is closed at the end, should
		// go-redis leave one open: a connection dialled while its client
		// closes was seen left open (1 run in 30 under load), and its
		// goroutine, blocked for good, would fail the bubble. The
		// goroutines counted below are the lanes' own.
		var (
			connsMu sync.Mutex
			conns   []net.Conn
		)
		dial := memconn.Dialer(m)
		dialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err == nil {
				connsMu.Lock()
				conns = append(conns, c)
				connsMu.Unlock()
			}
			return c, err
		}
		t.Cleanup(func() {
			connsMu.Lock()
			defer connsMu.Unlock()
			for _, c := range conns {
				_ = c.Close()
			}
		})
		synctest.Wait()
		before := laneGoroutines()
		ctx := context.Background()
		const n = 50
		clients := make([]*redis.Client, n)
		for i := range clients {
			c := redis.NewClient(&redis.Options{Addr: memconn.Addr, Dialer: dialer})
			t.Cleanup(func() { _ = c.Close() })
			clients[i] = c
			if err := reg.Watch(c); err != nil {
				t.Fatal(err)
			}
			if !c.SetNX(ctx, fmt.Sprint("tenant:", i), "v", 300*time.Millisecond).Val() {
				t.Fatalf("SET NX tenant:%d failed", i)
			}
		}
		synctest.Wait()
		if got := len(w.Stats().Endpoints); got != n {
			t.Errorf("Stats().Endpoints lists %d endpoints while %d clients hold a lock each, want %d", got, n, n)
		}
		time.Sleep(time.Second)
		// Every client but the last goes: its lock deleted (the adapter
		// tracks no release: a renewal finds it gone), the client closed.
		for i, c := range clients[:n-1] {
			c.Del(ctx, fmt.Sprint("tenant:", i))
			_ = c.Close()
		}
		time.Sleep(5 * time.Second) // every lock gone, then idleRetire
		synctest.Wait()
		st := w.Stats()
		if len(st.Endpoints) != 1 || st.Lost != n-1 || st.Tracked != 1 {
			t.Errorf("Stats(): %d endpoints, %d lost, %d tracked; want 1 (the client that keeps its lock), %d, 1", len(st.Endpoints), st.Lost, st.Tracked, n-1)
		}
		// The client left has its lanes' two goroutines; the closed
		// clients' lanes, kept, would be 98 more.
		if got := laneGoroutines(); got != before+2 {
			t.Errorf("%d lane goroutines, %d before %d clients came and went: want the last client's two, the closed clients' given back", got, before, n)
		}
		// A client that releases its last lock gives its lanes back too,
		// and gets them anew when it locks again.
		last := clients[n-1]
		last.Del(ctx, fmt.Sprint("tenant:", n-1))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st := w.Stats(); len(st.Endpoints) != 0 || st.Tracked != 0 {
			t.Errorf("Stats() with no lock left: %d endpoints, %d tracked; want none", len(st.Endpoints), st.Tracked)
		}
		if got := laneGoroutines(); got != before {
			t.Errorf("%d lane goroutines with no lock left, %d before: want none", got, before)
		}
		if !last.SetNX(ctx, "tenant:again", "v", 300*time.Millisecond).Val() {
			t.Fatal("SET NX tenant:again failed")
		}
		time.Sleep(time.Second)
		if !m.Exists("tenant:again") {
			t.Error("tenant:again expired: the client that locked again was not renewed")
		}
		if got := len(w.Stats().Endpoints); got != 1 {
			t.Errorf("Stats().Endpoints lists %d endpoints once the client locked again, want 1", got)
		}
	})
}

// laneGoroutines counts the goroutines running a lane's scheduler or
// sweeper, in the whole process.
func laneGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	s := string(buf)
	return strings.Count(s, "watchdog.(*lane).scheduler(") + strings.Count(s, "watchdog.(*lane).sweeper(")
}

// A renewal sent before its lock's deadline but answered after it missed
// the deadline all the same (a starved process writes or reads it late):
// it counts then, once, and a lock already past its deadline when the call
// was built is not counted again.
func TestDeadlineMissedWhenAnsweredLate(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	tab, _ := table.NewSet([]string{"nx"}, nil).Add(c)
	ms := int64(time.Millisecond)
	p := &pipe{entries: []*table.Entry{
		{Key: "in-time", Value: "v", TTL: 300 * time.Millisecond, Confirmed: 0},      // deadline +200 ms
		{Key: "past", Value: "v", TTL: 300 * time.Millisecond, Confirmed: -250 * ms}, // deadline -50 ms
		{Key: "later", Value: "v", TTL: 300 * time.Millisecond, Confirmed: 100 * ms}, // deadline +300 ms
	}}
	p.build(tab, 10, 100*ms, 0, 0)
	if p.missed != 1 {
		t.Fatalf("missed when built at +100ms = %d, want 1 (the lock past its deadline)", p.missed)
	}
	for _, c := range []struct {
		at   int64
		want int
	}{{150 * ms, 0}, {200 * ms, 0}, {201 * ms, 1}, {301 * ms, 2}} {
		if got := p.lateSince(c.at); got != c.want {
			t.Errorf("lateSince(+%dms) = %d, want %d", c.at/ms, got, c.want)
		}
	}
}
