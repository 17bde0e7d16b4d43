package scripts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockwatch/lockwatch/internal/scripts"
	lwscripts "github.com/lockwatch/lockwatch/scripts"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// renewScript runs the renew script, public in package
// github.com/lockwatch/lockwatch/scripts, whose checks of its SHA1 and
// SCRIPT LOAD are there: EVALSHA, then EVAL after NOSCRIPT.
var renewScript = redis.NewScript(lwscripts.RenewSource())

func TestRenewScriptHash(t *testing.T) {
	if got := renewScript.Hash(); got != lwscripts.RenewSHA1 {
		t.Fatalf("the renew script's hash = %s, want RenewSHA1 %s", got, lwscripts.RenewSHA1)
	}
}

func TestRenewOnMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	checkRenew(t, rdb, false, func(key string) time.Duration { return m.TTL(key) })
}

// checkRenew runs the renew script's contract against any server; gt says
// whether the server has PEXPIRE GT (Redis 7 and newer; miniredis's Lua
// does not say its version, so the script takes the plain PEXPIRE there).
func checkRenew(t *testing.T, rdb redis.UniversalClient, gt bool, ttlOf func(string) time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rdb.Set(ctx, "ours", "v1", time.Second).Err())
	must(rdb.Set(ctx, "theirs", "other", 3*time.Second).Err())
	must(rdb.HSet(ctx, "hash", "f", "v").Err())
	must(rdb.Set(ctx, "forever", "v4", 0).Err())

	keys := []string{"ours", "theirs", "missing", "hash", "forever"}
	args := []any{scripts.ModePerLock, "v1", "v2", "v3", "v", "v4", 60000, 60000, 60000, 60000, 5000}
	res, err := renew(ctx, rdb, keys, args...)
	must(err)
	want := []int64{scripts.Renewed, scripts.Taken, scripts.Gone, scripts.Taken, scripts.Renewed}
	if len(res) != len(want) {
		t.Fatalf("Renew(%v) = %v, want %v", keys, res, want)
	}
	for i := range want {
		if res[i] != want[i] {
			t.Errorf("Renew(%s) = %d, want %d", keys[i], res[i], want[i])
		}
	}
	if got := ttlOf("ours"); got < 59*time.Second || got > 60*time.Second {
		t.Errorf("TTL(ours) after renew = %v, want ~60s", got)
	}
	if got := ttlOf("theirs"); got > 3*time.Second {
		t.Errorf("TTL(theirs) = %v, want untouched (<= 3s)", got)
	}
	if gt {
		// A key without expiry counts as an infinite TTL for GT: untouched.
		if got := ttlOf("forever"); got != -1 {
			t.Errorf("PTTL(forever) = %v, want -1 (no expiry: GT never shortens)", got)
		}
	} else if got := ttlOf("forever"); got < 4*time.Second || got > 5*time.Second {
		t.Errorf("TTL(forever) = %v, want ~5s", got)
	}
	if n := rdb.Exists(ctx, "missing").Val(); n != 0 {
		t.Errorf("EXISTS missing = %d after renew, want 0: the script created a key", n)
	}
	if v := rdb.Get(ctx, "theirs").Val(); v != "other" {
		t.Errorf("GET theirs = %q, want %q: the script changed a value", v, "other")
	}
	if v := rdb.Get(ctx, "ours").Val(); v != "v1" {
		t.Errorf("GET ours = %q, want %q", v, "v1")
	}
	// One TTL for every key.
	must(rdb.Set(ctx, "a", "va", time.Second).Err())
	must(rdb.Set(ctx, "b", "vb", time.Second).Err())
	res, err = renew(ctx, rdb, []string{"a", "b", "gone"}, scripts.ModeShared, "va", "vb", "vc", 30000)
	must(err)
	if len(res) != 3 || res[0] != scripts.Renewed || res[1] != scripts.Renewed || res[2] != scripts.Gone {
		t.Errorf("Renew(a, b, gone) with one TTL = %v, want [1 1 0]", res)
	}
	for _, k := range []string{"a", "b"} {
		if got := ttlOf(k); got < 29*time.Second || got > 30*time.Second {
			t.Errorf("TTL(%s) after renew with one TTL = %v, want ~30s", k, got)
		}
	}
	// All renewed: the reply is the number of keys, not an array.
	raw, err := renewScript.Run(ctx, rdb, []string{"a", "b"}, scripts.ModeShared, "va", "vb", 40000).Result()
	must(err)
	if raw != int64(2) {
		t.Errorf("Renew(a, b) with both held = %v (%T), want 2", raw, raw)
	}
	if got := ttlOf("b"); got < 39*time.Second || got > 40*time.Second {
		t.Errorf("TTL(b) after renew = %v, want ~40s", got)
	}

	// A TTL per lock, every lock held: each key its own TTL.
	must(rdb.Set(ctx, "a", "va", time.Second).Err())
	must(rdb.Set(ctx, "b", "vb", time.Second).Err())
	raw, err = renewScript.Run(ctx, rdb, []string{"a", "b"}, scripts.ModePerLock, "va", "vb", 41000, 42000).Result()
	must(err)
	if raw != int64(2) {
		t.Errorf("Renew(a, b) with a TTL each, both held = %v (%T), want 2", raw, raw)
	}
	for k, want := range map[string]time.Duration{"a": 41 * time.Second, "b": 42 * time.Second} {
		if got := ttlOf(k); got < want-time.Second || got > want {
			t.Errorf("TTL(%s) after a renewal with a TTL each = %v, want ~%v", k, got, want)
		}
	}
	// Every key held but one, whose value is a prefix of the lock's: only
	// that one is not renewed.
	must(rdb.Set(ctx, "c", "vc", time.Second).Err())
	must(rdb.Set(ctx, "d", "v", time.Second).Err())
	res, err = renew(ctx, rdb, []string{"c", "d"}, scripts.ModeShared, "vc", "vd", 43000)
	must(err)
	if fmt.Sprint(res) != fmt.Sprint([]int64{scripts.Renewed, scripts.Taken}) {
		t.Errorf("Renew(c, d) with d taken = %v, want [1 -1]", res)
	}
	if got := ttlOf("d"); got > time.Second {
		t.Errorf("TTL(d) = %v, want untouched (<= 1s): a key held with another value was renewed", got)
	}

	// More keys than one MGET reads (1000): every key is answered in order,
	// the first MGET's keys all held, the second's not, the third's all
	// held again.
	const many = 2500
	var manyKeys []string
	manyArgs := []any{scripts.ModeShared}
	pipe := rdb.Pipeline()
	for i := range many {
		k := fmt.Sprintf("many:%04d", i)
		manyKeys = append(manyKeys, k)
		v := fmt.Sprint("v", i)
		second := i >= 1000 && i < 2000
		if second && i%7 == 3 {
			v = "someone else" // taken
		}
		if !second || i%11 != 5 { // every eleventh of the second MGET is gone
			pipe.Set(ctx, k, v, time.Second)
		}
		manyArgs = append(manyArgs, fmt.Sprint("v", i))
	}
	_, err = pipe.Exec(ctx)
	must(err)
	manyArgs = append(manyArgs, 20000)
	res, err = renew(ctx, rdb, manyKeys, manyArgs...)
	must(err)
	if len(res) != many {
		t.Fatalf("Renew(%d keys) answered %d results", many, len(res))
	}
	for i, r := range res {
		want := scripts.Renewed
		switch second := i >= 1000 && i < 2000; {
		case second && i%11 == 5:
			want = scripts.Gone
		case second && i%7 == 3:
			want = scripts.Taken
		}
		if r != want {
			t.Fatalf("Renew(many:%04d) = %d, want %d", i, r, want)
		}
	}
	if n := rdb.Exists(ctx, "many:1006").Val(); n != 0 {
		t.Errorf("EXISTS many:1006 = %d after renew, want 0: the script created a key", n)
	}
	for _, k := range []string{"many:0000", "many:1000", "many:2400"} {
		if got := ttlOf(k); got < 19*time.Second || got > 20*time.Second {
			t.Errorf("TTL(%s) after renew = %v, want ~20s", k, got)
		}
	}
	if got := ttlOf("many:1004"); got > time.Second {
		t.Errorf("TTL(many:1004) = %v, want untouched (<= 1s): taken", got)
	}

	// Never shorter: a renewal to a TTL below the one the key has changes
	// nothing on a server with GT (it arrived after the holder's refresh).
	must(rdb.Set(ctx, "long", "vl", time.Minute).Err())
	res, err = renew(ctx, rdb, []string{"long"}, scripts.ModeShared, "vl", 2000)
	must(err)
	if len(res) != 1 || res[0] != scripts.Renewed {
		t.Errorf("Renew(long) = %v, want [1] (held: renewed, or left longer)", res)
	}
	if got := ttlOf("long"); gt && got < 59*time.Second {
		t.Errorf("TTL(long) after a renewal to 2s = %v, want ~60s: the renewal shortened it", got)
	} else if !gt && got > 2*time.Second {
		t.Errorf("TTL(long) after a renewal to 2s without GT = %v, want 2s", got)
	}

	// Locks over several keys: renewed only when every key holds the value.
	for k, v := range map[string]string{"m1a": "x", "m1b": "x", "m2a": "y", "m2b": "z", "m3a": "w", "s": "q"} {
		must(rdb.Set(ctx, k, v, time.Second).Err())
	}
	mkeys := []string{"m1a", "m1b", "m2a", "m2b", "m3a", "m3b", "s"}
	res, err = renewMulti(ctx, rdb, mkeys, 4,
		scripts.ModeMulti, 2, "x", 50000, 2, "y", 50000, 2, "w", 50000, 1, "q", 45000)
	must(err)
	if want := []int64{scripts.Renewed, scripts.Taken, scripts.Gone, scripts.Renewed}; fmt.Sprint(res) != fmt.Sprint(want) {
		t.Errorf("Renew(multi) = %v, want %v", res, want)
	}
	for k, want := range map[string]time.Duration{"m1a": 50 * time.Second, "m1b": 50 * time.Second, "s": 45 * time.Second} {
		if got := ttlOf(k); got < want-time.Second || got > want {
			t.Errorf("TTL(%s) after a multi renewal = %v, want ~%v", k, got, want)
		}
	}
	for _, k := range []string{"m2a", "m3a"} { // their lock was not all ours: no key of it renewed
		if got := ttlOf(k); got > time.Second {
			t.Errorf("TTL(%s) = %v, want untouched (<= 1s): a lock with a key lost was renewed", k, got)
		}
	}
	if n := rdb.Exists(ctx, "m3b").Val(); n != 0 {
		t.Errorf("EXISTS m3b = %d after renew, want 0: the script created a key", n)
	}
	raw, err = renewScript.Run(ctx, rdb, []string{"m1a", "m1b", "s"}, scripts.ModeMulti, 2, "x", 50000, 1, "q", 50000).Result()
	must(err)
	if raw != int64(2) {
		t.Errorf("Renew(multi, all held) = %v (%T), want 2 (locks, not keys)", raw, raw)
	}

	// The longest TTL a lock may have, and one far past it (2e14 ms): the
	// expiry is written out whole, never as a number Redis refuses
	// (1.8e+14). PTTL is read as milliseconds: 2e14 of them overflow a
	// Duration, and so does miniredis's TTL of them: only a real server
	// is given the second.
	ttls := []int64{int64(time.Duration(1<<63-1) / time.Millisecond)}
	if gt {
		ttls = append(ttls, 2e14)
	}
	for _, ttl := range ttls {
		must(rdb.Set(ctx, "far", "vf", time.Second).Err())
		res, err = renew(ctx, rdb, []string{"far"}, scripts.ModeShared, "vf", ttl)
		if err != nil || len(res) != 1 || res[0] != scripts.Renewed {
			t.Errorf("Renew(far) for %d ms = %v, %v, want [1]", ttl, res, err)
			continue
		}
		if got, err := rdb.Do(ctx, "PTTL", "far").Int64(); err != nil || got < ttl-60000 || got > ttl {
			t.Errorf("PTTL(far) after a renewal for %d ms = %d, %v, want ~%d", ttl, got, err, ttl)
		}
	}

	// No keys: an empty reply, not an error.
	empty, err := renew(ctx, rdb, nil, scripts.ModeShared)
	if err != nil || len(empty) != 0 {
		t.Errorf("Renew() = %v, %v, want [], nil", empty, err)
	}
}

