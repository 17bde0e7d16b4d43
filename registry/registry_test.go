package registry

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scriptAdapter recognises EVAL of three fixed sources: obtain (SET NX PX),
// refresh and release, and counts the commands it is asked about.
type scriptAdapter struct {
	calls atomic.Int64
	panic bool
}

const (
	obtainSrc  = `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`
	refreshSrc = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end return 0`
	releaseSrc = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`
)

func (a *scriptAdapter) Name() string                { return "script" }
func (a *scriptAdapter) Probe(context.Context) error { return nil }

func (a *scriptAdapter) Classify(c Command) Action {
	a.calls.Add(1)
	if a.panic {
		panic("adapter bug")
	}
	if c.Name != "eval" || len(c.Args) < 5 {
		return Action{}
	}
	src, _ := c.Args[1].(string)
	key, _ := c.Args[3].(string)
	val, _ := c.Args[4].(string)
	var ttl time.Duration
	if len(c.Args) > 5 {
		ms, _ := c.Args[5].(int)
		ttl = time.Duration(ms) * time.Millisecond
	}
	switch src {
	case obtainSrc:
		if c.Err == nil {
			return Action{Op: OpObtain, Key: key, Value: val, TTL: ttl}
		}
	case refreshSrc:
		switch c.Reply {
		case int64(1):
			return Action{Op: OpRefresh, Key: key, Value: val, TTL: ttl}
		case int64(0):
			return Action{Op: OpNotHeld, Key: key, Value: val}
		}
	case releaseSrc:
		return Action{Op: OpRelease, Key: key, Value: val}
	}
	return Action{}
}

func newWatched(t *testing.T, a Adapter) (*Registry, *redis.Client, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	reg := New(a)
	if err := reg.Watch(rdb); err != nil {
		t.Fatal(err)
	}
	return reg, rdb, m
}

func run(t *testing.T, rdb redis.Cmdable, src, key, val string, ms int) *redis.Cmd {
	t.Helper()
	args := []any{val}
	if ms > 0 {
		args = append(args, ms)
	}
	return rdb.Eval(context.Background(), src, []string{key}, args...)
}

