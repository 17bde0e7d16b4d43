package bsmredislock

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
)

// FuzzClassify feeds Classify commands of any name (in any case) with
// arguments of any type and count, answered with any of a few replies and
// errors, and checks that it never panics, only reads, and recognises only
// the pinned obtain, refresh and release scripts with the arguments
// redislock sends. Besides the seeds below, the seed corpus in
// testdata/fuzz/FuzzClassify holds the commands redislock really sends (see
// TestFuzzCorpus); plain go test runs all of them.
func FuzzClassify(f *testing.F) {
	src := upstreamSources(f)
	c := adaptertest.NewCodec(pins, src)
	const nameEvalSHA, nameEval, nameSet, nameGet = 0, 1, 2, 3
	seeds := []struct {
		name, caseSel, reply, err uint8
		args                      []any
	}{
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameEval, 0, 1, 0, []any{src[scriptObtain], 1, "job:1", "tokmeta", 3, "10000"}},
		{nameEvalSHA, 0, 0, 1, []any{obtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0, 2, 0, []any{refreshSHA1, 1, "job:1", "tok", "20000"}},
		{nameEval, 0, 3, 0, []any{src[scriptRefresh], 1, "job:1", "tok", "0"}},
		{nameEvalSHA, 0, 0, 2, []any{releaseSHA1, 1, "job:1", "tok"}},
		{nameEval, 0, 2, 0, []any{src[scriptRelease], 1, "job:1", []byte("tok")}},
		{nameEvalSHA, 0, 2, 0, []any{pttlSHA1, 1, "job:1", "tok"}},
		{nameEvalSHA, 0, 1, 0, []any{strings.ToUpper(obtainSHA1), 1.0, "job:1", nil, uint64(3), 1e4}},
		{nameSet, 0, 5, 0, []any{"job:1", "tok", "px", 10000, "nx"}},
		// Names in other cases, outside the hook's contract too.
		{nameEvalSHA, 0x7f, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0x7f | adaptertest.CaseRaw, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{nameEval, 0x05 | adaptertest.CaseRaw, 2, 0, []any{src[scriptRefresh], 1, "job:1", "tok", "20000"}},
		// A command that is no lock command, with a lock command's arguments.
		{nameGet, 0, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		// Key counts that do not match the arguments.
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1, 1 << 40, "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1, -1, "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1, int64(0), "job:1", "tok", 3, "10000"}},
		{nameEvalSHA, 0, 2, 0, []any{refreshSHA1, "99999999999999999999", "job:1", "tok", "20000"}},
		// Token lengths and TTLs out of range, of odd types.
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", 99, "10000"}},
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", -1, "10000"}},
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", 3, int64(math.MaxInt64)}},
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", 3, "-10000"}},
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", 3, 10 * time.Second}},
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", true, "10000"}},
		{nameEvalSHA, 0, 2, 0, []any{refreshSHA1, 1, "job:1", "tok", uint64(math.MaxUint64)}},
		{nameEvalSHA, 0, 2, 0, []any{refreshSHA1, 1, "job:1", "tok", math.NaN()}},
		{nameEvalSHA, 0, 2, 0, []any{refreshSHA1, 1, "job:1", "tok", "-9223372036854775808"}},
		{nameEvalSHA, 0, 2, 0, []any{refreshSHA1, 1, 7, false, "20000"}},
		// Too few and too many arguments.
		{nameEvalSHA, 0, 1, 0, nil},
		{nameEvalSHA, 0, 1, 0, []any{obtainSHA1}},
		{nameEvalSHA, 0, 2, 0, []any{releaseSHA1, 1, "job:1", "tok", "extra", nil, nil}},
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
	switch {
	case got.Op == registry.OpNone:
	case cmd.Name != "eval" && cmd.Name != "evalsha":
		t.Fatalf("Classify(%s %v) = %+v, want OpNone: redislock sends only scripts", cmd.Name, args, got)
	case s == scriptUnknown || s == scriptPTTL:
		t.Fatalf("Classify(%v) = %+v for an unpinned or TTL script, want OpNone", args, got)
	case got.Op == registry.OpObtain && (s != scriptObtain || len(args) != 7):
		t.Fatalf("Classify(%v, err %v) = %+v, want no obtain", args, cmd.Err, got)
	case got.Op == registry.OpRefresh && (s != scriptRefresh || len(args) != 6):
		t.Fatalf("Classify(%v, err %v) = %+v, want no refresh", args, cmd.Err, got)
	case got.Op == registry.OpNotHeld && s != scriptRefresh:
		t.Fatalf("Classify(%v) = %+v, want no not-held", args, got)
	case got.Op == registry.OpRelease && s != scriptRelease && s != scriptRefresh:
		t.Fatalf("Classify(%v) = %+v, want no release", args, got)
	case got.Key != adaptertest.Text(args[3]) || got.Value != adaptertest.Text(args[4]):
		t.Fatalf("Classify(%v) = %+v, want key and value from the arguments", args, got)
	}
}

// TestFuzzCorpus runs redislock's calls against miniredis through a client
// that records what redislock sends and what the server answers: Obtain
// (random token, custom token with metadata, a re-obtain with new metadata,
// a contended obtain with retries), Refresh (held and lost), TTL, Release
// (held and not held), each once after SCRIPT FLUSH (EVALSHA answered
// NOSCRIPT, then EVAL) and once with the scripts loaded (EVALSHA only). It
// checks that the fuzz input can express every recorded command and what
// Classify makes of it.
//
// To regenerate the seed corpus in testdata/fuzz/FuzzClassify from the
// linked redislock:
//
//	LOCKWATCH_WRITE_CORPUS=1 go test -run TestFuzzCorpus ./adapters/bsmredislock
//
// The files hold random tokens, so every regeneration changes them.
func TestFuzzCorpus(t *testing.T) {
	dir, write := adaptertest.SeedCorpus(t, "redislock-")
	c := adaptertest.NewCodec(pins, upstreamSources(t))
	ctx := adaptertest.Context(t)
	m := miniredis.RunT(t)
	rdb := adaptertest.Client(t, m)
	capture := &adaptertest.Capture{}
	rdb.AddHook(capture)
	client := redislock.New(rdb)
	a := New()

	ops := map[registry.Op]int{}
	n := 0
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
		if err := run(); !errors.Is(err, wantErr) {
			t.Fatalf("%s: got %v, want %v", name, err, wantErr)
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
			n++
			if write {
				file := fmt.Sprintf("redislock-%02d-%s-%s", n, name, adaptertest.FuzzNames[nameSel])
				adaptertest.WriteCorpus(t, dir, file, nameSel, caseSel, replySel, errSel, data)
			}
		}
	}
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
	}
	// What the recorded commands must have been classified as.
	for op, min := range map[registry.Op]int{registry.OpObtain: 6, registry.OpRefresh: 2, registry.OpNotHeld: 2, registry.OpRelease: 6, registry.OpNone: 10} {
		if ops[op] < min {
			t.Errorf("recorded commands classified %v: %d, want at least %d (all: %v)", op, ops[op], min, ops)
		}
	}
	t.Logf("%d commands recorded (%v); written to %s: %v", n, ops, dir, write)
}
