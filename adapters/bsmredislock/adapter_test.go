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
// returns the source it sent with EVAL for each script, so that tests need
// not carry copies of redislock's Lua.
func upstreamSources(t testing.TB) map[script]string {
	t.Helper()
	return adaptertest.Sources(t, "redislock", New().recorder(), New().probe, pins)
}

func TestName(t *testing.T) {
	if got := New().Name(); got != "redislock" {
		t.Errorf("Name() = %q, want %q", got, "redislock")
	}
}

func TestClassify(t *testing.T) {
	src := upstreamSources(t)
	upper := strings.ToUpper(obtainSHA1)
	errIO := errors.New("i/o timeout")
	none := registry.Action{}
	obtain := func(key, value string, ttl time.Duration) registry.Action {
		return registry.Action{Op: registry.OpObtain, Key: key, Value: value, TTL: ttl}
	}
	refresh := func(key, value string, ttl time.Duration) registry.Action {
		return registry.Action{Op: registry.OpRefresh, Key: key, Value: value, TTL: ttl}
	}
	notHeld := registry.Action{Op: registry.OpNotHeld, Key: "job:1", Value: "tok"}
	release := registry.Action{Op: registry.OpRelease, Key: "job:1", Value: "tok"}

	tests := []struct {
		name string
		cmd  registry.Command
		want registry.Action
	}{
		// obtain, as redislock sends it: value, len(token), TTL in ms as a string
		{"obtain evalsha", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "10000"), obtain("job:1", "tok", 10*time.Second)},
		{"obtain eval", cmd("eval", "OK", nil, src[scriptObtain], 1, "job:1", "tok", 3, "10000"), obtain("job:1", "tok", 10*time.Second)},
		{"obtain with metadata", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tokmeta", 3, "2500"), obtain("job:1", "tokmeta", 2500*time.Millisecond)},
		{"obtain, empty metadata and token", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "", 0, "1"), obtain("job:1", "", time.Millisecond)},
		{"obtain upper-case sha", cmd("evalsha", "OK", nil, upper, 1, "job:1", "tok", 3, "10000"), obtain("job:1", "tok", 10*time.Second)},
		{"obtain []byte args", cmd("evalsha", "OK", nil, []byte(obtainSHA1), "1", []byte("job:1"), []byte("tok"), "3", []byte("10000")), obtain("job:1", "tok", 10*time.Second)},
		{"obtain int64 ttl", cmd("evalsha", "OK", nil, obtainSHA1, int64(1), "job:1", "tok", int64(3), int64(10000)), obtain("job:1", "tok", 10*time.Second)},
		{"obtain uint ttl", cmd("evalsha", "OK", nil, obtainSHA1, uint8(1), "job:1", "tok", uint16(3), uint32(10000)), obtain("job:1", "tok", 10*time.Second)},
		{"obtain not obtained", cmd("evalsha", nil, redis.Nil, obtainSHA1, 1, "job:1", "tok", 3, "10000"), none},
		{"obtain noscript", cmd("evalsha", nil, adaptertest.RedisError("NOSCRIPT No matching script"), obtainSHA1, 1, "job:1", "tok", 3, "10000"), none},
		{"obtain i/o error", cmd("evalsha", nil, errIO, obtainSHA1, 1, "job:1", "tok", 3, "10000"), none},
		{"obtain zero ttl", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "0"), none},
		{"obtain negative ttl", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "-1"), none},
		{"obtain ttl overflows", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "9223372036854775807"), none},
		{"obtain ttl not a number", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "10s"), none},
		{"obtain ttl with plus sign", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "+10"), none},
		{"obtain ttl with leading zero", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "010"), none},
		{"obtain ttl float", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, 10000.0), none},
		{"obtain ttl duration", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, 10*time.Second), none},
		{"obtain ttl nil", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, nil), none},
		{"obtain token longer than value", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 4, "10000"), none},
		{"obtain negative token length", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", -1, "10000"), none},
		{"obtain too few args", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3), none},
		{"obtain too many args", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "10000", "x"), none},
		{"obtain two keys", cmd("evalsha", "OK", nil, obtainSHA1, 2, "job:1", "tok", 3, "10000"), none},
		{"obtain numkeys not a number", cmd("evalsha", "OK", nil, obtainSHA1, "one", "job:1", "tok", 3, "10000"), none},
		{"obtain int key", cmd("evalsha", "OK", nil, obtainSHA1, 1, 42, "tok", 3, "10000"), none},
		{"obtain nil value", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", nil, 3, "10000"), none},

		// refresh: value, TTL in ms as a string; answers 1 or 0
		{"refresh", cmd("evalsha", int64(1), nil, refreshSHA1, 1, "job:1", "tok", "20000"), refresh("job:1", "tok", 20*time.Second)},
		{"refresh eval", cmd("eval", int64(1), nil, src[scriptRefresh], 1, "job:1", "tok", "20000"), refresh("job:1", "tok", 20*time.Second)},
		{"refresh not held", cmd("evalsha", int64(0), nil, refreshSHA1, 1, "job:1", "tok", "20000"), notHeld},
		{"refresh to zero deletes", cmd("evalsha", int64(1), nil, refreshSHA1, 1, "job:1", "tok", "0"), release},
		{"refresh to negative deletes", cmd("evalsha", int64(1), nil, refreshSHA1, 1, "job:1", "tok", "-10"), release},
		{"refresh to zero, not held", cmd("evalsha", int64(0), nil, refreshSHA1, 1, "job:1", "tok", "0"), notHeld},
		{"refresh error", cmd("evalsha", nil, errIO, refreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh noscript", cmd("evalsha", nil, adaptertest.RedisError("NOSCRIPT No matching script"), refreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh odd reply", cmd("evalsha", int64(2), nil, refreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh string reply", cmd("evalsha", "1", nil, refreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh nil reply", cmd("evalsha", nil, nil, refreshSHA1, 1, "job:1", "tok", "20000"), none},
		{"refresh ttl not a number", cmd("evalsha", int64(1), nil, refreshSHA1, 1, "job:1", "tok", "soon"), none},
		{"refresh without ttl", cmd("evalsha", int64(1), nil, refreshSHA1, 1, "job:1", "tok"), none},

		// release: value; untracks whatever it answered
		{"release", cmd("evalsha", int64(1), nil, releaseSHA1, 1, "job:1", "tok"), release},
		{"release eval", cmd("eval", int64(1), nil, src[scriptRelease], 1, "job:1", "tok"), release},
		{"release not held", cmd("evalsha", int64(0), nil, releaseSHA1, 1, "job:1", "tok"), release},
		{"release error", cmd("evalsha", nil, errIO, releaseSHA1, 1, "job:1", "tok"), release},
		{"release noscript", cmd("evalsha", nil, adaptertest.RedisError("NOSCRIPT No matching script"), releaseSHA1, 1, "job:1", "tok"), release},
		{"release extra arg", cmd("evalsha", int64(1), nil, releaseSHA1, 1, "job:1", "tok", "x"), none},
		{"release without value", cmd("evalsha", int64(1), nil, releaseSHA1, 1, "job:1"), none},

		// neither
		{"pttl", cmd("evalsha", int64(5000), nil, pttlSHA1, 1, "job:1", "tok"), none},
		{"pttl eval", cmd("eval", int64(5000), nil, src[scriptPTTL], 1, "job:1", "tok"), none},
		{"unknown sha", cmd("evalsha", "OK", nil, strings.Repeat("0", 40), 1, "job:1", "tok", 3, "10000"), none},
		{"short sha", cmd("evalsha", "OK", nil, obtainSHA1[:39], 1, "job:1", "tok", 3, "10000"), none},
		{"sha not a string", cmd("evalsha", "OK", nil, 42, 1, "job:1", "tok", 3, "10000"), none},
		{"eval of the sha", cmd("eval", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "10000"), none},
		{"evalsha of the source", cmd("evalsha", "OK", nil, src[scriptObtain], 1, "job:1", "tok", 3, "10000"), none},
		{"eval of other lua", cmd("eval", "OK", nil, "return 1", 1, "job:1", "tok", 3, "10000"), none},
		{"set", cmd("set", "OK", nil, "job:1", "tok", "px", 10000, "nx"), none},
		{"no args", registry.Command{Name: "evalsha"}, none},
	}
	a := New()
	for _, tt := range tests {
		if got := a.Classify(tt.cmd); !adapterkit.SameAction(got, tt.want) {
			t.Errorf("Classify(%s: %v) = %+v, want %+v", tt.name, tt.cmd.Args, got, tt.want)
		}
	}
}

// cmd builds a command as the registry hook hands it over.
func cmd(name string, reply any, err error, args ...any) registry.Command {
	return registry.Command{Name: name, Args: append([]any{name}, args...), Reply: reply, Err: err}
}

func TestClassifyZeroValue(t *testing.T) {
	var a Adapter
	c := cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "10000")
	want := registry.Action{Op: registry.OpObtain, Key: "job:1", Value: "tok", TTL: 10 * time.Second}
	if got := a.Classify(c); !adapterkit.SameAction(got, want) {
		t.Errorf("Adapter{}.Classify(obtain) = %+v, want %+v", got, want)
	}
}

func TestClassifyAllocs(t *testing.T) {
	a := New()
	c := cmd("evalsha", int64(1), nil, refreshSHA1, 1, "job:1", "tok", "20000")
	if n := testing.AllocsPerRun(100, func() { a.Classify(c) }); n != 0 {
		t.Errorf("Classify(refresh) allocates %v times, want 0", n)
	}
}

func BenchmarkClassify(b *testing.B) {
	a := New()
	src := upstreamSources(b)
	benches := []struct {
		name string
		cmd  registry.Command
	}{
		{"evalsha-refresh", cmd("evalsha", int64(1), nil, refreshSHA1, 1, "job:1", "tok", "20000")},
		{"evalsha-obtain", cmd("evalsha", "OK", nil, obtainSHA1, 1, "job:1", "tok", 3, "10000")},
		{"evalsha-unknown", cmd("evalsha", int64(1), nil, strings.Repeat("0", 40), 1, "job:1", "tok", "20000")},
		{"eval-refresh", cmd("eval", int64(1), nil, src[scriptRefresh], 1, "job:1", "tok", "20000")},
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