func TestTracksObtainRefreshRelease(t *testing.T) {
	a := &scriptAdapter{}
	reg, rdb, _ := newWatched(t, a)
	var events []EventKind
	var mu sync.Mutex
	cancel := reg.Subscribe(func(ev Event) {
		mu.Lock()
		events = append(events, ev.Kind)
		mu.Unlock()
	})
	defer cancel()

	before := time.Now()
	run(t, rdb, obtainSrc, "k", "v1", 1000)
	locks := reg.Locks()
	if len(locks) != 1 {
		t.Fatalf("Locks() = %v, want one lock", locks)
	}
	l := locks[0]
	if l.Key != "k" || l.Value != "v1" || l.TTL != time.Second || l.Source != "script" || l.Client != rdb || l.Renewals != 0 {
		t.Errorf("Locks()[0] = %+v, want k=v1 TTL 1s from script on rdb", l)
	}
	if l.ObtainedAt.Before(before) || l.ConfirmedAt != l.ObtainedAt {
		t.Errorf("ObtainedAt, ConfirmedAt = %v, %v, want equal and after %v", l.ObtainedAt, l.ConfirmedAt, before)
	}

	run(t, rdb, refreshSrc, "k", "v1", 5000)
	if l, _ := reg.Get(rdb, "k"); l.TTL != 5*time.Second {
		t.Errorf("TTL after refresh = %v, want 5s", l.TTL)
	}
	// A release of another value (e.g. a failed contender cleaning up) leaves ours.
	run(t, rdb, releaseSrc, "k", "someone-else", 0)
	if n := reg.Len(); n != 1 {
		t.Errorf("Len() after a release of another value = %d, want 1", n)
	}
	run(t, rdb, releaseSrc, "k", "v1", 0)
	if n := reg.Len(); n != 0 {
		t.Errorf("Len() after release = %d, want 0", n)
	}

	// A refresh answering 0 untracks.
	run(t, rdb, obtainSrc, "k2", "v2", 1000)
	rdb.Set(context.Background(), "k2", "stolen", 0)
	run(t, rdb, refreshSrc, "k2", "v2", 1000)
	if n := reg.Len(); n != 0 {
		t.Errorf("Len() after a refresh that answered 0 = %d, want 0", n)
	}
	// A failed obtain is not tracked.
	run(t, rdb, obtainSrc, "k2", "v3", 1000)
	if n := reg.Len(); n != 0 {
		t.Errorf("Len() after a failed obtain = %d, want 0", n)
	}

	mu.Lock()
	got := append([]EventKind(nil), events...)
	mu.Unlock()
	want := []EventKind{EventObtained, EventRefreshed, EventReleased, EventObtained, EventNotHeld}
	if len(got) != len(want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestWatch(t *testing.T) {
	a := &scriptAdapter{}
	reg, rdb, _ := newWatched(t, a)
	run(t, rdb, obtainSrc, "k1", "v", 1000)
	once := a.calls.Load() // a script is asked about before it is sent, and after
	if once < 1 {
		t.Fatalf("adapter asked %d times for one command, want at least 1", once)
	}
	if err := reg.Watch(rdb); err != nil {
		t.Fatalf("second Watch = %v, want nil", err)
	}
	run(t, rdb, obtainSrc, "k2", "v", 1000)
	if n := a.calls.Load() - once; n != once {
		t.Errorf("adapter asked %d times for one command after two Watch calls, want %d as after one", n, once)
	}
	if got := len(reg.Clients()); got != 1 {
		t.Errorf("len(Clients()) = %d, want 1", got)
	}
	var nilClient *redis.Client
	for _, c := range []redis.UniversalClient{nil, nilClient} {
		if err := reg.Watch(c); !errors.Is(err, ErrNilClient) {
			t.Errorf("Watch(%T nil) = %v, want ErrNilClient", c, err)
		}
	}
}

func TestIgnoresOtherCommandsAndUntrackedContext(t *testing.T) {
	a := &scriptAdapter{}
	reg, rdb, _ := newWatched(t, a)
	ctx := context.Background()
	rdb.Set(ctx, "plain", "v", 0)
	rdb.Get(ctx, "plain")
	rdb.Do(ctx, "PING")
	rdb.SetNX(ctx, "plain-nx", "v", time.Second)
	if n := a.calls.Load(); n != 1 { // the SET NX only
		t.Errorf("adapter asked %d times, want 1 (SET NX only)", n)
	}
	rdb.Eval(WithoutTracking(ctx), obtainSrc, []string{"k"}, "v", 1000)
	if n := reg.Len(); n != 0 {
		t.Errorf("Len() after an untracked obtain = %d, want 0", n)
	}
}

// A panicking adapter changes neither the command's result nor its error.
func TestPanickingAdapterIsContained(t *testing.T) {
	reg, rdb, _ := newWatched(t, &scriptAdapter{panic: true})
	v, err := run(t, rdb, obtainSrc, "k", "v", 1000).Result()
	if err != nil || v != "OK" {
		t.Errorf("obtain through a panicking adapter = %v, %v, want OK, nil", v, err)
	}
	if n := reg.Len(); n != 0 {
		t.Errorf("Len() = %d, want 0", n)
	}
}

func TestConfirmAndDrop(t *testing.T) {
	reg, rdb, _ := newWatched(t, &scriptAdapter{})
	run(t, rdb, obtainSrc, "k", "v", 1000)
	at := time.Now().Add(time.Second)
	n := reg.Confirm(rdb, at, []Ref{{Key: "k", Value: "v", TTL: time.Second}, {Key: "k", Value: "other"}, {Key: "gone", Value: "v"}})
	if n != 1 {
		t.Errorf("Confirm = %d, want 1", n)
	}
	l, _ := reg.Get(rdb, "k")
	if l.Renewals != 1 || !l.ConfirmedAt.Equal(at) {
		t.Errorf("after Confirm: renewals %d, confirmed %v, want 1, %v", l.Renewals, l.ConfirmedAt, at)
	}
	if _, ok := reg.Drop(rdb, "k", "other"); ok {
		t.Error("Drop of another value = true, want false")
	}
	if _, ok := reg.Drop(rdb, "k", "v"); !ok || reg.Len() != 0 {
		t.Errorf("Drop = %v, Len %d, want true, 0", ok, reg.Len())
	}
}

// I3 at the registry: a release does not return while a renewal planned
// before it is being sent, and a renewal planned before it but sent after
// it is filtered out.
func TestHoldOrdersReleaseAfterRenewal(t *testing.T) {
	reg, rdb, _ := newWatched(t, &scriptAdapter{})
	run(t, rdb, obtainSrc, "k", "v", 1000)
	sending := make(chan struct{})
	finish := make(chan struct{})
	var sent atomic.Bool
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		live, done := reg.Hold(rdb, []Ref{{Key: "k", Value: "v"}})
		defer done()
		if len(live) != 1 {
			t.Errorf("Hold() live = %v, want the tracked lock", live)
		}
		close(sending)
		<-finish
		sent.Store(true)
	}()
	<-sending
	released := make(chan struct{})
	go func() {
		run(t, rdb, releaseSrc, "k", "v", 0)
		close(released)
	}()
	select {
	case <-released:
		t.Fatal("release returned while a renewal was being sent")
	case <-time.After(100 * time.Millisecond):
	}
	close(finish)
	<-released
	<-finished
	if !sent.Load() {
		t.Fatal("renewal did not complete")
	}
	live, unhold := reg.Hold(rdb, []Ref{{Key: "k", Value: "v"}})
	unhold()
	unhold() // idempotent
	if len(live) != 0 {
		t.Errorf("Hold() after release = %v, want no live lock", live)
	}
}

func TestSubscribeCancel(t *testing.T) {
	reg, rdb, _ := newWatched(t, &scriptAdapter{})
	var n atomic.Int64
	cancel := reg.Subscribe(func(Event) { n.Add(1) })
	run(t, rdb, obtainSrc, "a", "v", 1000)
	cancel()
	cancel()
	run(t, rdb, obtainSrc, "b", "v", 1000)
	if got := n.Load(); got != 1 {
		t.Errorf("events seen = %d, want 1", got)
	}
}

// The hook allocates nothing for a command that is not SET, EVAL or EVALSHA.
func TestHookDoesNotAllocateForOtherCommands(t *testing.T) {
	h := &hook{r: New(&scriptAdapter{}), t: &table{locks: map[string]*entry{}}}
	next := h.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	ctx := context.Background()
	for _, cmd := range []redis.Cmder{
		redis.NewStringCmd(ctx, "get", "key"),
		redis.NewStatusCmd(ctx, "set", "key", "value"),
		redis.NewStatusCmd(ctx, "set", "key", "value", "ex", int64(10)),
		redis.NewIntCmd(ctx, "INCR", "key"),
	} {
		if n := testing.AllocsPerRun(1000, func() { _ = next(ctx, cmd) }); n != 0 {
			t.Errorf("hook(%v) allocates %v times, want 0", cmd.Args(), n)
		}
	}
}

func TestLockCommandName(t *testing.T) {
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"set", "k", "v"}, ""},
		{[]any{"set", "k", "v", "ex", int64(10)}, ""},
		{[]any{"set", "k", "v", "px", int64(10), "nx"}, "set"},
		{[]any{"SET", "k", "v", "NX"}, "set"},
		{[]any{"set", "k", "v", []byte("nx")}, ""},
		{[]any{"set", "nx", "nx"}, ""},
		{[]any{"EvalSha", "sha", 1}, "evalsha"},
		{[]any{"eval", "src", 0}, "eval"},
		{[]any{"get", "k", "x"}, ""},
		{[]any{"set", "k"}, ""},
		{[]any{[]byte("set"), "k", "v"}, ""},
		{[]any{"setnx", "k", "v"}, ""},
		{nil, ""},
	} {
		if got := lockCommandName(tc.args); got != tc.want {
			t.Errorf("lockCommandName(%v) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func BenchmarkHookOtherCommand(b *testing.B) {
	h := &hook{r: New(&scriptAdapter{}), t: &table{locks: map[string]*entry{}}}
	next := h.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	ctx := context.Background()
	for _, cmd := range []redis.Cmder{
		redis.NewStringCmd(ctx, "get", "key"),
		redis.NewStatusCmd(ctx, "set", "key", "value", "ex", int64(10)),
	} {
		b.Run(cmd.Name(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = next(ctx, cmd)
			}
		})
	}
}

// The registry's own cost of one obtain and one release seen by the hook
// (classification by a trivial adapter, the table update and the events),
// with a 100k-lock table and no client around it.
func BenchmarkHookObtainRelease(b *testing.B) {
	r := New(&scriptAdapter{})
	t := &table{locks: map[string]*entry{}, gen: 1, releasing: map[releasing]int{}}
	for i := range 100_000 {
		t.locks[fmt.Sprint("other:", i)] = &entry{value: "v", ttl: time.Minute}
	}
	h := &hook{r: r, t: t}
	next := h.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	ctx := context.Background()
	obtain := redis.NewCmd(ctx, "eval", obtainSrc, 1, "job:1", "token", 60000)
	release := redis.NewCmd(ctx, "eval", releaseSrc, 1, "job:1", "token")
	b.ReportAllocs()
	for b.Loop() {
		_ = next(ctx, obtain)
		_ = next(ctx, release)
	}
	if len(t.locks) != 100_000 {
		b.Fatalf("table has %d locks after the loop, want 100000", len(t.locks))
	}
}

func TestPlan(t *testing.T) {
	reg, rdb, _ := newWatched(t, &scriptAdapter{})
	const n = 2*planBatch + 7 // the table is listed in several batches
	for i := range n {
		run(t, rdb, obtainSrc, fmt.Sprint("p:", i), "v", 60000)
	}
	after := time.Now()
	run(t, rdb, obtainSrc, "p:late", "v", 60000)

	refs, held := reg.Plan(rdb, time.Time{}, nil)
	if len(refs) != n+1 || len(held) != 0 {
		t.Fatalf("Plan(no max hold) = %d refs, %d held, want %d and 0", len(refs), len(held), n+1)
	}
	seen := map[string]bool{}
	for _, r := range refs {
		if seen[r.Key] || r.Value != "v" || r.TTL != time.Minute || r.e == nil {
			t.Fatalf("Plan listed %+v (seen before: %v), want each lock once with its value, TTL and entry", r, seen[r.Key])
		}
		seen[r.Key] = true
	}
	refs, held = reg.Plan(rdb, after, nil)
	if len(refs) != 1 || refs[0].Key != "p:late" || len(held) != n {
		t.Errorf("Plan(held since the first %d) = %d refs, %d held, want 1 (p:late) and %d", n, len(refs), len(held), n)
	}
	refs, _ = reg.Plan(rdb, time.Time{}, func(l Lock) bool { return l.Key == "p:3" })
	if len(refs) != 1 || refs[0].Key != "p:3" {
		t.Errorf("Plan(keep p:3) = %v, want only p:3", refs)
	}

	// Refs from Plan: Hold keeps them while nothing was untracked, and
	// drops a released one when something was; Confirm skips it.
	gen := reg.Generation(rdb)
	refs, _ = reg.Plan(rdb, time.Time{}, func(l Lock) bool { return l.Key == "p:1" || l.Key == "p:2" })
	live, done := reg.HoldSince(rdb, refs, gen)
	done()
	if len(live) != 2 {
		t.Fatalf("HoldSince(same generation) kept %d of 2", len(live))
	}
	run(t, rdb, releaseSrc, "p:1", "v", 0)
	live, done = reg.HoldSince(rdb, refs, gen)
	done()
	if len(live) != 1 || live[0].Key != "p:2" {
		t.Fatalf("HoldSince after releasing p:1 = %v, want only p:2", live)
	}
	refs, _ = reg.Plan(rdb, time.Time{}, func(l Lock) bool { return l.Key == "p:2" || l.Key == "p:3" })
	run(t, rdb, releaseSrc, "p:3", "v", 0)
	if got := reg.Confirm(rdb, time.Now(), refs); got != 1 {
		t.Errorf("Confirm(p:2, released p:3) = %d, want 1", got)
	}
	if l, _ := reg.Get(rdb, "p:2"); l.Renewals != 1 {
		t.Errorf("p:2 renewals = %d, want 1", l.Renewals)
	}
}

func TestPlanBatches(t *testing.T) {
	reg, rdb, _ := newWatched(t, &scriptAdapter{})
	const n = 2500
	for i := range n {
		run(t, rdb, obtainSrc, fmt.Sprint("b:", i), "v", 60000)
	}
	var sizes []int
	seen := map[string]bool{}
	reg.PlanBatches(rdb, time.Time{}, nil, 1000, func(refs, held []Ref) bool {
		sizes = append(sizes, len(refs))
		for _, r := range refs {
			seen[r.Key] = true
		}
		// fn runs without the table: the registry is usable from it, and a
		// release here is not listed later.
		if _, ok := reg.Get(rdb, refs[0].Key); !ok {
			t.Errorf("Get(%s) from fn found nothing", refs[0].Key)
		}
		return true
	})
	if fmt.Sprint(sizes) != "[1000 1000 500]" || len(seen) != n {
		t.Errorf("batches %v covering %d locks, want [1000 1000 500] covering %d", sizes, len(seen), n)
	}
	calls := 0
	reg.PlanBatches(rdb, time.Time{}, nil, 1000, func([]Ref, []Ref) bool { calls++; return false })
	if calls != 1 {
		t.Errorf("fn called %d times after returning false, want 1", calls)
	}
	reg.PlanBatches(rdb, time.Time{}, nil, 0, func([]Ref, []Ref) bool { t.Error("fn called with size 0"); return true })
}

// Listing a large table lets the client's lock commands through: an obtain
// sent while Plan runs does not wait for the whole listing.
func TestPlanLetsLockCommandsThrough(t *testing.T) {
	reg, rdb, _ := newWatched(t, &scriptAdapter{})
	tab := reg.tableOf(rdb)
	const n = 200_000
	tab.mu.Lock()
	for i := range n {
		tab.locks[fmt.Sprint("big:", i)] = &entry{value: "v", ttl: time.Minute}
	}
	tab.mu.Unlock()
	started := make(chan struct{})
	var once sync.Once
	var planDone, obtainDone atomic.Int64
	go func() {
		reg.Plan(rdb, time.Time{}, func(Lock) bool {
			once.Do(func() { close(started) })
			runtime.Gosched() // a slow filter: the listing takes a while
			return true
		})
		planDone.Store(time.Now().UnixNano())
	}()
	<-started
	run(t, rdb, obtainSrc, "late", "v", 60000)
	obtainDone.Store(time.Now().UnixNano())
	for planDone.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if obtainDone.Load() > planDone.Load() {
		t.Errorf("the obtain finished %v after Plan, want it let through while Plan ran",
			time.Duration(obtainDone.Load()-planDone.Load()))
	}
	if _, ok := reg.Get(rdb, "late"); !ok {
		t.Errorf("the obtain sent during Plan is not tracked")
	}
}
