package bsmredislock

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// FuzzClassify feeds Classify commands of any name (in any case) with
// arguments of any type and count, answered with any of a few replies and
// errors or pending, and checks that it never panics, only reads, and
// recognises only the pinned obtain, refresh and release scripts with the
// arguments and replies redislock v0.9.4 or v0.10.0 sends and gets. Besides
// the seeds below, the seed corpus in testdata/fuzz/FuzzClassify holds the
// commands each release really sends (see TestFuzzCorpus); plain go test
// runs all of them. EVAL seeds of the release that is not linked decode to
// an EVAL of an empty source.
func FuzzClassify(f *testing.F) {
	src := upstreamSources(f)
	c := adaptertest.NewCodec(pins, src)
	// The source of the linked release's script of kind k.
	source := func(k kind) string { return src[script{k, linked()}] }
	const nameEvalSHA, nameEval, nameSet, nameGet = 0, 1, 2, 3
	const replyNil, replyOK, reply1, reply0 = 0, 1, 2, 3
	const errNone, errNil, errNoScript, errIO = 0, 1, 2, 3
	const pending = adaptertest.ErrPending
	seeds := []struct {
		name, caseSel, reply, err uint8
		args                      []any
	}{
		// v0.9.4
		{nameEvalSHA, 0, replyOK, errNone, []any{v094ObtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameEval, 0, replyOK, errNone, []any{source(kindObtain), 1, "job:1", "tokmeta", 3, "10000"}},
		{nameEvalSHA, 0, replyNil, errNil, []any{v094ObtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0, reply1, errNone, []any{v094RefreshSHA1, 1, "job:1", "tok", "20000"}},
		{nameEval, 0, reply0, errNone, []any{source(kindRefresh), 1, "job:1", "tok", "0"}},
		{nameEvalSHA, 0, replyNil, errNoScript, []any{v094ReleaseSHA1, 1, "job:1", "tok"}},
		{nameEval, 0, reply1, errNone, []any{source(kindRelease), 1, "job:1", []byte("tok")}},
		{nameEvalSHA, 0, reply1, errNone, []any{v094PTTLSHA1, 1, "job:1", "tok"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{strings.ToUpper(v094ObtainSHA1), 1.0, "job:1", nil, uint64(3), 1e4}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v094ObtainSHA1, 2, "job:1", "job:2", "tok", 3, "10000"}},
		{nameSet, 0, 5, errNone, []any{"job:1", "tok", "px", 10000, "nx"}},
		// v0.10.0, on one key and on several
		{nameEvalSHA, 0, replyOK, errNone, []any{v010ObtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010ObtainSHA1, 3, "job:a", "job:b", "job:c", "tokmeta", 3, "10000"}},
		{nameEvalSHA, 0, replyNil, errNil, []any{v010ObtainSHA1, 2, "job:a", []byte("job:b"), "tok", 3, "10000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010RefreshSHA1, 2, "job:a", "job:b", "tok", "20000"}},
		{nameEvalSHA, 0, replyNil, errNil, []any{v010RefreshSHA1, 2, "job:a", "job:b", "tok", "20000"}},
		{nameEvalSHA, 0, reply1, errNone, []any{v010RefreshSHA1, 1, "job:1", "tok", "20000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010RefreshSHA1, 1, "job:1", "tok", "0"}},
		{nameEvalSHA, 0, replyNil, errNil, []any{v010ReleaseSHA1, 3, "job:a", "job:b", "job:c", "tok"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010ReleaseSHA1, 1, "job:1", "tok"}},
		{nameEvalSHA, 0, 9, errNone, []any{v010PTTLSHA1, 2, "job:a", "job:b", "tok"}},
		{nameEval, 0, replyOK, errNone, []any{source(kindObtain), 2, "job:a", "job:b", "tok", 3, "10000"}},
		{nameEval, 0, replyNil, errNil, []any{source(kindRefresh), 2, "job:a", "job:b", "tok", "20000"}},
		// Asked before sending (pending).
		{nameEvalSHA, 0, 0, pending, []any{v094ObtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0, 0, pending, []any{v094RefreshSHA1, 1, "job:1", "tok", "20000"}},
		{nameEvalSHA, 0, reply1, pending | errIO, []any{v094ReleaseSHA1, 1, "job:1", "tok"}},
		{nameEvalSHA, 0, 0, pending, []any{v010ObtainSHA1, 3, "job:a", "job:b", "job:c", "tok", 3, "10000"}},
		{nameEvalSHA, 0, 0, pending, []any{v010RefreshSHA1, 2, "job:a", "job:b", "tok", "0"}},
		{nameEvalSHA, 0, 0, pending, []any{v010ReleaseSHA1, 2, "job:a", "job:b", "tok"}},
		{nameEval, 0, 0, pending, []any{source(kindRefresh), 1, "job:1", "tok", "20000"}},
		// Names in other cases, outside the hook's contract too.
		{nameEvalSHA, 0x7f, replyOK, errNone, []any{v094ObtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0x7f | adaptertest.CaseRaw, replyOK, errNone, []any{v010ObtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameEval, 0x05 | adaptertest.CaseRaw, reply1, errNone, []any{source(kindRefresh), 1, "job:1", "tok", "20000"}},
		// A command that is no lock command, with a lock command's arguments.
		{nameGet, 0, replyOK, errNone, []any{v094ObtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameGet, 0, replyOK, pending, []any{v010ObtainSHA1, 2, "job:a", "job:b", "tok", 3, "10000"}},
		// Key counts that do not match the arguments.
		{nameEvalSHA, 0, replyOK, errNone, []any{v094ObtainSHA1, 1 << 40, "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v094ObtainSHA1, -1, "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v094ObtainSHA1, int64(0), "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0, reply1, errNone, []any{v094RefreshSHA1, "99999999999999999999", "job:1", "tok", "20000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010ObtainSHA1, 2, "job:a", "job:b", "job:c", "tok", 3, "10000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010ObtainSHA1, 4, "job:a", "job:b", "tok", 3, "10000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010RefreshSHA1, int64(1) << 62, "job:a", "tok", "20000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010ReleaseSHA1, 2, "job:a", 7, "tok"}},
		// Token lengths and TTLs out of range, of odd types.
		{nameEvalSHA, 0, replyOK, errNone, []any{v094ObtainSHA1, 1, "job:1", "tok", 99, "10000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v094ObtainSHA1, 1, "job:1", "tok", -1, "10000"}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v094ObtainSHA1, 1, "job:1", "tok", 3, int64(math.MaxInt64)}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010ObtainSHA1, 1, "job:1", "tok", 3, "-10000"}},
		{nameEvalSHA, 0, replyOK, pending, []any{v010ObtainSHA1, 2, "job:a", "job:b", "tok", 3, 10 * time.Second}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v094ObtainSHA1, 1, "job:1", "tok", true, "10000"}},
		{nameEvalSHA, 0, reply1, errNone, []any{v094RefreshSHA1, 1, "job:1", "tok", uint64(math.MaxUint64)}},
		{nameEvalSHA, 0, reply1, errNone, []any{v094RefreshSHA1, 1, "job:1", "tok", math.NaN()}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010RefreshSHA1, 1, "job:1", "tok", "-9223372036854775808"}},
		{nameEvalSHA, 0, reply1, errNone, []any{v094RefreshSHA1, 1, 7, false, "20000"}},
		// Too few and too many arguments.
		{nameEvalSHA, 0, replyOK, errNone, nil},
		{nameEvalSHA, 0, replyOK, errNone, []any{v094ObtainSHA1}},
		{nameEvalSHA, 0, reply1, errNone, []any{v094ReleaseSHA1, 1, "job:1", "tok", "extra", nil, nil}},
		{nameEvalSHA, 0, replyOK, errNone, []any{v010ReleaseSHA1, 2, "job:a", "job:b", "tok", "extra"}},
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
	})
}

// checkClassify checks what a makes of cmd: the invariants of every adapter,
// then redislock's own.
func checkClassify(t *testing.T, a *Adapter, cmd registry.Command) {
	t.Helper()
	got := adaptertest.CheckClassify(t, a.Classify, cmd)
	args := cmd.Args
	s := adaptertest.PinnedScript(pins, cmd.Name, args)
	if got.Op == registry.OpNone {
		return
	}
	switch {
	case cmd.Name != "eval" && cmd.Name != "evalsha":
		t.Fatalf("Classify(%s %v) = %+v, want OpNone: redislock sends only scripts", cmd.Name, args, got)
	case s.kind == kindUnknown || s.kind == kindPTTL:
		t.Fatalf("Classify(%v) = %+v for an unpinned or TTL script, want OpNone", args, got)
	}
	// The layout: name, script, key count n, n keys, value, then the
	// script's arguments: token length and TTL (obtain), TTL (refresh) or
	// none (release).
	n, _ := adapterkit.Integer(args[2])
	argc := map[kind]int64{kindObtain: 2, kindRefresh: 1, kindRelease: 0}[s.kind]
	switch {
	case n < 1 || (n != 1 && s.release == v094):
		t.Fatalf("Classify(%v) = %+v, want OpNone for %d keys of a %v script", args, got, n, s.release)
	case int64(len(args)) != 4+n+argc:
		t.Fatalf("Classify(%v) = %+v, want OpNone for %d arguments of a %v %v script on %d keys", args, got, len(args), s.release, s.kind, n)
	}
	var keys []string
	for _, k := range args[3 : 3+n] {
		keys = append(keys, adaptertest.Text(k))
	}
	if n == 1 {
		keys = nil
	}
	if got.Key != adaptertest.Text(args[3]) || got.Value != adaptertest.Text(args[3+n]) || !slices.Equal(got.Keys, keys) {
		t.Fatalf("Classify(%v) = %+v, want the keys and the value from the arguments", args, got)
	}
	// The reply each release's scripts give: 1 or 0, OK or nil.
	done := !cmd.Pending && cmd.Err == nil && cmd.Reply == s.release.replies().Done()
	notHeld := !cmd.Pending && cmd.Err == nil && cmd.Reply == int64(0)
	if s.release == v010 {
		notHeld = !cmd.Pending && errors.Is(cmd.Err, redis.Nil)
	}
	switch got.Op {
	case registry.OpObtain:
		if s.kind != kindObtain || (cmd.Err != nil && !cmd.Pending) {
			t.Fatalf("Classify(%v, err %v) = %+v, want no obtain", args, cmd.Err, got)
		}
	case registry.OpRefresh:
		if s.kind != kindRefresh || !(done || cmd.Pending) {
			t.Fatalf("Classify(%v, reply %#v, err %v) = %+v, want no refresh", args, cmd.Reply, cmd.Err, got)
		}
	case registry.OpNotHeld:
		if s.kind != kindRefresh || !notHeld {
			t.Fatalf("Classify(%v, reply %#v, err %v) = %+v, want no not-held", args, cmd.Reply, cmd.Err, got)
		}
	case registry.OpRelease:
		if s.kind != kindRelease && (s.kind != kindRefresh || !(done || cmd.Pending)) {
			t.Fatalf("Classify(%v, reply %#v, err %v) = %+v, want no release", args, cmd.Reply, cmd.Err, got)
		}
	}
	// A command classified from its reply as an obtain, refresh or release
	// is that before it is sent, too; a pending one is what it then is when
	// it succeeds.
	if cmd.Pending {
		ok := cmd
		ok.Pending, ok.Reply = false, s.release.replies().Done()
		if s.kind == kindObtain {
			ok.Reply = "OK"
		}
		if fin := a.Classify(ok); !adapterkit.SameAction(fin, got) {
			t.Fatalf("Classify(%v answered %#v) = %+v, want %+v as when pending", args, ok.Reply, fin, got)
		}
	} else if got.Op != registry.OpNotHeld {
		p := cmd
		p.Pending, p.Reply, p.Err = true, nil, nil
		if pend := a.Classify(p); !adapterkit.SameAction(pend, got) {
			t.Fatalf("Classify(pending %v) = %+v, want %+v as when it answered %#v, %v", args, pend, got, cmd.Reply, cmd.Err)
		}
	}
}

// TestFuzzCorpus runs the linked redislock's calls against miniredis through
// a client that records what redislock sends and what the server answers:
// Obtain (random token, custom token with metadata, a re-obtain with new
// metadata, a contended obtain with retries), Refresh (held and lost), TTL,
// Release (held and not held), and with v0.10.0 the same over several keys
// with ObtainMulti (and a refresh with a retry strategy), each once after
// SCRIPT FLUSH (EVALSHA answered NOSCRIPT, then EVAL) and once with the
// scripts loaded (EVALSHA only). It checks that the fuzz input can express
// every recorded command and what Classify makes of it.
//
// To regenerate the seed corpus of the linked release in
// testdata/fuzz/FuzzClassify (files redislock-<release>-*):
//
//	LOCKWATCH_WRITE_CORPUS=1 go test -run TestFuzzCorpus ./adapters/bsmredislock
//
// For v0.10.0, run it in a module outside this one that requires redislock
// v0.10.0 and replaces this module with this tree (go.mod here keeps v0.9.4):
//
//	LOCKWATCH_WRITE_CORPUS=1 go test -run TestFuzzCorpus github.com/lockwatch/lockwatch/adapters/bsmredislock
//
// The files hold random tokens, so every regeneration changes them.
func TestFuzzCorpus(t *testing.T) {
	rel := linked()
	dir, write := adaptertest.SeedCorpus(t, "redislock-"+rel.String()+"-")
	c := adaptertest.NewCodec(pins, upstreamSources(t))
	ctx := adaptertest.Context(t)
	m := miniredis.RunT(t)
	rdb := adaptertest.Client(t, m)
	capture := &adaptertest.Capture{}
	rdb.AddHook(capture)
	client := redislock.New(rdb)
	a := New()

	ops := map[registry.Op]int{}
	n, withKeys := 0, 0
	// step runs one redislock call, and checks and (with LOCKWATCH_WRITE_CORPUS=1)
	// writes what it sent.
	step := func(name string, flush bool, run func() error, wantErr error) {
		t.Helper()
		if flush {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		capture.Take()
		if err := run(); !errors.Is(err, wantErr) || (wantErr == nil && err != nil) {
			t.Fatalf("%s: got %v, want %v", name, err, wantErr)
		}
		sent := capture.Take()
		if len(sent) == 0 {
			t.Fatalf("%s sent no SET, EVAL or EVALSHA", name)
		}
		for _, cmd := range sent {
			if p := adaptertest.PinnedScript(pins, strings.ToLower(cmd.Args[0].(string)), cmd.Args); p.release != rel {
				t.Fatalf("%s sent %v, a script of %v, want one of the linked %v", name, cmd.Args, p.release, rel)
			}
			nameSel, caseSel, replySel, errSel, data := c.Seed(t, cmd)
			got := c.CommandCase(adaptertest.FuzzNames, nameSel, caseSel, replySel, errSel, data)
			act := adaptertest.CheckClassify(t, a.Classify, got)
			ops[act.Op]++
			if act.Keys != nil {
				withKeys++
			}
			checkClassify(t, a, got)
			// And asked before it was sent.
			got.Reply, got.Err, got.Pending = nil, nil, true
			checkClassify(t, a, got)
			n++
			if write {
				file := fmt.Sprintf("redislock-%v-%02d-%s-%s", rel, n, name, adaptertest.FuzzNames[nameSel])
				adaptertest.WriteCorpus(t, dir, file, nameSel, caseSel, replySel, errSel, data)
			}
		}
	}
	multi, hasMulti := any(client).(multiObtainer)
	for _, flush := range []bool{true, false} {
		suffix := "noflush"
		if flush {
			suffix = "flushed"
		}
		m.FlushAll()
		var lock, custom *redislock.Lock
		step("obtain-"+suffix, flush, func() (err error) {
			lock, err = client.Obtain(ctx, "job:1", 10*time.Second, nil)
			return err
		}, nil)
		step("obtain-taken-"+suffix, flush, func() error {
			_, err := client.Obtain(ctx, "job:1", time.Second, nil)
			return err
		}, redislock.ErrNotObtained)
		step("obtain-retry-"+suffix, flush, func() error {
			_, err := client.Obtain(ctx, "job:1", time.Second, &redislock.Options{
				RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 2),
			})
			return err
		}, redislock.ErrNotObtained)
		step("obtain-token-"+suffix, flush, func() (err error) {
			custom, err = client.Obtain(ctx, "job:2", 15*time.Second, &redislock.Options{Token: "tok-42", Metadata: "worker=a"})
			return err
		}, nil)
		step("reobtain-token-"+suffix, flush, func() (err error) {
			custom, err = client.Obtain(ctx, "job:2", 1500*time.Millisecond, &redislock.Options{Token: "tok-42", Metadata: "worker=b"})
			return err
		}, nil)
		step("refresh-"+suffix, flush, func() error { return lock.Refresh(ctx, 20*time.Second, nil) }, nil)
		step("ttl-"+suffix, flush, func() error {
			_, err := lock.TTL(ctx)
			return err
		}, nil)
		step("release-"+suffix, flush, func() error { return lock.Release(ctx) }, nil)
		step("refresh-lost-"+suffix, flush, func() error { return lock.Refresh(ctx, 20*time.Second, nil) }, redislock.ErrNotObtained)
		step("release-not-held-"+suffix, flush, func() error { return lock.Release(ctx) }, redislock.ErrLockNotHeld)
		step("release-token-"+suffix, flush, func() error { return custom.Release(ctx) }, nil)
		if !hasMulti {
			continue
		}
		// Over several keys (v0.10.0).
		keys := []string{"job:a", "job:b", "job:c"}
		retry := func() *redislock.Options {
			return &redislock.Options{RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 2)}
		}
		var mlock, mcustom *redislock.Lock
		step("obtain-multi-"+suffix, flush, func() (err error) {
			mlock, err = multi.ObtainMulti(ctx, keys, 10*time.Second, nil)
			return err
		}, nil)
		step("obtain-multi-taken-"+suffix, flush, func() error {
			_, err := multi.ObtainMulti(ctx, []string{"job:d", "job:c"}, time.Second, nil)
			return err
		}, redislock.ErrNotObtained)
		step("obtain-multi-retry-"+suffix, flush, func() error {
			_, err := multi.ObtainMulti(ctx, []string{"job:c", "job:d"}, time.Second, retry())
			return err
		}, redislock.ErrNotObtained)
		step("obtain-multi-token-"+suffix, flush, func() (err error) {
			mcustom, err = multi.ObtainMulti(ctx, []string{"job:e", "job:f"}, 15*time.Second, &redislock.Options{Token: "tok-43", Metadata: "worker=a"})
			return err
		}, nil)
		step("reobtain-multi-token-"+suffix, flush, func() (err error) {
			mcustom, err = multi.ObtainMulti(ctx, []string{"job:e", "job:f"}, 1500*time.Millisecond, &redislock.Options{Token: "tok-43", Metadata: "worker=b"})
			return err
		}, nil)
		step("refresh-multi-"+suffix, flush, func() error { return mlock.Refresh(ctx, 20*time.Second, nil) }, nil)
		step("refresh-multi-retry-"+suffix, flush, func() error { return mlock.Refresh(ctx, 25*time.Second, retry()) }, nil)
		step("ttl-multi-"+suffix, flush, func() error {
			_, err := mlock.TTL(ctx)
			return err
		}, nil)
		step("release-multi-"+suffix, flush, func() error { return mlock.Release(ctx) }, nil)
		step("refresh-multi-lost-"+suffix, flush, func() error { return mlock.Refresh(ctx, 20*time.Second, retry()) }, redislock.ErrNotObtained)
		step("ttl-multi-lost-"+suffix, flush, func() error {
			_, err := mlock.TTL(ctx)
			return err
		}, nil)
		step("release-multi-not-held-"+suffix, flush, func() error { return mlock.Release(ctx) }, redislock.ErrLockNotHeld)
		m.Del("job:f") // one key of the lock gone: the lock is not held
		step("refresh-multi-partly-lost-"+suffix, flush, func() error { return mcustom.Refresh(ctx, 20*time.Second, nil) }, redislock.ErrNotObtained)
		step("release-multi-partly-lost-"+suffix, flush, func() error { return mcustom.Release(ctx) }, redislock.ErrLockNotHeld)
	}
	// What the recorded commands must have been classified as.
	want := map[registry.Op]int{registry.OpObtain: 6, registry.OpRefresh: 2, registry.OpNotHeld: 2, registry.OpRelease: 6, registry.OpNone: 10}
	wantKeys := 0
	if hasMulti {
		want = map[registry.Op]int{registry.OpObtain: 12, registry.OpRefresh: 6, registry.OpNotHeld: 6, registry.OpRelease: 18, registry.OpNone: 40}
		wantKeys = 23
	}
	for op, min := range want {
		if ops[op] < min {
			t.Errorf("recorded commands classified %v: %d, want at least %d (all: %v)", op, ops[op], min, ops)
		}
	}
	if withKeys < wantKeys {
		t.Errorf("recorded commands classified with Keys: %d, want at least %d", withKeys, wantKeys)
	}
	t.Logf("redislock %v: %d commands recorded (%v, %d with Keys); written to %s: %v", rel, n, ops, withKeys, dir, write)
}
