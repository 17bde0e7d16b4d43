package goredsync

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
)

// FuzzClassify feeds Classify commands of any name (in any case) with
// arguments of any type and count, answered with any of a few replies and
// errors, and checks that it never panics, only reads, and recognises only
// the pinned scripts with the arguments redsync sends, and SET NX only when
// redsync sent it. A SET is classified twice: from the test (never a lock)
// and on redsync's stack (a lock exactly when it is a successful SET NX with
// one expiry). Besides the seeds below, the seed corpus in
// testdata/fuzz/FuzzClassify holds the commands redsync really sends (see
// TestFuzzCorpus); plain go test runs all of them.
func FuzzClassify(f *testing.F) {
	src := upstreamSources(f)
	c := adaptertest.NewCodec(pins, src)
	const nameEvalSHA, nameEval, nameSet, nameGet, nameSetNX = 0, 1, 2, 3, 7
	seeds := []struct {
		name, caseSel, reply, err uint8
		args                      []any
	}{
		{nameSet, 0, 5, 0, []any{"job:1", "v1", "ex", int64(8), "nx"}},
		{nameSet, 0, 5, 0, []any{"job:1", "v1", "px", 2500, "nx"}},
		{nameSet, 0x07, 1, 0, []any{"job:1", "v1", "NX", "PX", "1000"}},
		{nameSet, 0, 6, 0, []any{"job:1", "v1", "px", 2500, "nx"}},
		{nameEvalSHA, 0, 2, 0, []any{deleteSHA1, 1, "job:1", "v1"}},
		{nameEval, 0, 4, 0, []any{src[scriptDelete], 1, "job:1", "v1"}},
		{nameEvalSHA, 0, 0, 2, []any{touchSHA1, 1, "job:1", "v1", 8000}},
		{nameEval, 0, 2, 0, []any{src[scriptTouch], 1, "job:1", "v1", 8000}},
		{nameEvalSHA, 0, 3, 0, []any{touchWithSetNXSHA1, 1, "job:1", []byte("v1"), "2500"}},
		{nameEval, 0, 2, 0, []any{src[scriptTouchWithSetNX], 1.0, "job:1", nil, uint64(8000)}},
		// Names in other cases, outside the hook's contract too.
		{nameSet, 0x07 | adaptertest.CaseRaw, 5, 0, []any{"job:1", "v1", "ex", int64(8), "nx"}},
		{nameEvalSHA, 0x55 | adaptertest.CaseRaw, 2, 0, []any{touchSHA1, 1, "job:1", "v1", 8000}},
		// Commands that are no lock command, with a lock command's arguments.
		{nameGet, 0, 5, 0, []any{"job:1", "v1", "ex", int64(8), "nx"}},
		{nameSetNX, 0, 5, 0, []any{"job:1", "v1", "ex", int64(8), "nx"}},
		// SET options redsync does not send, or sends otherwise.
		{nameSet, 0, 5, 0, []any{"job:1", "v1", "ex", int64(8)}},
		{nameSet, 0, 5, 0, []any{"job:1", "v1", "nx"}},
		{nameSet, 0, 5, 0, []any{"job:1", "v1", "px", -1, "nx"}},
		{nameSet, 0, 5, 0, []any{"job:1", "v1", "ex", int64(math.MaxInt64), "nx"}},
		{nameSet, 0, 5, 0, []any{"job:1", "v1", "px", 8 * time.Second, "nx"}},
		{nameSet, 0, 5, 0, []any{"job:1", "v1", "px", true, "nx"}},
		{nameSet, 0, 5, 0, []any{"job:1", "v1", "px", 1, "nx", "get"}},
		{nameSet, 0, 5, 0, []any{"job:1", "v1", "nx", "px"}},
		{nameSet, 0, 5, 0, []any{nil, "v1", "px", 1, "nx"}},
		// Key counts that do not match the arguments.
		{nameEvalSHA, 0, 2, 0, []any{touchSHA1, 1 << 40, "job:1", "v1", 8000}},
		{nameEvalSHA, 0, 2, 0, []any{touchSHA1, -1, "job:1", "v1", 8000}},
		{nameEvalSHA, 0, 2, 0, []any{deleteSHA1, int64(2), "job:1", "v1"}},
		// Expiries out of range, of odd types.
		{nameEvalSHA, 0, 2, 0, []any{touchSHA1, 1, "job:1", "v1", uint64(math.MaxUint64)}},
		{nameEvalSHA, 0, 2, 0, []any{touchSHA1, 1, "job:1", "v1", "-9223372036854775808"}},
		{nameEvalSHA, 0, 2, 0, []any{touchSHA1, 1, "job:1", "v1", time.Second}},
		{nameEvalSHA, 0, 2, 0, []any{touchSHA1, 1, "job:1", "v1", math.Inf(-1)}},
		{nameEvalSHA, 0, 2, 0, []any{touchSHA1, 1, "job:1", "v1", false}},
		// Asked before sending (Pending).
		{nameSet, 0, 5, adaptertest.ErrPending, []any{"job:1", "v1", "ex", int64(8), "nx"}},
		{nameEvalSHA, 0, 0, adaptertest.ErrPending, []any{touchSHA1, 1, "job:1", "v1", 8000}},
		{nameEval, 0, 0, adaptertest.ErrPending, []any{src[scriptTouchWithSetNX], 1, "job:1", "v1", 0}},
		{nameEvalSHA, 0, 0, adaptertest.ErrPending, []any{deleteSHA1, 1, "job:1", "v1"}},
		{nameEvalSHA, 0, 0, adaptertest.ErrPending | 2, []any{deleteSHA1, 2, "job:1", "job:2", "v1"}},
		// Several keys.
		{nameEvalSHA, 0, 2, 0, []any{touchSHA1, 2, "job:1", "job:2", "v1", 8000}},
		// Too few and too many arguments.
		{nameSet, 0, 5, 0, nil},
		{nameEvalSHA, 0, 2, 0, []any{deleteSHA1}},
		{nameEvalSHA, 0, 2, 0, []any{deleteSHA1, 1, "job:1", "v1", "extra", nil}},
	}
	for _, s := range seeds {
		f.Add(s.name, s.caseSel, s.reply, s.err, c.Encode(s.args...))
	}
	a := New()
	f.Fuzz(func(t *testing.T, nameSel, caseSel, replySel, errSel uint8, data []byte) {
		cmd := c.CommandCase(adaptertest.FuzzNames, nameSel, caseSel, replySel, errSel, data)
		// The arguments, and their prefixes down to none (the name
		// included) up to a length no lock command exceeds: checking every
		// prefix of a long input would cost quadratic time.
		for _, n := range adaptertest.Prefixes(len(cmd.Args)) {
			sub := cmd
			sub.Args = cmd.Args[:n:n]
			checkClassify(t, a, sub)
		}
		if cmd.Name == "set" {
			checkRedsyncSet(t, a, cmd)
		}
	})
}

