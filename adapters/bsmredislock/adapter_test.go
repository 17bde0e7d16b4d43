package bsmredislock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// upstreamSources runs the linked redislock against the probe's recorder and
// returns the source it sent with EVAL for each script of its release, so
// that tests need not carry copies of redislock's Lua. The scripts of the
// other release have none: their EVAL is only tested with it linked.
func upstreamSources(t testing.TB) map[script]string {
	t.Helper()
	return adaptertest.Sources(t, "redislock "+linked().String(), New().recorder(), New().probe, pinsOf(linked()))
}

// cmd builds a command as the registry hook hands it over.
func cmd(name string, reply any, err error, args ...any) registry.Command {
	return registry.Command{Name: name, Args: append([]any{name}, args...), Reply: reply, Err: err}
}

// pending builds a command as the registry hook hands it over before sending
// it.
func pending(name string, args ...any) registry.Command {
	return registry.Command{Name: name, Args: append([]any{name}, args...), Pending: true}
}

// classifyCase is one case of a Classify table.
type classifyCase struct {
	name string
	cmd  registry.Command
	want registry.Action
}

// checkCases fails t for every case a classifies otherwise than wanted.
func checkCases(t *testing.T, a *Adapter, tests []classifyCase) {
	t.Helper()
	for _, tt := range tests {
		if got := a.Classify(tt.cmd); !adapterkit.SameAction(got, tt.want) {
			t.Errorf("Classify(%s: %v, reply %#v, err %v, pending %v) = %+v, want %+v",
				tt.name, tt.cmd.Args, tt.cmd.Reply, tt.cmd.Err, tt.cmd.Pending, got, tt.want)
		}
	}
}

var (
	errIO       = errors.New("i/o timeout")
	errNoScript = adaptertest.RedisError("NOSCRIPT No matching script")
	none        = registry.Action{}
)

// act returns the action op on key (and keys, when several) held with value.
func act(op registry.Op, value string, ttl time.Duration, keys ...string) registry.Action {
	a := registry.Action{Op: op, Key: keys[0], Value: value, TTL: ttl}
	if len(keys) > 1 {
		a.Keys = keys
	}
	return a
}

func TestName(t *testing.T) {
	if got := New().Name(); got != "redislock" {
		t.Errorf("Name() = %q, want %q", got, "redislock")
	}
}

