package adapterkit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

const testLibrary = "example.com/testlock"

// testClassify classifies the test library's commands: a SET NX is an
// obtain, the lock script a refresh, the unlock script a release.
func testClassify(p Pins[script]) func(registry.Command) registry.Action {
	return func(c registry.Command) registry.Action {
		if c.Err != nil || len(c.Args) < 3 {
			return registry.Action{}
		}
		if c.Name == "set" {
			key, _ := Text(c.Args[1])
			value, _ := Text(c.Args[2])
			return registry.Action{Op: registry.OpObtain, Key: key, Value: value}
		}
		if len(c.Args) < 5 {
			return registry.Action{}
		}
		key, _ := Text(c.Args[3])
		value, _ := Text(c.Args[4])
		switch p.Script(c.Name, c.Args[1]) {
		case scriptLock:
			return registry.Action{Op: registry.OpRefresh, Key: key, Value: value}
		case scriptUnlock:
			return registry.Action{Op: registry.OpRelease, Key: key, Value: value}
		}
		return registry.Action{}
	}
}

// testAnswer answers SET with OK, EVALSHA with NOSCRIPT and EVAL with the
// step's reply.
func testAnswer(name string, cmd redis.Cmder, reply any) (any, error) {
	switch c := cmd.(type) {
	case *redis.StatusCmd:
		if name == "set" {
			c.SetVal("OK")
			return "OK", nil
		}
	case *redis.Cmd:
		switch name {
		case "evalsha":
			return nil, ErrNoScript
		case "eval":
			c.SetVal(reply)
			return reply, nil
		}
	}
	return nil, ErrUnsupported
}

func newTestRecorder(ps []Pin[script]) *Recorder[script] {
	p := NewPins(ps)
	return &Recorder[script]{Package: "testkit", Library: testLibrary, Pins: p, Classify: testClassify(p), Answer: testAnswer}
}

var (
	lockScript   = redis.NewScript(lockSource)
	unlockScript = redis.NewScript(unlockSource)
)

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testSteps is the test library's probe script: SET, then the lock script,
// then the unlock script.
func testSteps(ctx context.Context, rdb *redis.Client) []Step[script] {
	want := func(op registry.Op) func() registry.Action {
		return func() registry.Action { return registry.Action{Op: op, Key: "k", Value: "v"} }
	}
	return []Step[script]{
		{Name: "obtain", Run: func() error { return rdb.Set(ctx, "k", "v", 0).Err() }, Want: want(registry.OpObtain)},
		{Name: "refresh", Script: scriptLock, Reply: "OK", Run: func() error {
			return lockScript.Run(ctx, rdb, []string{"k"}, "v", 1000).Err()
		}, Want: want(registry.OpRefresh)},
		{Name: "release", Script: scriptUnlock, Reply: int64(1), Run: func() error {
			return unlockScript.Run(ctx, rdb, []string{"k"}, "v").Err()
		}, Want: want(registry.OpRelease)},
	}
}

func TestRecorderProbe(t *testing.T) {
	rec := newTestRecorder(testPins)
	if err := rec.Probe(testContext(t), testSteps); err != nil {
		t.Fatalf("Probe() = %v, want nil", err)
	}
	type entry struct {
		step, name, sha1 string
		script           script
		op, pending      registry.Op
	}
	var got []entry
	for _, s := range rec.Seen() {
		name, _ := s.Args[0].(string)
		got = append(got, entry{s.Step, name, s.SHA1, s.Script, s.Act.Op, s.Pending.Op})
	}
	want := []entry{
		{"obtain", "set", "", scriptUnknown, registry.OpObtain, registry.OpObtain},
		{"refresh", "evalsha", lockSHA1, scriptLock, registry.OpNone, registry.OpRefresh}, // NOSCRIPT
		{"refresh", "eval", lockSHA1, scriptLock, registry.OpRefresh, registry.OpRefresh},
		{"release", "evalsha", unlockSHA1, scriptUnlock, registry.OpNone, registry.OpRelease},
		{"release", "eval", unlockSHA1, scriptUnlock, registry.OpRelease, registry.OpRelease},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Seen() = %+v, want %+v", got, want)
	}
}