// checkClassify checks what a makes of cmd sent by the test: the invariants
// of every adapter, then redsync's own.
func checkClassify(t *testing.T, a *Adapter, cmd registry.Command) {
	t.Helper()
	got := adaptertest.CheckClassify(t, a.Classify, cmd)
	args := cmd.Args
	s := adaptertest.PinnedScript(pins, cmd.Name, args)
	switch {
	case got.Op == registry.OpNone:
	case strings.EqualFold(cmd.Name, "set"):
		t.Fatalf("Classify(%v) from a test = %+v, want OpNone: only redsync's SET NX is a lock", args, got)
	case s == scriptUnknown:
		t.Fatalf("Classify(%v) = %+v for an unpinned script, want OpNone", args, got)
	case got.Op == registry.OpObtain:
		t.Fatalf("Classify(%v) = %+v, want no obtain from a script", args, got)
	case got.Op == registry.OpRefresh && (s == scriptDelete || len(args) != 6):
		t.Fatalf("Classify(%v, err %v) = %+v, want no refresh", args, cmd.Err, got)
	case got.Op == registry.OpNotHeld && s == scriptDelete:
		t.Fatalf("Classify(%v, err %v) = %+v, want no not-held", args, cmd.Err, got)
	case got.Op == registry.OpRelease && s == scriptDelete && len(args) != 5:
		t.Fatalf("Classify(%v) = %+v, want no release", args, got)
	case got.Key != adaptertest.Text(args[3]) || got.Value != adaptertest.Text(args[4]) || got.Keys != nil:
		t.Fatalf("Classify(%v) = %+v, want the one key and the value from the arguments", args, got)
	}
	// A script classified from its reply as refreshed or released is that
	// before it is sent, too.
	if s != scriptUnknown && !cmd.Pending && (got.Op == registry.OpRefresh || got.Op == registry.OpRelease) {
		p := cmd
		p.Reply, p.Err, p.Pending = nil, nil, true
		if pend := a.Classify(p); !adapterkit.SameAction(pend, got) {
			t.Fatalf("Classify(pending %v) = %+v, want %+v as when it answered %v, %v", args, pend, got, cmd.Reply, cmd.Err)
		}
	}
	// And a script pending as refreshed or released is that when it
	// answers 1.
	if s != scriptUnknown && cmd.Pending && got.Op != registry.OpNone {
		done := cmd
		done.Reply, done.Pending = int64(1), false
		if fin := a.Classify(done); !adapterkit.SameAction(fin, got) {
			t.Fatalf("Classify(%v answered 1) = %+v, want %+v as when pending", args, fin, got)
		}
	}
	// What Classify would make of a SET sent by redsync.
	if key, value, ttl, ok := parseSet(args); ok {
		if ttl <= 0 || ttl%time.Millisecond != 0 || key != adaptertest.Text(args[1]) || value != adaptertest.Text(args[2]) {
			t.Fatalf("parseSet(%v) = %q, %q, %v, want the key, value and a positive TTL from the arguments", args, key, value, ttl)
		}
	}
}