// renewMulti runs the renew script for locks locks and decodes its reply.
func renewMulti(ctx context.Context, rdb redis.UniversalClient, keys []string, locks int, args ...any) ([]int64, error) {
	reply, err := renewScript.Run(ctx, rdb, keys, args...).Result()
	if err != nil {
		return nil, err
	}
	return scripts.RenewResults(reply, locks)
}

// renew runs the renew script and decodes its reply.
func renew(ctx context.Context, rdb redis.UniversalClient, keys []string, args ...any) ([]int64, error) {
	reply, err := renewScript.Run(ctx, rdb, keys, args...).Result()
	if err != nil {
		return nil, err
	}
	return scripts.RenewResults(reply, len(keys))
}

func TestRenewResults(t *testing.T) {
	for _, tc := range []struct {
		reply any
		n     int
		want  []int64
		bad   bool
	}{
		{int64(3), 3, []int64{1, 1, 1}, false},
		{int64(0), 0, []int64{}, false},
		{int64(2), 3, nil, true},
		{[]any{int64(1), int64(0), int64(-1)}, 3, []int64{1, 0, -1}, false},
		{[]any{int64(1), int64(0)}, 3, nil, true},
		{[]any{int64(1), "1"}, 2, nil, true},
		{[]any{int64(2)}, 1, nil, true},
		{"OK", 1, nil, true},
		{nil, 1, nil, true},
	} {
		got, err := scripts.RenewResults(tc.reply, tc.n)
		if (err != nil) != tc.bad {
			t.Errorf("RenewResults(%v, %d) error = %v, want error %v", tc.reply, tc.n, err, tc.bad)
			continue
		}
		if !tc.bad && fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("RenewResults(%v, %d) = %v, want %v", tc.reply, tc.n, got, tc.want)
		}
	}
}
