package registry

import (
	"context"
	"errors"
	"fmt"
	"github.com/lockwatch/lockwatch/internal/table"
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
		if c.Pending {
			return Action{Op: OpRefresh, Key: key, Value: val, TTL: ttl}
		}
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
	if got := len(reg.set.Tables()); got != 1 {
		t.Errorf("watched clients = %d, want 1", got)
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

// WithoutTracking notes that the application uses the mark, and from then
// on a command sent on its own with it is ignored; the watchdog's mark
// (withoutTracking) leaves the note alone, and a pipeline carrying either
// mark is ignored whether or not the note was made.
func TestWithoutTrackingNote(t *testing.T) {
	saved := untrackedByApp.Load()
	t.Cleanup(func() { untrackedByApp.Store(saved) })
	untrackedByApp.Store(false)
	a := &scriptAdapter{}
	reg, rdb, _ := newWatched(t, a)
	ctx := context.Background()
	pipeline := func(ctx context.Context, key string) {
		t.Helper()
		pl := rdb.Pipeline()
		pl.Eval(ctx, obtainSrc, []string{key}, "v", 1000)
		if _, err := pl.Exec(ctx); err != nil {
			t.Fatalf("pipeline obtain of %s = %v", key, err)
		}
	}
	pipeline(withoutTracking(ctx), "watchdog-pipeline")
	if untrackedByApp.Load() {
		t.Errorf("the watchdog's mark noted that the application uses it")
	}
	if n, calls := reg.Len(), a.calls.Load(); n != 0 || calls != 0 {
		t.Errorf("pipeline with the watchdog's mark: %d tracked, adapter asked %d times; want 0 and 0", n, calls)
	}
	rdb.Eval(WithoutTracking(ctx), obtainSrc, []string{"app-single"}, "v", 1000)
	if !untrackedByApp.Load() {
		t.Errorf("WithoutTracking did not note that the application uses the mark")
	}
	pipeline(WithoutTracking(ctx), "app-pipeline")
	if n, calls := reg.Len(), a.calls.Load(); n != 0 || calls != 0 {
		t.Errorf("commands with the application's mark: %d tracked, adapter asked %d times; want 0 and 0", n, calls)
	}
	rdb.Eval(ctx, obtainSrc, []string{"unmarked"}, "v", 1000)
	if n := reg.Len(); n != 1 {
		t.Errorf("Len() after an unmarked obtain = %d, want 1", n)
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

// I3 and refresh ordering at the registry: a release or refresh of a key
// whose renewal is in flight is not sent until the renewal ends, and while
// it is on its way the key is neither held for renewal nor dropped.
func TestHolderCommandsWaitForRenewalInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		ms   int
	}{
		{"release", releaseSrc, 0},
		{"refresh", refreshSrc, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, rdb, _ := newWatched(t, &scriptAdapter{})
			run(t, rdb, obtainSrc, "k", "v", 1000)
			tab := reg.set.Lookup(rdb)
			held := tab.Hold([]*table.Entry{tab.Get("k")})
			if len(held) != 1 {
				t.Fatalf("Hold(k) = %v, want the tracked lock", held)
			}
			sent := make(chan struct{})
			go func() {
				run(t, rdb, tc.src, "k", "v", tc.ms)
				close(sent)
			}()
			select {
			case <-sent:
				t.Fatalf("%s returned while a renewal of its key was in flight", tc.name)
			case <-time.After(100 * time.Millisecond):
			}
			// Waiting in Mark: the key is busy, so neither renewed nor dropped.
			tab.Lock()
			busy := held[0].Busy()
			_, dropped := tab.Drop(held[0])
			tab.Unlock()
			if !busy || dropped {
				t.Errorf("while the %s waits: Busy = %v, Drop = %v; want busy and not dropped", tc.name, busy, dropped)
			}
			tab.Settle(held, []int8{table.Renewed}, reg.set.Since(time.Now()), nil)
			select {
			case <-sent:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s still waiting 5s after the renewal ended", tc.name)
			}
			if again := tab.Hold([]*table.Entry{held[0]}); tc.name == "release" && len(again) != 0 {
				t.Errorf("Hold after the release = %v, want nothing to renew", again)
			}
			if l, ok := reg.Get(rdb, "k"); tc.name == "refresh" && (!ok || l.TTL != 5*time.Second) {
				t.Errorf("after the refresh: Get(k) = %+v, %v, want TTL 5s", l, ok)
			}
		})
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
	h := newHook(t, New(&scriptAdapter{}))
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
		{[]any{"sEt", "k", "v", "xx", "nX"}, "set"},
		{[]any{"set", "k", "v", "n\x18"}, ""}, // '\x18'|0x20 is '8', not 'x'
		{[]any{"set", "k", "v", "nxx"}, ""},
		{[]any{"EVAL", "src", 0}, "eval"},
		{[]any{"eva\x0c", "src", 0}, ""}, // '\x0c'|0x20 is ',', not 'l'
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
	h := newHook(b, New(&scriptAdapter{}))
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
	h := newHook(b, r)
	for i := range 100_000 {
		h.t.Apply(table.Change{Op: table.OpObtain, Key: fmt.Sprint("other:", i), Value: "v", TTL: time.Minute}, time.Now())
	}
	next := h.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	ctx := context.Background()
	obtain := redis.NewCmd(ctx, "eval", obtainSrc, 1, "job:1", "token", 60000)
	release := redis.NewCmd(ctx, "eval", releaseSrc, 1, "job:1", "token")
	b.ReportAllocs()
	for b.Loop() {
		_ = next(ctx, obtain)
		_ = next(ctx, release)
	}
	if n := h.t.Len(); n != 100_000 {
		b.Fatalf("table has %d locks after the loop, want 100000", n)
	}
}

// newHook returns r's hook for a client that is never used; the client is
// closed at tb's cleanup (newer go-redis releases start goroutines per
// client, which goleak would report).
func newHook(tb testing.TB, r *Registry) *hook {
	c := redis.NewClient(&redis.Options{})
	tb.Cleanup(func() { _ = c.Close() })
	t, _ := r.set.Add(c)
	return &hook{r: r, t: t}
}

// selectiveAdapter is a scriptAdapter that lists the commands it wants to
// be asked about.
type selectiveAdapter struct {
	scriptAdapter
	names []string
	panic bool // Commands panics
}

func (a *selectiveAdapter) Commands() []string {
	if a.panic {
		panic("Commands bug")
	}
	return a.names
}

// An adapter that is a CommandSelector is asked about the commands it
// lists only; one that is not, or whose Commands panics, about all of them.
func TestCommandSelector(t *testing.T) {
	setNX := func(rdb *redis.Client) {
		if err := rdb.SetNX(context.Background(), "app:1", "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		a       *selectiveAdapter
		wantSET bool
	}{
		{"eval only", &selectiveAdapter{names: []string{"eval", "evalsha"}}, false},
		{"upper case", &selectiveAdapter{names: []string{"EVAL", "SET"}}, true},
		{"Commands panics", &selectiveAdapter{panic: true}, true},
	} {
		reg, rdb, _ := newWatched(t, tc.a)
		setNX(rdb)
		asked := tc.a.calls.Load() > 0
		run(t, rdb, obtainSrc, "job", "v", 1000)
		if asked != tc.wantSET {
			t.Errorf("%s: asked about SET NX = %v, want %v", tc.name, asked, tc.wantSET)
		}
		if n := len(reg.Locks()); n != 1 {
			t.Errorf("%s: %d locks tracked after an EVAL obtain, want 1", tc.name, n)
		}
	}
	plain := &scriptAdapter{}
	_, rdb, _ := newWatched(t, plain)
	setNX(rdb)
	if plain.calls.Load() == 0 {
		t.Errorf("an adapter that is no CommandSelector was not asked about SET NX")
	}
}