func TestRecorderUnpinned(t *testing.T) {
	for _, tt := range []struct {
		name string
		pins []Pin[script]
		want []registry.Script
	}{
		{"no lock pin", testPins[1:], []registry.Script{{Use: "refresh", SHA1: lockSHA1}}},
		{"no pins", nil, []registry.Script{{Use: "refresh", SHA1: lockSHA1}, {Use: "release", SHA1: unlockSHA1}}},
	} {
		err := newTestRecorder(tt.pins).Probe(testContext(t), testSteps)
		if !errors.Is(err, registry.ErrUpstreamChanged) {
			t.Fatalf("Probe(%s) = %v, want an error wrapping ErrUpstreamChanged", tt.name, err)
		}
		var changed *registry.UpstreamChangedError
		if !errors.As(err, &changed) {
			t.Fatalf("Probe(%s) = %T, want *registry.UpstreamChangedError", tt.name, err)
		}
		if changed.Library != testLibrary || changed.Version != "(unknown)" {
			t.Errorf("Probe(%s): Library, Version = %q, %q, want %q, (unknown)", tt.name, changed.Library, changed.Version, testLibrary)
		}
		if !slices.Equal(changed.Scripts, tt.want) {
			t.Errorf("Probe(%s): Scripts = %v, want %v (each once, in the order sent)", tt.name, changed.Scripts, tt.want)
		}
	}
}

func TestRecorderNotRecognised(t *testing.T) {
	// The unlock script pinned as the lock script: both script steps send
	// only scripts the adapter takes for another step's.
	rec := newTestRecorder([]Pin[script]{{SHA1: lockSHA1, Script: scriptUnlock}, {SHA1: unlockSHA1, Script: scriptLock}})
	err := rec.Probe(testContext(t), testSteps)
	want := "testkit: probe of " + testLibrary + " (unknown): no recognised command in step(s) refresh, release"
	if err == nil || err.Error() != want || errors.Is(err, registry.ErrUpstreamChanged) {
		t.Errorf("Probe() with swapped pins = %v, want %q", err, want)
	}
}

func TestRecorderSaw(t *testing.T) {
	obtain := registry.Action{Op: registry.OpObtain, Key: "k", Value: "v"}
	rec := newTestRecorder(testPins)
	rec.seen = []Seen[script]{
		{Step: "obtain", SHA1: strings.Repeat("0", 40), Act: obtain}, // an unknown script
		{Step: "refresh", SHA1: lockSHA1, Script: scriptLock, Act: obtain},
	}
	want := func() registry.Action { return obtain }
	tests := []struct {
		st   Step[script]
		want bool
	}{
		// A step without a pinned script must send a command that is no
		// script: an unknown script classified as wanted does not do.
		{Step[script]{Name: "obtain", Want: want}, false},
		{Step[script]{Name: "obtain"}, false},
		{Step[script]{Name: "refresh", Script: scriptLock, Want: want}, true},
		{Step[script]{Name: "refresh", Script: scriptLock}, true},
		{Step[script]{Name: "refresh", Script: scriptUnlock}, false},
		{Step[script]{Name: "refresh", Script: scriptLock, Want: func() registry.Action { return registry.Action{} }}, false},
		{Step[script]{Name: "release", Script: scriptLock}, false},
	}
	for _, tt := range tests {
		if got := rec.saw(tt.st); got != tt.want {
			t.Errorf("saw(%s, script %v, want set %v) = %v, want %v", tt.st.Name, tt.st.Script, tt.st.Want != nil, got, tt.want)
		}
	}
	rec.seen = append(rec.seen, Seen[script]{Step: "obtain", Act: obtain}) // a SET
	if !rec.saw(Step[script]{Name: "obtain", Want: want}) {
		t.Errorf("saw(obtain) after a SET classified as wanted = false, want true")
	}
}