// checkRedsyncSet classifies the SET cmd on redsync's stack, as the registry
// does for the SET NX redsync sends: it is an obtain exactly when it
// succeeded and parseSet reads it.
func checkRedsyncSet(t *testing.T, a *Adapter, cmd registry.Command) {
	t.Helper()
	var got, noDeadline registry.Action
	withDeadline := cmd
	withDeadline.Deadline = time.Unix(1e9, 0) // redsync acquires under a context with a deadline
	onRedsyncStack(t, func() {
		got = a.Classify(withDeadline)
		noDeadline = a.Classify(cmd)
	})
	if cmd.Deadline.IsZero() && !adapterkit.SameAction(noDeadline, registry.Action{}) {
		t.Fatalf("Classify(%v) without a context deadline = %+v, want OpNone: redsync always acquires with one", cmd.Args, noDeadline)
	}
	key, value, ttl, parsed := parseSet(cmd.Args)
	ok, _ := cmd.Reply.(bool)
	ok = ok || cmd.Reply == "OK"
	want := registry.Action{}
	switch {
	case parsed && ok && cmd.Err == nil:
		want = registry.Action{Op: registry.OpObtain, Key: key, Value: value, TTL: ttl}
	case parsed:
		want = registry.Action{Op: registry.OpAttempt, Key: key, Value: value}
	}
	if cmd.Pending {
		want = registry.Action{} // learnt from the reply, never before
	}
	if !adapterkit.SameAction(got, want) {
		t.Fatalf("Classify(%v, reply %v, err %v, pending %v) on redsync's stack = %+v, want %+v", cmd.Args, cmd.Reply, cmd.Err, cmd.Pending, got, want)
	}
}