// TestClassifyV094 classifies the EVALSHA commands of redislock v0.9.4,
// whichever release is linked: scripts on one key, refresh and release
// answering 1 or 0.
func TestClassifyV094(t *testing.T) {
	upper := strings.ToUpper(v094ObtainSHA1)
	obtain := func(value string, ttl time.Duration) registry.Action {
		return act(registry.OpObtain, value, ttl, "job:1")
	}
	refresh := act(registry.OpRefresh, "tok", 20*time.Second, "job:1")
	notHeld := act(registry.OpNotHeld, "tok", 0, "job:1")
	release := act(registry.OpRelease, "tok", 0, "job:1")
	sha := v094ObtainSHA1
	checkCases(t, New(), []classifyCase{
		// obtain, as redislock sends it: value, len(token), TTL in ms as a string
		{"obtain", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, "10000"), obtain("tok", 10*time.Second)},
		{"obtain with metadata", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tokmeta", 3, "2500"), obtain("tokmeta", 2500*time.Millisecond)},
		{"obtain, empty metadata and token", cmd("evalsha", "OK", nil, sha, 1, "job:1", "", 0, "1"), obtain("", time.Millisecond)},
		{"obtain upper-case sha", cmd("evalsha", "OK", nil, upper, 1, "job:1", "tok", 3, "10000"), obtain("tok", 10*time.Second)},
		{"obtain []byte args", cmd("evalsha", "OK", nil, []byte(sha), "1", []byte("job:1"), []byte("tok"), "3", []byte("10000")), obtain("tok", 10*time.Second)},
		{"obtain int64 ttl", cmd("evalsha", "OK", nil, sha, int64(1), "job:1", "tok", int64(3), int64(10000)), obtain("tok", 10*time.Second)},
		{"obtain uint ttl", cmd("evalsha", "OK", nil, sha, uint8(1), "job:1", "tok", uint16(3), uint32(10000)), obtain("tok", 10*time.Second)},
		{"obtain not obtained", cmd("evalsha", nil, redis.Nil, sha, 1, "job:1", "tok", 3, "10000"), none},
		{"obtain noscript", cmd("evalsha", nil, errNoScript, sha, 1, "job:1", "tok", 3, "10000"), none},
		{"obtain i/o error", cmd("evalsha", nil, errIO, sha, 1, "job:1", "tok", 3, "10000"), none},
		{"obtain zero ttl", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, "0"), none},
		{"obtain negative ttl", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, "-1"), none},
		{"obtain ttl overflows", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, "9223372036854775807"), none},
		{"obtain ttl not a number", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, "10s"), none},
		{"obtain ttl with plus sign", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, "+10"), none},
		{"obtain ttl with leading zero", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, "010"), none},
		{"obtain ttl float", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, 10000.0), none},
		{"obtain ttl duration", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, 10*time.Second), none},
		{"obtain ttl nil", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, nil), none},
		{"obtain token longer than value", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 4, "10000"), none},
		{"obtain negative token length", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", -1, "10000"), none},
		{"obtain too few args", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3), none},
		{"obtain too many args", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, "10000", "x"), none},
		{"obtain two keys counted", cmd("evalsha", "OK", nil, sha, 2, "job:1", "tok", 3, "10000"), none},
		{"obtain two keys", cmd("evalsha", "OK", nil, sha, 2, "job:1", "job:2", "tok", 3, "10000"), none}, // v0.9.4 locks one key
		{"obtain numkeys not a number", cmd("evalsha", "OK", nil, sha, "one", "job:1", "tok", 3, "10000"), none},
		{"obtain int key", cmd("evalsha", "OK", nil, sha, 1, 42, "tok", 3, "10000"), none},
		{"obtain nil value", cmd("evalsha", "OK", nil, sha, 1, "job:1", nil, 3, "10000"), none},

		// refresh: value, TTL in ms as a string; answers 1 or 0
		{"refresh", cmd("evalsha", int64(1), nil, v094RefreshSHA1, 1, "job:1", "tok", "20000"), refresh},
		{"refresh not held", cmd("evalsha", int64(0), nil, v094RefreshSHA1, 1, "job:1", "tok", "20000"), notHeld},
		{"refresh to zero deletes", cmd("evalsha", int64(1), nil, v094RefreshSHA1, 1, "job:1", "tok", "0"), release},
		{"refresh to negative deletes", cmd("evalsha", int64(1), nil, v094RefreshSHA1, 1, "job:1", "tok", "-10"), release},
		{"refresh to zero, not held", cmd("evalsha", int64(0), nil, v094RefreshSHA1, 1, "job:1", "tok", "0"), notHeld},
		{"refresh error", cmd("evalsha", nil, errIO, v094RefreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh noscript", cmd("evalsha", nil, errNoScript, v094RefreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh odd reply", cmd("evalsha", int64(2), nil, v094RefreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh string reply", cmd("evalsha", "1", nil, v094RefreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh OK reply", cmd("evalsha", "OK", nil, v094RefreshSHA1, 1, "job:1", "tok", "20000"), none}, // v0.10.0's answer
		{"refresh redis.Nil", cmd("evalsha", nil, redis.Nil, v094RefreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh nil reply", cmd("evalsha", nil, nil, v094RefreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh ttl not a number", cmd("evalsha", int64(1), nil, v094RefreshSHA1, 1, "job:1", "tok", "soon"), none},
		{"refresh without ttl", cmd("evalsha", int64(1), nil, v094RefreshSHA1, 1, "job:1", "tok"), none},
		{"refresh two keys", cmd("evalsha", int64(1), nil, v094RefreshSHA1, 2, "job:1", "job:2", "tok", "20000"), none},

		// release: value; untracks whatever it answered
		{"release", cmd("evalsha", int64(1), nil, v094ReleaseSHA1, 1, "job:1", "tok"), release},
		{"release not held", cmd("evalsha", int64(0), nil, v094ReleaseSHA1, 1, "job:1", "tok"), release},
		{"release error", cmd("evalsha", nil, errIO, v094ReleaseSHA1, 1, "job:1", "tok"), release},
		{"release noscript", cmd("evalsha", nil, errNoScript, v094ReleaseSHA1, 1, "job:1", "tok"), release},
		{"release extra arg", cmd("evalsha", int64(1), nil, v094ReleaseSHA1, 1, "job:1", "tok", "x"), none},
		{"release without value", cmd("evalsha", int64(1), nil, v094ReleaseSHA1, 1, "job:1"), none},
		{"release two keys", cmd("evalsha", int64(1), nil, v094ReleaseSHA1, 2, "job:1", "job:2", "tok"), none},

		// asked before sending: as it will be if it succeeds
		{"pending obtain", pending("evalsha", sha, 1, "job:1", "tok", 3, "10000"), obtain("tok", 10*time.Second)},
		{"pending obtain zero ttl", pending("evalsha", sha, 1, "job:1", "tok", 3, "0"), none},
		{"pending obtain two keys", pending("evalsha", sha, 2, "job:1", "job:2", "tok", 3, "10000"), none},
		{"pending refresh", pending("evalsha", v094RefreshSHA1, 1, "job:1", "tok", "20000"), refresh},
		{"pending refresh to zero", pending("evalsha", v094RefreshSHA1, 1, "job:1", "tok", "0"), release},
		{"pending refresh without ttl", pending("evalsha", v094RefreshSHA1, 1, "job:1", "tok"), none},
		{"pending release", pending("evalsha", v094ReleaseSHA1, 1, "job:1", "tok"), release},
		{"pending pttl", pending("evalsha", v094PTTLSHA1, 1, "job:1", "tok"), none},

		// neither
		{"pttl", cmd("evalsha", int64(5000), nil, v094PTTLSHA1, 1, "job:1", "tok"), none},
		{"pttl not held", cmd("evalsha", int64(-3), nil, v094PTTLSHA1, 1, "job:1", "tok"), none},
		{"unknown sha", cmd("evalsha", "OK", nil, strings.Repeat("0", 40), 1, "job:1", "tok", 3, "10000"), none},
		{"short sha", cmd("evalsha", "OK", nil, sha[:39], 1, "job:1", "tok", 3, "10000"), none},
		{"sha not a string", cmd("evalsha", "OK", nil, 42, 1, "job:1", "tok", 3, "10000"), none},
		{"eval of the sha", cmd("eval", "OK", nil, sha, 1, "job:1", "tok", 3, "10000"), none},
		{"eval of other lua", cmd("eval", "OK", nil, "return 1", 1, "job:1", "tok", 3, "10000"), none},
		{"set", cmd("set", "OK", nil, "job:1", "tok", "px", 10000, "nx"), none},
		{"no args", registry.Command{Name: "evalsha"}, none},
	})
}