func TestRecorderSawPending(t *testing.T) {
	keys := registry.Action{Op: registry.OpRefresh, Key: "k", Keys: []string{"k", "l"}, Value: "v", TTL: time.Second}
	one := registry.Action{Op: registry.OpRefresh, Key: "k", Value: "v", TTL: time.Second}
	rec := newTestRecorder(testPins)
	rec.seen = []Seen[script]{
		// NOSCRIPT, then the EVAL: only the EVAL is classified as wanted.
		{Step: "refresh", SHA1: lockSHA1, Script: scriptLock, Pending: keys},
		{Step: "refresh", SHA1: lockSHA1, Script: scriptLock, Act: keys, Pending: one},
	}
	is := func(a registry.Action) func() registry.Action { return func() registry.Action { return a } }
	tests := []struct {
		name string
		st   Step[script]
		want bool
	}{
		{"no pending check", Step[script]{Name: "refresh", Script: scriptLock, Want: is(keys)}, true},
		{"pending only", Step[script]{Name: "refresh", Script: scriptLock, WantPending: is(keys)}, true},
		{"pending only, other keys", Step[script]{Name: "refresh", Script: scriptLock, WantPending: is(one)}, true},
		// Both must hold for one command: the EVAL's pending answer
		// lacks the keys.
		{"both", Step[script]{Name: "refresh", Script: scriptLock, Want: is(keys), WantPending: is(keys)}, false},
		{"both, as classified", Step[script]{Name: "refresh", Script: scriptLock, Want: is(keys), WantPending: is(one)}, true},
		{"keys matter", Step[script]{Name: "refresh", Script: scriptLock, Want: is(one)}, false},
	}
	for _, tt := range tests {
		if got := rec.saw(tt.st); got != tt.want {
			t.Errorf("saw(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRecorderPendingRefused(t *testing.T) {
	// An adapter whose pending answers are wrong fails the probe's steps
	// that check them.
	p := NewPins(testPins)
	classify := testClassify(p)
	rec := &Recorder[script]{Package: "testkit", Library: testLibrary, Pins: p, Answer: testAnswer,
		Classify: func(c registry.Command) registry.Action {
			if c.Pending {
				return registry.Action{}
			}
			return classify(c)
		}}
	err := rec.Probe(testContext(t), func(ctx context.Context, rdb *redis.Client) []Step[script] {
		steps := testSteps(ctx, rdb)
		for i := range steps {
			steps[i].WantPending = steps[i].Want
		}
		return steps
	})
	want := "testkit: probe of " + testLibrary + " (unknown): no recognised command in step(s) obtain, refresh, release"
	if err == nil || err.Error() != want {
		t.Errorf("Probe() with wrong pending answers = %v, want %q", err, want)
	}
	// The right ones pass.
	err = newTestRecorder(testPins).Probe(testContext(t), func(ctx context.Context, rdb *redis.Client) []Step[script] {
		steps := testSteps(ctx, rdb)
		for i := range steps {
			steps[i].WantPending = steps[i].Want
		}
		return steps
	})
	if err != nil {
		t.Errorf("Probe() checking pending answers = %v, want nil", err)
	}
}

func TestRecorderWantNil(t *testing.T) {
	// Without Want, sending the step's script is enough, whatever Classify
	// made of it.
	p := NewPins(testPins)
	rec := &Recorder[script]{Package: "testkit", Library: testLibrary, Pins: p, Answer: testAnswer,
		Classify: func(registry.Command) registry.Action { return registry.Action{} }}
	err := rec.Probe(testContext(t), func(ctx context.Context, rdb *redis.Client) []Step[script] {
		return []Step[script]{{Name: "refresh", Script: scriptLock, Reply: "OK", Run: func() error {
			return lockScript.Run(ctx, rdb, []string{"k"}, "v", 1000).Err()
		}}}
	})
	if err != nil {
		t.Errorf("Probe() of a step without Want that sent its script = %v, want nil", err)
	}
}

func TestRecorderStepError(t *testing.T) {
	errBoom := errors.New("boom")
	rec := newTestRecorder(testPins)
	err := rec.Probe(testContext(t), func(ctx context.Context, rdb *redis.Client) []Step[script] {
		return []Step[script]{
			{Name: "obtain", Run: func() error { return rdb.Set(ctx, "k", "v", 0).Err() }},
			{Name: "refresh", Script: scriptLock, Run: func() error { return errBoom }},
			{Name: "never", Run: func() error { t.Errorf("a step after a failed one ran"); return nil }},
		}
	})
	want := "testkit: probe of " + testLibrary + " (unknown): refresh: boom"
	if !errors.Is(err, errBoom) || err.Error() != want {
		t.Errorf("Probe() with a failing step = %v, want %q wrapping the step's error", err, want)
	}

	// A library that fails after sending an unpinned script changed upstream.
	err = newTestRecorder(testPins[1:]).Probe(testContext(t), func(ctx context.Context, rdb *redis.Client) []Step[script] {
		return []Step[script]{{Name: "refresh", Script: scriptLock, Run: func() error {
			_ = lockScript.Run(ctx, rdb, []string{"k"}, "v", 1000).Err()
			return errBoom
		}}}
	})
	if !errors.Is(err, registry.ErrUpstreamChanged) {
		t.Errorf("Probe() failing after an unpinned script = %v, want an error wrapping ErrUpstreamChanged", err)
	}

	// Commands the fake does not support fail the library's call.
	err = newTestRecorder(testPins).Probe(testContext(t), func(ctx context.Context, rdb *redis.Client) []Step[script] {
		return []Step[script]{{Name: "get", Run: func() error { return rdb.Get(ctx, "k").Err() }}}
	})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "get: ERR lockwatch probe does not support this command") {
		t.Errorf("Probe() of a GET = %v, want the fake's unsupported error", err)
	}
}

func TestRecorderContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err := newTestRecorder(testPins).Probe(ctx, func(context.Context, *redis.Client) []Step[script] {
		called = true
		return nil
	})
	if !errors.Is(err, context.Canceled) || called {
		t.Errorf("Probe(cancelled) = %v (steps built: %v), want context.Canceled before any step", err, called)
	}

	_ = newTestRecorder(testPins).Probe(context.Background(), func(ctx context.Context, _ *redis.Client) []Step[script] {
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > ProbeTimeout {
			t.Errorf("the steps' context deadline = %v, %v, want at most ProbeTimeout away", d, ok)
		}
		return nil
	})
}

func TestRecorderPipeline(t *testing.T) {
	rec := newTestRecorder(testPins)
	err := rec.Probe(testContext(t), func(ctx context.Context, rdb *redis.Client) []Step[script] {
		return []Step[script]{{Name: "pipeline", Reply: int64(1), Run: func() error {
			cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "k", "v", 0)
				p.Get(ctx, "k")
				p.Eval(ctx, unlockSource, []string{"k"}, "v")
				return nil
			})
			if len(cmds) != 3 || cmds[0].Err() != nil || !errors.Is(cmds[1].Err(), ErrUnsupported) || cmds[2].Err() != nil {
				t.Errorf("Pipelined() commands = %v, want SET and EVAL answered, GET unsupported", cmds)
			}
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("Pipelined() = %v, want the first error, the GET's", err)
			}
			return nil
		}}}
	})
	if err != nil {
		t.Fatalf("Probe() = %v, want nil", err)
	}
	var names []string
	for _, s := range rec.Seen() {
		name, _ := s.Args[0].(string)
		names = append(names, name)
	}
	if got, want := strings.Join(names, ","), "set,eval"; got != want {
		t.Errorf("Seen() after a pipeline = %s, want %s: SET, EVAL and EVALSHA only", got, want)
	}
}