// TestFuzzCorpus runs redsync's calls against miniredis through a client
// that records what redsync sends (its go-redis v9 pool) and what the server
// answers: Lock with the default 8s expiry (SET EX) and a sub-second one (SET
// PX), Lock and TryLock of a taken mutex (a failed SET NX, then the delete
// script for the value never obtained), Extend (touch, and touchWithSetNX
// with WithSetNXOnExtend), Extend of a lost lock, Unlock (held, expired,
// taken by another), each once after SCRIPT FLUSH (EVALSHA answered
// NOSCRIPT, then EVAL) and once without. It checks that the fuzz input can
// express every recorded command and what Classify makes of it.
//
// To regenerate the seed corpus in testdata/fuzz/FuzzClassify from the
// linked redsync:
//
//	LOCKWATCH_WRITE_CORPUS=1 go test -run TestFuzzCorpus ./adapters/goredsync
//
// The files hold random values, so every regeneration changes them.
func TestFuzzCorpus(t *testing.T) {
	dir, write := adaptertest.SeedCorpus(t, "redsync-")
	c := adaptertest.NewCodec(pins, upstreamSources(t))
	ctx := adaptertest.Context(t)
	m := miniredis.RunT(t)
	rdb := adaptertest.Client(t, m)
	capture := &adaptertest.Capture{}
	rdb.AddHook(capture)
	rs := redsync.New(goredis.NewPool(rdb))
	a := New()

	ops := map[registry.Op]int{}
	n := 0
	// step runs one redsync call, and checks and (with LOCKWATCH_WRITE_CORPUS=1)
	// writes what it sent.
	step := func(name string, flush bool, run func() error, wantErr bool) {
		t.Helper()
		if flush {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		capture.Take()
		if err := run(); (err != nil) != wantErr {
			t.Fatalf("%s: got %v, want an error: %v", name, err, wantErr)
		}
		sent := capture.Take()
		if len(sent) == 0 {
			t.Fatalf("%s sent no SET, EVAL or EVALSHA", name)
		}
		for _, cmd := range sent {
			nameSel, caseSel, replySel, errSel, data := c.Seed(t, cmd)
			got := c.CommandCase(adaptertest.FuzzNames, nameSel, caseSel, replySel, errSel, data)
			ops[adaptertest.CheckClassify(t, a.Classify, got).Op]++
			checkClassify(t, a, got)
			if got.Name == "set" {
				checkRedsyncSet(t, a, got)
			}
			n++
			if write {
				file := fmt.Sprintf("redsync-%02d-%s-%s", n, name, adaptertest.FuzzNames[nameSel])
				adaptertest.WriteCorpus(t, dir, file, nameSel, caseSel, replySel, errSel, data)
			}
		}
	}
	ok := func(ok bool, err error) error {
		if err == nil && !ok {
			err = errors.New("redsync answered false")
		}
		return err
	}
	for _, flush := range []bool{true, false} {
		suffix := "noflush"
		if flush {
			suffix = "flushed"
		}
		m.FlushAll()
		held := rs.NewMutex("job:1", redsync.WithTries(1))
		short := rs.NewMutex("job:2", redsync.WithTries(1), redsync.WithExpiry(2500*time.Millisecond), redsync.WithSetNXOnExtend())
		other := rs.NewMutex("job:1", redsync.WithTries(1))
		step("lock-"+suffix, flush, func() error { return held.LockContext(ctx) }, false)
		step("lock-px-"+suffix, flush, func() error { return short.LockContext(ctx) }, false)
		step("lock-taken-"+suffix, flush, func() error { return other.LockContext(ctx) }, true)
		step("trylock-taken-"+suffix, flush, func() error { return other.TryLockContext(ctx) }, true)
		step("extend-"+suffix, flush, func() error { return ok(held.ExtendContext(ctx)) }, false)
		step("extend-setnx-"+suffix, flush, func() error { return ok(short.ExtendContext(ctx)) }, false)
		step("unlock-"+suffix, flush, func() error { return ok(held.UnlockContext(ctx)) }, false)
		step("extend-lost-"+suffix, flush, func() error { return ok(held.ExtendContext(ctx)) }, true)
		step("unlock-expired-"+suffix, flush, func() error { return ok(held.UnlockContext(ctx)) }, true)
		m.Set("job:2", "another owner")
		step("unlock-taken-"+suffix, flush, func() error { return ok(short.UnlockContext(ctx)) }, true)
	}
	// What the recorded commands must have been classified as (a SET sent
	// from the test is never a lock: see checkRedsyncSet for the SETs).
	for op, min := range map[registry.Op]int{registry.OpRefresh: 4, registry.OpNotHeld: 2, registry.OpRelease: 8, registry.OpNone: 8} {
		if ops[op] < min {
			t.Errorf("recorded commands classified %v: %d, want at least %d (all: %v)", op, ops[op], min, ops)
		}
	}
	t.Logf("%d commands recorded (%v); written to %s: %v", n, ops, dir, write)
}