// TestClassifyV010 classifies the EVALSHA commands of redislock v0.10.0,
// whichever release is linked: scripts on every key of the lock, refresh
// and release answering OK or nil (redis.Nil).
func TestClassifyV010(t *testing.T) {
	abc := []string{"job:a", "job:b", "job:c"}
	obtain := func(value string, ttl time.Duration, keys ...string) registry.Action {
		return act(registry.OpObtain, value, ttl, keys...)
	}
	refresh := func(keys ...string) registry.Action { return act(registry.OpRefresh, "tok", 20*time.Second, keys...) }
	notHeld := func(keys ...string) registry.Action { return act(registry.OpNotHeld, "tok", 0, keys...) }
	release := func(keys ...string) registry.Action { return act(registry.OpRelease, "tok", 0, keys...) }
	sha := v010ObtainSHA1
	checkCases(t, New(), []classifyCase{
		// obtain: the keys, then value, len(token), TTL in ms as a string
		{"obtain", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tok", 3, "10000"), obtain("tok", 10*time.Second, "job:1")},
		{"obtain with metadata", cmd("evalsha", "OK", nil, sha, 1, "job:1", "tokmeta", 3, "2500"), obtain("tokmeta", 2500*time.Millisecond, "job:1")},
		{"obtain upper-case sha", cmd("evalsha", "OK", nil, strings.ToUpper(sha), 1, "job:1", "tok", 3, "10000"), obtain("tok", 10*time.Second, "job:1")},
		{"obtain multi", cmd("evalsha", "OK", nil, sha, 3, "job:a", "job:b", "job:c", "tokmeta", 3, "10000"), obtain("tokmeta", 10*time.Second, abc...)},
		{"obtain multi, two keys", cmd("evalsha", "OK", nil, sha, 2, "job:b", "job:a", "tok", 3, "10000"), obtain("tok", 10*time.Second, "job:b", "job:a")},
		{"obtain multi, same key twice", cmd("evalsha", "OK", nil, sha, 2, "job:a", "job:a", "tok", 3, "10000"), obtain("tok", 10*time.Second, "job:a", "job:a")},
		{"obtain multi []byte args", cmd("evalsha", "OK", nil, []byte(sha), "3", []byte("job:a"), "job:b", []byte("job:c"), []byte("tok"), "3", []byte("10000")), obtain("tok", 10*time.Second, abc...)},
		{"obtain multi int64 args", cmd("evalsha", "OK", nil, sha, int64(3), "job:a", "job:b", "job:c", "tok", int64(3), int64(10000)), obtain("tok", 10*time.Second, abc...)},
		{"obtain not obtained", cmd("evalsha", nil, redis.Nil, sha, 1, "job:1", "tok", 3, "10000"), none},
		{"obtain multi not obtained", cmd("evalsha", nil, redis.Nil, sha, 3, "job:a", "job:b", "job:c", "tok", 3, "10000"), none},
		{"obtain noscript", cmd("evalsha", nil, errNoScript, sha, 2, "job:a", "job:b", "tok", 3, "10000"), none},
		{"obtain i/o error", cmd("evalsha", nil, errIO, sha, 2, "job:a", "job:b", "tok", 3, "10000"), none},
		{"obtain zero ttl", cmd("evalsha", "OK", nil, sha, 2, "job:a", "job:b", "tok", 3, "0"), none},
		{"obtain token longer than value", cmd("evalsha", "OK", nil, sha, 2, "job:a", "job:b", "tok", 4, "10000"), none},
		{"obtain ttl not a number", cmd("evalsha", "OK", nil, sha, 2, "job:a", "job:b", "tok", 3, "10s"), none},
		{"obtain no keys", cmd("evalsha", "OK", nil, sha, 0, "tok", 3, "10000"), none},
		{"obtain key count too small", cmd("evalsha", "OK", nil, sha, 2, "job:a", "job:b", "job:c", "tok", 3, "10000"), none},
		{"obtain key count too large", cmd("evalsha", "OK", nil, sha, 4, "job:a", "job:b", "job:c", "tok", 3, "10000"), none},
		{"obtain key count huge", cmd("evalsha", "OK", nil, sha, int64(1)<<40, "job:a", "job:b", "job:c", "tok", 3, "10000"), none},
		{"obtain int key", cmd("evalsha", "OK", nil, sha, 2, "job:a", 42, "tok", 3, "10000"), none},
		{"obtain nil key", cmd("evalsha", "OK", nil, sha, 2, nil, "job:b", "tok", 3, "10000"), none},

		// refresh: the keys, value, TTL in ms as a string; answers OK or nil
		{"refresh", cmd("evalsha", "OK", nil, v010RefreshSHA1, 1, "job:1", "tok", "20000"), refresh("job:1")},
		{"refresh multi", cmd("evalsha", "OK", nil, v010RefreshSHA1, 3, "job:a", "job:b", "job:c", "tok", "20000"), refresh(abc...)},
		{"refresh not held", cmd("evalsha", nil, redis.Nil, v010RefreshSHA1, 1, "job:1", "tok", "20000"), notHeld("job:1")},
		{"refresh multi not held", cmd("evalsha", nil, redis.Nil, v010RefreshSHA1, 3, "job:a", "job:b", "job:c", "tok", "20000"), notHeld(abc...)},
		{"refresh to zero deletes", cmd("evalsha", "OK", nil, v010RefreshSHA1, 1, "job:1", "tok", "0"), release("job:1")},
		{"refresh multi to zero deletes", cmd("evalsha", "OK", nil, v010RefreshSHA1, 3, "job:a", "job:b", "job:c", "tok", "0"), release(abc...)},
		{"refresh to zero, not held", cmd("evalsha", nil, redis.Nil, v010RefreshSHA1, 1, "job:1", "tok", "0"), notHeld("job:1")},
		{"refresh error", cmd("evalsha", nil, errIO, v010RefreshSHA1, 2, "job:a", "job:b", "tok", "20000"), none},
		{"refresh noscript", cmd("evalsha", nil, errNoScript, v010RefreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh 1 reply", cmd("evalsha", int64(1), nil, v010RefreshSHA1, 1, "job:1", "tok", "20000"), none}, // v0.9.4's answers
		{"refresh 0 reply", cmd("evalsha", int64(0), nil, v010RefreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh nil reply without error", cmd("evalsha", nil, nil, v010RefreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh []byte OK", cmd("evalsha", []byte("OK"), nil, v010RefreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh ttl not a number", cmd("evalsha", "OK", nil, v010RefreshSHA1, 2, "job:a", "job:b", "tok", "soon"), none},
		{"refresh without ttl", cmd("evalsha", "OK", nil, v010RefreshSHA1, 2, "job:a", "job:b", "tok"), none},
		{"refresh key count too small", cmd("evalsha", "OK", nil, v010RefreshSHA1, 1, "job:a", "job:b", "tok", "20000"), none},

		// release: the keys, value; untracks whatever it answered
		{"release", cmd("evalsha", "OK", nil, v010ReleaseSHA1, 1, "job:1", "tok"), release("job:1")},
		{"release multi", cmd("evalsha", "OK", nil, v010ReleaseSHA1, 3, "job:a", "job:b", "job:c", "tok"), release(abc...)},
		{"release not held", cmd("evalsha", nil, redis.Nil, v010ReleaseSHA1, 1, "job:1", "tok"), release("job:1")},
		{"release multi not held", cmd("evalsha", nil, redis.Nil, v010ReleaseSHA1, 3, "job:a", "job:b", "job:c", "tok"), release(abc...)},
		{"release error", cmd("evalsha", nil, errIO, v010ReleaseSHA1, 2, "job:a", "job:b", "tok"), release("job:a", "job:b")},
		{"release extra arg", cmd("evalsha", "OK", nil, v010ReleaseSHA1, 1, "job:1", "tok", "x"), none},
		{"release key count too small", cmd("evalsha", "OK", nil, v010ReleaseSHA1, 2, "job:a", "job:b", "job:c", "tok"), none},

		// asked before sending: as it will be if it succeeds
		{"pending obtain", pending("evalsha", sha, 1, "job:1", "tok", 3, "10000"), obtain("tok", 10*time.Second, "job:1")},
		{"pending obtain multi", pending("evalsha", sha, 3, "job:a", "job:b", "job:c", "tok", 3, "10000"), obtain("tok", 10*time.Second, abc...)},
		{"pending obtain token too long", pending("evalsha", sha, 1, "job:1", "tok", 4, "10000"), none},
		{"pending refresh", pending("evalsha", v010RefreshSHA1, 1, "job:1", "tok", "20000"), refresh("job:1")},
		{"pending refresh multi", pending("evalsha", v010RefreshSHA1, 3, "job:a", "job:b", "job:c", "tok", "20000"), refresh(abc...)},
		{"pending refresh multi to zero", pending("evalsha", v010RefreshSHA1, 3, "job:a", "job:b", "job:c", "tok", "0"), release(abc...)},
		{"pending release", pending("evalsha", v010ReleaseSHA1, 1, "job:1", "tok"), release("job:1")},
		{"pending release multi", pending("evalsha", v010ReleaseSHA1, 3, "job:a", "job:b", "job:c", "tok"), release(abc...)},
		{"pending pttl", pending("evalsha", v010PTTLSHA1, 3, "job:a", "job:b", "job:c", "tok"), none},

		// neither
		{"pttl", cmd("evalsha", int64(5000), nil, v010PTTLSHA1, 1, "job:1", "tok"), none},
		{"pttl multi", cmd("evalsha", int64(5000), nil, v010PTTLSHA1, 3, "job:a", "job:b", "job:c", "tok"), none},
		{"pttl not held", cmd("evalsha", nil, redis.Nil, v010PTTLSHA1, 3, "job:a", "job:b", "job:c", "tok"), none},
		{"eval of the sha", cmd("eval", "OK", nil, sha, 1, "job:1", "tok", 3, "10000"), none},
	})
}

// TestClassifyEval classifies the EVAL commands of the linked release, by
// the source it sends. The other release's EVAL is classified when the
// tests run with it linked.
func TestClassifyEval(t *testing.T) {
	src := upstreamSources(t)
	rel := linked()
	for _, r := range []release{v094, v010} {
		t.Run(r.String(), func(t *testing.T) {
			if r != rel {
				t.Skipf("linked redislock %v sends no source of %v's scripts: run the tests with redislock %v linked", rel, r, r)
			}
			s := func(k kind) string { return src[script{k, r}] }
			refreshed, notHeld := any(int64(1)), any(int64(0))
			var notHeldErr error
			if r == v010 {
				refreshed, notHeld, notHeldErr = "OK", nil, redis.Nil
			}
			tests := []classifyCase{
				{"obtain", cmd("eval", "OK", nil, s(kindObtain), 1, "job:1", "tok", 3, "10000"), act(registry.OpObtain, "tok", 10*time.Second, "job:1")},
				{"obtain []byte source", cmd("eval", "OK", nil, []byte(s(kindObtain)), 1, "job:1", "tok", 3, "10000"), act(registry.OpObtain, "tok", 10*time.Second, "job:1")},
				{"obtain not obtained", cmd("eval", nil, redis.Nil, s(kindObtain), 1, "job:1", "tok", 3, "10000"), none},
				{"refresh", cmd("eval", refreshed, nil, s(kindRefresh), 1, "job:1", "tok", "20000"), act(registry.OpRefresh, "tok", 20*time.Second, "job:1")},
				{"refresh not held", cmd("eval", notHeld, notHeldErr, s(kindRefresh), 1, "job:1", "tok", "20000"), act(registry.OpNotHeld, "tok", 0, "job:1")},
				{"release", cmd("eval", refreshed, nil, s(kindRelease), 1, "job:1", "tok"), act(registry.OpRelease, "tok", 0, "job:1")},
				{"release not held", cmd("eval", notHeld, notHeldErr, s(kindRelease), 1, "job:1", "tok"), act(registry.OpRelease, "tok", 0, "job:1")},
				{"pttl", cmd("eval", int64(5000), nil, s(kindPTTL), 1, "job:1", "tok"), none},
				{"pending obtain", pending("eval", s(kindObtain), 1, "job:1", "tok", 3, "10000"), act(registry.OpObtain, "tok", 10*time.Second, "job:1")},
				{"pending refresh", pending("eval", s(kindRefresh), 1, "job:1", "tok", "20000"), act(registry.OpRefresh, "tok", 20*time.Second, "job:1")},
				{"pending release", pending("eval", s(kindRelease), 1, "job:1", "tok"), act(registry.OpRelease, "tok", 0, "job:1")},
				{"evalsha of the source", cmd("evalsha", "OK", nil, s(kindObtain), 1, "job:1", "tok", 3, "10000"), none},
			}
			multi := []classifyCase{
				{"obtain multi", cmd("eval", "OK", nil, s(kindObtain), 2, "job:a", "job:b", "tok", 3, "10000"), act(registry.OpObtain, "tok", 10*time.Second, "job:a", "job:b")},
				{"refresh multi", cmd("eval", refreshed, nil, s(kindRefresh), 2, "job:a", "job:b", "tok", "20000"), act(registry.OpRefresh, "tok", 20*time.Second, "job:a", "job:b")},
				{"refresh multi not held", cmd("eval", notHeld, notHeldErr, s(kindRefresh), 2, "job:a", "job:b", "tok", "20000"), act(registry.OpNotHeld, "tok", 0, "job:a", "job:b")},
				{"release multi", cmd("eval", refreshed, nil, s(kindRelease), 2, "job:a", "job:b", "tok"), act(registry.OpRelease, "tok", 0, "job:a", "job:b")},
				{"pending refresh multi", pending("eval", s(kindRefresh), 2, "job:a", "job:b", "tok", "20000"), act(registry.OpRefresh, "tok", 20*time.Second, "job:a", "job:b")},
			}
			if !r.multiKey() {
				for i := range multi {
					multi[i].want = none // v0.9.4's scripts run on one key
				}
			}
			checkCases(t, New(), append(tests, multi...))
		})
	}
}

func TestClassifyZeroValue(t *testing.T) {
	var a Adapter
	checkCases(t, &a, []classifyCase{
		{"v0.9.4 obtain", cmd("evalsha", "OK", nil, v094ObtainSHA1, 1, "job:1", "tok", 3, "10000"), act(registry.OpObtain, "tok", 10*time.Second, "job:1")},
		{"v0.10.0 obtain", cmd("evalsha", "OK", nil, v010ObtainSHA1, 2, "job:a", "job:b", "tok", 3, "10000"), act(registry.OpObtain, "tok", 10*time.Second, "job:a", "job:b")},
	})
}

// A lock over several keys comes with Keys of its own: the adapter keeps
// nothing of the command, and the registry may keep Keys.
func TestClassifyKeysFresh(t *testing.T) {
	a := New()
	c := cmd("evalsha", "OK", nil, v010ObtainSHA1, 2, []byte("job:a"), "job:b", "tok", 3, "10000")
	first := a.Classify(c)
	first.Keys[0], first.Keys[1] = "changed", "changed"
	second := a.Classify(c)
	if want := []string{"job:a", "job:b"}; second.Keys[0] != want[0] || second.Keys[1] != want[1] {
		t.Errorf("Classify() after changing the Keys it returned before = %v, want %v", second.Keys, want)
	}
	if b, _ := c.Args[3].([]byte); string(b) != "job:a" || c.Args[4] != "job:b" {
		t.Errorf("changing Keys changed the command's arguments: %v", c.Args)
	}
}

func TestPins(t *testing.T) {
	seen := make(map[string]bool)
	for _, p := range pins {
		if p.Releases != p.Script.release.String() {
			t.Errorf("pin %s (%v of %v) is labelled %q, want %q", p.SHA1, p.Script.kind, p.Script.release, p.Releases, p.Script.release.String())
		}
		if len(p.SHA1) != 40 || strings.ToLower(p.SHA1) != p.SHA1 || seen[p.SHA1] {
			t.Errorf("pin %q: want a lower-case hex SHA1, pinned once", p.SHA1)
		}
		seen[p.SHA1] = true
	}
	for _, r := range []release{v094, v010} {
		var kinds []kind
		for _, p := range pinsOf(r) {
			kinds = append(kinds, p.Script.kind)
		}
		if len(kinds) != 4 || kinds[0] != kindObtain || kinds[1] != kindRefresh || kinds[2] != kindRelease || kinds[3] != kindPTTL {
			t.Errorf("pinsOf(%v) = scripts %v, want obtain, refresh, release and pttl", r, kinds)
		}
	}
}

// TestPinsSources checks the linked release's pins against the sources it
// sends; the other release's are checked when it is linked.
func TestPinsSources(t *testing.T) {
	src := upstreamSources(t)
	for _, p := range pinsOf(linked()) {
		var buf [40]byte
		if !adapterkit.ScriptSHA1("eval", src[p.Script], &buf) || string(buf[:]) != p.SHA1 {
			t.Errorf("SHA1 of the %v %v source the linked redislock sends = %s, want the pin %s", p.Releases, p.Script.kind, buf[:], p.SHA1)
		}
	}
}

func TestClassifyAllocs(t *testing.T) {
	a := New()
	for _, c := range []registry.Command{
		cmd("evalsha", int64(1), nil, v094RefreshSHA1, 1, "job:1", "tok", "20000"),
		cmd("evalsha", "OK", nil, v094ObtainSHA1, 1, "job:1", "tok", 3, "10000"),
		cmd("evalsha", "OK", nil, v010RefreshSHA1, 1, "job:1", "tok", "20000"),
		cmd("evalsha", nil, redis.Nil, v010RefreshSHA1, 1, "job:1", "tok", "20000"),
		cmd("evalsha", "OK", nil, v010ObtainSHA1, 1, "job:1", "tok", 3, "10000"),
		cmd("evalsha", nil, redis.Nil, v010ReleaseSHA1, 1, "job:1", "tok"),
		pending("evalsha", v010RefreshSHA1, 1, "job:1", "tok", "20000"),
		pending("evalsha", v094ReleaseSHA1, 1, "job:1", "tok"),
	} {
		if n := testing.AllocsPerRun(100, func() { a.Classify(c) }); n != 0 {
			t.Errorf("Classify(%v, pending %v) allocates %v times, want 0", c.Args, c.Pending, n)
		}
	}
	// Over several keys: Keys alone.
	c := cmd("evalsha", "OK", nil, v010RefreshSHA1, 3, "job:a", "job:b", "job:c", "tok", "20000")
	if n := testing.AllocsPerRun(100, func() { a.Classify(c) }); n != 1 {
		t.Errorf("Classify(%v) allocates %v times, want 1 (Keys)", c.Args, n)
	}
}

func BenchmarkClassify(b *testing.B) {
	a := New()
	src := upstreamSources(b)
	rel := linked()
	benches := []struct {
		name string
		cmd  registry.Command
	}{
		{"evalsha-refresh", cmd("evalsha", int64(1), nil, v094RefreshSHA1, 1, "job:1", "tok", "20000")},
		{"evalsha-obtain", cmd("evalsha", "OK", nil, v094ObtainSHA1, 1, "job:1", "tok", 3, "10000")},
		{"evalsha-refresh-v0.10.0", cmd("evalsha", "OK", nil, v010RefreshSHA1, 1, "job:1", "tok", "20000")},
		{"evalsha-obtain-v0.10.0", cmd("evalsha", "OK", nil, v010ObtainSHA1, 1, "job:1", "tok", 3, "10000")},
		{"evalsha-obtain-v0.10.0-3keys", cmd("evalsha", "OK", nil, v010ObtainSHA1, 3, "job:a", "job:b", "job:c", "tok", 3, "10000")},
		{"evalsha-refresh-pending", pending("evalsha", v010RefreshSHA1, 1, "job:1", "tok", "20000")},
		{"evalsha-unknown", cmd("evalsha", int64(1), nil, strings.Repeat("0", 40), 1, "job:1", "tok", "20000")},
		{"eval-refresh-" + rel.String(), cmd("eval", rel.replies().Done(), nil, src[script{kindRefresh, rel}], 1, "job:1", "tok", "20000")},
		{"set", cmd("set", "OK", nil, "job:1", "tok", "px", 10000, "nx")},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a.Classify(bb.cmd)
			}
		})
	}
}