func TestRecorderNoNetwork(t *testing.T) {
	rec := newTestRecorder(testPins)
	rdb := rec.client()
	defer rdb.Close()
	want := "testkit: probe client has no network"
	if _, err := rdb.Options().Dialer(context.Background(), "tcp", "lockwatch.invalid:6379"); err == nil || err.Error() != want {
		t.Errorf("the fake client's Dialer() = %v, want %q", err, want)
	}
	dial := hook[script]{r: rec, noNetwork: errors.New(want)}.DialHook(nil)
	if _, err := dial(context.Background(), "tcp", "lockwatch.invalid:6379"); err == nil || err.Error() != want {
		t.Errorf("the fake client's DialHook() = %v, want %q", err, want)
	}
}

func TestRecorderClassifyUnlocked(t *testing.T) {
	// Classify runs without the recorder's lock held: it may take its time
	// (a stack walk), and here reads what was recorded so far. It is asked
	// twice per command: pending, before the answer, then with it.
	var rec *Recorder[script]
	counts := []int{}
	p := NewPins(testPins)
	rec = &Recorder[script]{Package: "testkit", Library: testLibrary, Pins: p, Answer: testAnswer,
		Classify: func(c registry.Command) registry.Action {
			counts = append(counts, len(rec.Seen()))
			return testClassify(p)(c)
		}}
	if err := rec.Probe(testContext(t), testSteps); err != nil {
		t.Fatalf("Probe() = %v, want nil", err)
	}
	if want := []int{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}; !slices.Equal(counts, want) {
		t.Errorf("len(Seen()) inside Classify = %v, want %v", counts, want)
	}
}

func TestErrorReplies(t *testing.T) {
	// go-redis's Script.Run falls back to EVAL only on an error reply that
	// starts with NOSCRIPT.
	if !redis.HasErrorPrefix(ErrNoScript, "NOSCRIPT") {
		t.Errorf("HasErrorPrefix(ErrNoScript, NOSCRIPT) = false, want true")
	}
	for _, err := range []error{ErrNoScript, ErrUnsupported} {
		var reply redis.Error
		if !errors.As(err, &reply) {
			t.Errorf("%v is no redis.Error, want an error reply", err)
		}
	}
}
