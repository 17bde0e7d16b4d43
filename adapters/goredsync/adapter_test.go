package goredsync

import (
	"context"
	"errors"
	"math"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// upstreamSources runs the linked redsync against the probe's recorder and
// returns the source it sent with EVAL for each script, so that tests need
// not carry copies of redsync's Lua.
func upstreamSources(t testing.TB) map[script]string {
	t.Helper()
	return adaptertest.Sources(t, "redsync", New().recorder(), New().probe, pins)
}

// setHook answers every SET with success and, the first time, calls onSet
// on the goroutine that sent it.
type setHook struct{ onSet func() }

func (h *setHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *setHook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		if c, ok := cmd.(*redis.BoolCmd); ok && c.Name() == "set" {
			if h.onSet != nil {
				h.onSet()
				h.onSet = nil
			}
			c.SetVal(true)
			return nil
		}
		cmd.SetErr(adapterkit.ErrUnsupported)
		return adapterkit.ErrUnsupported
	}
}

func (h *setHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// onRedsyncStack runs fn inside the go-redis hook of the SET NX that
// redsync's Mutex.Lock sends, on redsync's goroutine, as the registry runs
// Classify. It needs no server.
func onRedsyncStack(t testing.TB, fn func()) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		MaxRetries: -1,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("goredsync: test client has no network")
		},
	})
	defer rdb.Close()
	ran := false
	rdb.AddHook(&setHook{onSet: func() { fn(); ran = true }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := redsync.New(goredis.NewPool(rdb)).NewMutex("lockwatch:test", redsync.WithTries(1))
	if err := m.LockContext(ctx); err != nil {
		t.Fatalf("Mutex.Lock() through the test hook = %v, want nil", err)
	}
	if !ran {
		t.Fatalf("Mutex.Lock() sent no SET")
	}
}

// cmd builds a command as the registry hook hands it over.
func cmd(name string, reply any, err error, args ...any) registry.Command {
	return registry.Command{Name: strings.ToLower(name), Args: append([]any{name}, args...), Reply: reply, Err: err}
}

// pending builds an EVALSHA as the registry hook hands it over before
// sending it.
func pending(args ...any) registry.Command {
	return registry.Command{Name: "evalsha", Args: append([]any{"evalsha"}, args...), Pending: true}
}

// pendingEval builds an EVAL as the registry hook hands it over before
// sending it.
func pendingEval(args ...any) registry.Command {
	return registry.Command{Name: "eval", Args: append([]any{"eval"}, args...), Pending: true}
}

func TestName(t *testing.T) {
	if got := New().Name(); got != "redsync" {
		t.Errorf("Name() = %q, want %q", got, "redsync")
	}
}

func TestClassifySet(t *testing.T) {
	none := registry.Action{}
	obtain := func(ttl time.Duration) registry.Action {
		return registry.Action{Op: registry.OpObtain, Key: "job:1", Value: "v1", TTL: ttl}
	}
	attempt := registry.Action{Op: registry.OpAttempt, Key: "job:1", Value: "v1"}
	bigEX := int64(math.MaxInt64/int64(time.Second)) + 1
	tests := []struct {
		name string
		cmd  registry.Command
		want registry.Action
	}{
		// as go-redis's SetNX writes it for redsync: lower case, PX below a second
		// or for fractions of seconds, EX otherwise
		{"setnx px", cmd("set", true, nil, "job:1", "v1", "px", int64(2500), "nx"), obtain(2500 * time.Millisecond)},
		{"setnx ex", cmd("set", true, nil, "job:1", "v1", "ex", int64(8), "nx"), obtain(8 * time.Second)},
		// other spellings Redis accepts
		{"upper case, NX first", cmd("SET", "OK", nil, "job:1", "v1", "NX", "PX", 1000), obtain(time.Second)},
		{"mixed case, string ttl", cmd("Set", "OK", nil, "job:1", "v1", "Ex", "3", "nX"), obtain(3 * time.Second)},
		{"[]byte key and value", cmd("set", true, nil, []byte("job:1"), []byte("v1"), "px", 10, "nx"), obtain(10 * time.Millisecond)},
		// not obtained: an attempt, counted towards a Redlock's servers
		{"not set", cmd("set", false, nil, "job:1", "v1", "px", int64(2500), "nx"), attempt},
		{"nil reply", cmd("set", nil, redis.Nil, "job:1", "v1", "NX", "PX", 1000), attempt},
		{"error", cmd("set", true, errors.New("i/o timeout"), "job:1", "v1", "px", int64(2500), "nx"), attempt},
		{"odd reply", cmd("set", "QUEUED", nil, "job:1", "v1", "px", int64(2500), "nx"), attempt},
		// not a lock
		{"no nx", cmd("set", "OK", nil, "job:1", "v1", "px", int64(2500)), none},
		{"no expiry", cmd("set", true, nil, "job:1", "v1", "nx"), none},
		{"xx", cmd("set", true, nil, "job:1", "v1", "px", int64(2500), "xx"), none},
		{"near miss of px", cmd("set", true, nil, "job:1", "v1", "p\x18", int64(2500), "nx"), none}, // '\x18'|0x20 is '8'
		{"nx and get", cmd("set", "OK", nil, "job:1", "v1", "nx", "px", 1, "get"), none},
		{"keepttl", cmd("set", true, nil, "job:1", "v1", "keepttl", "nx"), none},
		{"pxat", cmd("set", true, nil, "job:1", "v1", "pxat", int64(1e12), "nx"), none},
		{"nx twice", cmd("set", true, nil, "job:1", "v1", "nx", "nx"), none},
		{"px and ex", cmd("set", true, nil, "job:1", "v1", "px", 1, "ex", 1), none},
		{"px without value", cmd("set", true, nil, "job:1", "v1", "nx", "px"), none},
		{"zero ttl", cmd("set", true, nil, "job:1", "v1", "px", 0, "nx"), none},
		{"negative ttl", cmd("set", true, nil, "job:1", "v1", "ex", -1, "nx"), none},
		{"ttl overflows", cmd("set", true, nil, "job:1", "v1", "ex", bigEX, "nx"), none},
		{"float ttl", cmd("set", true, nil, "job:1", "v1", "px", 2.5, "nx"), none},
		{"duration ttl", cmd("set", true, nil, "job:1", "v1", "px", time.Second, "nx"), none},
		{"option not a string", cmd("set", true, nil, "job:1", "v1", "px", 1, []byte("nx")), none},
		{"int value", cmd("set", true, nil, "job:1", 7, "px", 1, "nx"), none},
		{"nil key", cmd("set", true, nil, nil, "v1", "px", 1, "nx"), none},
	}
	a := New()
	var got, noDeadline []registry.Action
	onRedsyncStack(t, func() {
		for _, tt := range tests {
			c := tt.cmd
			noDeadline = append(noDeadline, a.Classify(c))
			c.Deadline = time.Now().Add(time.Second) // redsync acquires under a context with a deadline
			got = append(got, a.Classify(c))
		}
	})
	for i, tt := range tests {
		if !adapterkit.SameAction(got[i], tt.want) {
			t.Errorf("Classify(%s: %v) from redsync = %+v, want %+v", tt.name, tt.cmd.Args, got[i], tt.want)
		}
		// Without a context deadline it cannot be redsync's: no walk at all.
		if !adapterkit.SameAction(noDeadline[i], none) {
			t.Errorf("Classify(%s: %v) from redsync without a deadline = %+v, want %+v", tt.name, tt.cmd.Args, noDeadline[i], none)
		}
		// The same command sent by the application is never a redsync lock,
		// deadline or not.
		c := tt.cmd
		c.Deadline = time.Now().Add(time.Second)
		if app := a.Classify(c); !adapterkit.SameAction(app, none) {
			t.Errorf("Classify(%s: %v) from the application = %+v, want %+v", tt.name, tt.cmd.Args, app, none)
		}
	}
}

// A pending SET NX is not an obtain, not even on redsync's stack: the
// registry learns redsync's obtains from their replies.
func TestClassifySetPending(t *testing.T) {
	a := New()
	tests := []registry.Command{
		{Name: "set", Args: []any{"set", "job:1", "v1", "px", int64(2500), "nx"}, Pending: true},
		{Name: "set", Args: []any{"set", "job:1", "v1", "ex", int64(8), "nx"}, Pending: true},
		{Name: "set", Args: []any{"set", "job:1", "v1", "ex", int64(8), "nx"}, Reply: true, Pending: true},
	}
	var got []registry.Action
	onRedsyncStack(t, func() {
		for _, c := range tests {
			got = append(got, a.Classify(c))
		}
	})
	for i, c := range tests {
		if !adapterkit.SameAction(got[i], registry.Action{}) {
			t.Errorf("Classify(pending %v) on redsync's stack = %+v, want OpNone", c.Args, got[i])
		}
	}
}

func TestClassifyScripts(t *testing.T) {
	src := upstreamSources(t)
	errIO := errors.New("i/o timeout")
	noScriptErr := adaptertest.RedisError("NOSCRIPT No matching script")
	none := registry.Action{}
	refresh := func(ttl time.Duration) registry.Action {
		return registry.Action{Op: registry.OpRefresh, Key: "job:1", Value: "v1", TTL: ttl}
	}
	notHeld := registry.Action{Op: registry.OpNotHeld, Key: "job:1", Value: "v1"}
	release := registry.Action{Op: registry.OpRelease, Key: "job:1", Value: "v1"}

	var tests []struct {
		name string
		cmd  registry.Command
		want registry.Action
	}
	add := func(name string, c registry.Command, want registry.Action) {
		tests = append(tests, struct {
			name string
			cmd  registry.Command
			want registry.Action
		}{name, c, want})
	}
	// Mutex.Unlock, and Mutex.Lock after a failed quorum: key, value.
	add("delete", cmd("evalsha", int64(1), nil, deleteSHA1, 1, "job:1", "v1"), release)
	add("delete eval", cmd("eval", int64(1), nil, src[scriptDelete], 1, "job:1", "v1"), release)
	add("delete, taken", cmd("evalsha", int64(0), nil, deleteSHA1, 1, "job:1", "v1"), release)
	add("delete, expired", cmd("evalsha", int64(-1), nil, deleteSHA1, 1, "job:1", "v1"), release)
	add("delete, noscript", cmd("evalsha", nil, noScriptErr, deleteSHA1, 1, "job:1", "v1"), release)
	add("delete, error", cmd("evalsha", nil, errIO, deleteSHA1, 1, "job:1", "v1"), release)
	add("delete upper-case sha", cmd("EVALSHA", int64(1), nil, strings.ToUpper(deleteSHA1), 1, "job:1", "v1"), release)
	add("delete []byte args", cmd("evalsha", int64(1), nil, []byte(deleteSHA1), "1", []byte("job:1"), []byte("v1")), release)
	add("delete extra arg", cmd("evalsha", int64(1), nil, deleteSHA1, 1, "job:1", "v1", 8000), none)
	add("delete two keys", cmd("evalsha", int64(1), nil, deleteSHA1, 2, "job:1", "v1"), none)
	add("delete int key", cmd("evalsha", int64(1), nil, deleteSHA1, 1, 1, "v1"), none)
	// Mutex.Extend: key, value, expiry in ms as an int.
	for _, s := range []struct {
		name string
		sha  string
		src  string
	}{{"touch", touchSHA1, src[scriptTouch]}, {"touchWithSetNX", touchWithSetNXSHA1, src[scriptTouchWithSetNX]}} {
		add(s.name, cmd("evalsha", int64(1), nil, s.sha, 1, "job:1", "v1", 8000), refresh(8*time.Second))
		add(s.name+" eval", cmd("eval", int64(1), nil, s.src, 1, "job:1", "v1", 8000), refresh(8*time.Second))
		add(s.name+" string expiry", cmd("evalsha", int64(1), nil, s.sha, 1, "job:1", "v1", "2500"), refresh(2500*time.Millisecond))
		add(s.name+", not held", cmd("evalsha", int64(0), nil, s.sha, 1, "job:1", "v1", 8000), notHeld)
		add(s.name+" to zero deletes", cmd("evalsha", int64(1), nil, s.sha, 1, "job:1", "v1", 0), release)
		add(s.name+", noscript", cmd("evalsha", nil, noScriptErr, s.sha, 1, "job:1", "v1", 8000), none)
		add(s.name+", error", cmd("evalsha", nil, errIO, s.sha, 1, "job:1", "v1", 8000), none)
		add(s.name+", odd reply", cmd("evalsha", int64(2), nil, s.sha, 1, "job:1", "v1", 8000), none)
		add(s.name+", string reply", cmd("evalsha", "1", nil, s.sha, 1, "job:1", "v1", 8000), none)
		add(s.name+", expiry not a number", cmd("evalsha", int64(1), nil, s.sha, 1, "job:1", "v1", "8s"), none)
		add(s.name+", float expiry", cmd("evalsha", int64(1), nil, s.sha, 1, "job:1", "v1", 8000.0), none)
		add(s.name+", expiry overflows", cmd("evalsha", int64(1), nil, s.sha, 1, "job:1", "v1", int64(math.MaxInt64)), none)
		add(s.name+" without expiry", cmd("evalsha", int64(1), nil, s.sha, 1, "job:1", "v1"), none)
	}
	// Asked before sending (Pending): as each will be if it succeeds.
	add("pending delete", pending(deleteSHA1, 1, "job:1", "v1"), release)
	add("pending delete eval", pendingEval(src[scriptDelete], 1, "job:1", "v1"), release)
	add("pending touch", pending(touchSHA1, 1, "job:1", "v1", 8000), refresh(8*time.Second))
	add("pending touch eval", pendingEval(src[scriptTouch], 1, "job:1", "v1", 8000), refresh(8*time.Second))
	add("pending touchWithSetNX", pending(touchWithSetNXSHA1, 1, "job:1", "v1", int64(2500)), refresh(2500*time.Millisecond))
	add("pending touch to zero", pending(touchSHA1, 1, "job:1", "v1", 0), release)
	add("pending touch, expiry not a number", pending(touchSHA1, 1, "job:1", "v1", "8s"), none)
	add("pending delete extra arg", pending(deleteSHA1, 1, "job:1", "v1", 8000), none)
	add("pending unknown sha", pending(strings.Repeat("0", 40), 1, "job:1", "v1"), none)
	// Several keys: redsync runs its scripts on one.
	add("delete two keys", cmd("evalsha", int64(1), nil, deleteSHA1, 2, "job:1", "job:2", "v1"), none)
	add("touch two keys", cmd("evalsha", int64(1), nil, touchSHA1, 2, "job:1", "job:2", "v1", 8000), none)
	add("pending touch two keys", pending(touchSHA1, 2, "job:1", "job:2", "v1", 8000), none)
	// Neither.
	add("unknown sha", cmd("evalsha", int64(1), nil, strings.Repeat("0", 40), 1, "job:1", "v1"), none)
	add("sha not a string", cmd("evalsha", int64(1), nil, 42, 1, "job:1", "v1"), none)
	add("eval of the sha", cmd("eval", int64(1), nil, deleteSHA1, 1, "job:1", "v1"), none)
	add("evalsha of the source", cmd("evalsha", int64(1), nil, src[scriptDelete], 1, "job:1", "v1"), none)
	add("eval of other lua", cmd("eval", int64(1), nil, "return 1", 1, "job:1", "v1"), none)
	add("get", cmd("get", "v1", nil, "job:1"), none)
	add("no args", registry.Command{Name: "evalsha"}, none)

	a := New()
	for _, tt := range tests {
		if got := a.Classify(tt.cmd); !adapterkit.SameAction(got, tt.want) {
			t.Errorf("Classify(%s: %v) = %+v, want %+v", tt.name, tt.cmd.Args, got, tt.want)
		}
	}
}

func TestClassifyZeroValue(t *testing.T) {
	var a Adapter
	c := cmd("evalsha", int64(1), nil, touchSHA1, 1, "job:1", "v1", 8000)
	want := registry.Action{Op: registry.OpRefresh, Key: "job:1", Value: "v1", TTL: 8 * time.Second}
	if got := a.Classify(c); !adapterkit.SameAction(got, want) {
		t.Errorf("Adapter{}.Classify(touch) = %+v, want %+v", got, want)
	}
}

func TestClassifyAllocs(t *testing.T) {
	a := New()
	for _, c := range []registry.Command{
		cmd("evalsha", int64(1), nil, touchSHA1, 1, "job:1", "v1", 8000),
		cmd("evalsha", int64(0), nil, deleteSHA1, 1, "job:1", "v1"),
		pending(touchSHA1, 1, "job:1", "v1", 8000),
		pending(deleteSHA1, 1, "job:1", "v1"),
		{Name: "set", Args: []any{"set", "job:1", "v1", "ex", int64(8), "nx"}, Pending: true},
	} {
		if n := testing.AllocsPerRun(100, func() { a.Classify(c) }); n != 0 {
			t.Errorf("Classify(%v, pending %v) allocates %v times, want 0", c.Args, c.Pending, n)
		}
	}
}

func TestInRedsync(t *testing.T) {
	tests := []struct {
		fn   string
		want bool
	}{
		{"github.com/go-redsync/redsync/v4.(*Mutex).acquire", true},
		{"github.com/go-redsync/redsync/v4.(*Mutex).actOnPoolsAsync.func1", true},
		{"github.com/go-redsync/redsync/v4/redis/goredis/v9.(*conn).SetNX", true},
		{"github.com/go-redsync/redsync/v4", false},
		{"github.com/go-redsync/redsync/v40.f", false},
		{"github.com/go-redsync/redsync/v3.(*Mutex).acquire", false},
		{"github.com/go-redsync/redsync.(*Mutex).acquire", false},
		{"github.com/lockwatch/lockwatch/adapters/goredsync.calledFromRedsync", false},
		{"main.main", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := inRedsync(tt.fn); got != tt.want {
			t.Errorf("inRedsync(%q) = %v, want %v", tt.fn, got, tt.want)
		}
	}
}

// deep calls fn under n more frames.
//
//go:noinline
func deep(n int, fn func() bool) bool {
	if n == 0 {
		return fn()
	}
	return deep(n-1, fn)
}

func TestCalledFromRedsync(t *testing.T) {
	if calledFromRedsync() {
		t.Errorf("calledFromRedsync() from a test = true, want false")
	}
	tests := []struct {
		depth int
		want  bool
	}{
		{0, true},
		{stackChunk, true},          // found in the second chunk
		{3 * stackChunk, true},      // found in the fourth
		{maxStackDepth + 10, false}, // beyond the bound
	}
	for _, tt := range tests {
		var got bool
		onRedsyncStack(t, func() { got = deep(tt.depth, calledFromRedsync) })
		if got != tt.want {
			t.Errorf("calledFromRedsync() %d frames above redsync = %v, want %v", tt.depth, got, tt.want)
		}
		if deep(tt.depth, calledFromRedsync) {
			t.Errorf("calledFromRedsync() %d frames above a test = true, want false", tt.depth)
		}
	}
}

// A stack found to be redsync's leaves a return address into redsync's code
// in redsyncPCs, and a later stack that has it is redsync's without a
// lookup of its window; other stacks are not.
func TestCalledFromRedsyncLearns(t *testing.T) {
	onRedsyncStack(t, func() { calledFromRedsync() })
	var kept []uintptr
	for i := range redsyncPCs {
		if pc := atomic.LoadUintptr(&redsyncPCs[i]); pc != 0 {
			kept = append(kept, pc)
		}
	}
	if len(kept) == 0 {
		t.Fatal("no return address into redsync kept after a call on redsync's stack")
	}
	for _, pc := range kept {
		frames := runtime.CallersFrames([]uintptr{pc})
		found := false
		for {
			f, more := frames.Next()
			found = found || inRedsync(f.Function)
			if !more {
				break
			}
		}
		if !found {
			t.Errorf("kept return address %#x is not in a function of redsync", pc)
		}
	}
	saved := verdicts.Swap(nil)
	t.Cleanup(func() { verdicts.Store(saved) })
	var got bool
	onRedsyncStack(t, func() { got = calledFromRedsync() })
	if !got {
		t.Errorf("calledFromRedsync() on redsync's stack = false, want true")
	}
	if m := verdicts.Load(); m != nil {
		t.Errorf("calledFromRedsync() on redsync's stack looked its window up (%d verdicts kept), want it stopped at the kept address", len(*m))
	}
	if calledFromRedsync() {
		t.Errorf("calledFromRedsync() from a test = true, want false")
	}
}

func BenchmarkClassify(b *testing.B) {
	a := New()
	touch := cmd("evalsha", int64(1), nil, touchSHA1, 1, "job:1", "v1", 8000)
	set := cmd("set", true, nil, "job:1", "v1", "ex", int64(8), "nx")
	set.Deadline = time.Now().Add(time.Hour) // redsync acquires under a deadline
	noDeadline := set
	noDeadline.Deadline = time.Time{}
	b.Run("evalsha-touch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a.Classify(touch)
		}
	})
	b.Run("set-nx-redsync", func(b *testing.B) {
		b.ReportAllocs()
		missed := 0 // no b.Fatal on redsync's goroutine
		onRedsyncStack(b, func() {
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if a.Classify(set).Op != registry.OpObtain {
					missed++
				}
			}
			b.StopTimer()
		})
		if missed > 0 {
			b.Fatalf("Classify(SET NX) from redsync was not an obtain %d times", missed)
		}
	})
	b.Run("set-nx-application", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a.Classify(set)
		}
	})
	b.Run("set-nx-application-no-deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a.Classify(noDeadline)
		}
	})
	b.Run("set-plain", func(b *testing.B) {
		plain := cmd("set", "OK", nil, "job:1", "v1")
		b.ReportAllocs()
		for b.Loop() {
			a.Classify(plain)
		}
	})
}

// The verdict for a call site is remembered: the same stacks give the same
// answers again, from the cache, and a stack its window cannot decide is
// walked whole every time.
func TestCalledFromRedsyncRemembers(t *testing.T) {
	for range 3 {
		var fromRedsync, deepRedsync bool
		onRedsyncStack(t, func() {
			fromRedsync = calledFromRedsync()
			deepRedsync = deep(windowFrames+5, calledFromRedsync)
		})
		if !fromRedsync || !deepRedsync {
			t.Fatalf("calledFromRedsync() on redsync's stack = %v (%d frames deeper: %v), want true", fromRedsync, windowFrames+5, deepRedsync)
		}
		if calledFromRedsync() || deep(windowFrames+5, calledFromRedsync) {
			t.Fatalf("calledFromRedsync() from a test = true, want false")
		}
	}
	if m := verdicts.Load(); m == nil || len(*m) == 0 {
		t.Errorf("no verdict remembered after the same call sites ran three times")
	}
	if n := testing.AllocsPerRun(100, func() { calledFromRedsync() }); n != 0 {
		t.Errorf("a remembered call site allocates %v times, want 0", n)
	}
}
