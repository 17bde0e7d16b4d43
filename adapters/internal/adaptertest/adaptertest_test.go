package adaptertest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

type script uint8

const (
	scriptUnknown script = iota
	scriptA
	scriptB
)

const (
	sourceA = "return 1"
	sourceB = "return 2"
)

func sha1Hex(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

var testPins = []adapterkit.Pin[script]{
	{SHA1: sha1Hex(sourceA), Script: scriptA},
	{SHA1: sha1Hex(sourceB), Script: scriptB},
}

func TestCodec(t *testing.T) {
	c := NewCodec(testPins, map[script]string{scriptA: sourceA, scriptB: sourceB})
	args := []any{sha1Hex(sourceB), sourceA, "job:1", []byte("tok"), -3, math.Inf(1), uint64(math.MaxUint64), nil, ""}
	data := c.Encode(args...)
	if got := c.Decode(data); !reflect.DeepEqual(got, args) {
		t.Fatalf("Decode(Encode(%v)) = %v, want the arguments back", args, got)
	}
	// A truncated input decodes to a prefix of the arguments, the last one
	// perhaps cut short.
	for n := range data {
		got := c.Decode(data[:n])
		if len(got) > len(args) || (len(got) > 1 && !reflect.DeepEqual(got[:len(got)-1], args[:len(got)-1])) {
			t.Fatalf("Decode(%d of %d bytes) = %v, want a prefix of %v", n, len(data), got, args)
		}
	}
	// Indexes and tags wrap around.
	if got, want := c.Decode([]byte{tagSHA + numTags, 3, tagSource, 2}), []any{testPins[1].SHA1, sourceA}; !reflect.DeepEqual(got, want) {
		t.Errorf("Decode(wrapped tag and indexes) = %v, want %v", got, want)
	}
}

func TestCodecCommand(t *testing.T) {
	c := NewCodec(testPins, map[script]string{scriptA: sourceA, scriptB: sourceB})
	names := []string{"evalsha", "EVAL"}
	got := c.Command(names, 3, 2, 3, c.Encode("job:1"))
	want := registry.Command{Name: "EVAL", Args: []any{"EVAL", "job:1"}, Reply: int64(1), Err: got.Err}
	if !reflect.DeepEqual(got, want) || got.Err == nil || got.Err.Error() != "i/o timeout" {
		t.Errorf("Command(names, 3, 2, 3, job:1) = %+v, want %+v with an i/o timeout", got, want)
	}
	if got := c.Command(names, 0, 0, 0, nil); got.Name != "evalsha" || len(got.Args) != 1 || got.Reply != nil || got.Err != nil {
		t.Errorf("Command(names, 0, 0, 0, nil) = %+v, want a bare evalsha without reply or error", got)
	}
}

func TestCodecMissingSource(t *testing.T) {
	// Only scriptB's source is known (say, only its release is linked).
	c := NewCodec(testPins, map[script]string{scriptB: sourceB})
	args := []any{"", sourceB, sha1Hex(sourceA)}
	data := c.Encode(args...)
	if data[0] != tagString {
		t.Errorf("Encode(\"\") starts with tag %d, want tagString: an empty string is no missing source", data[0])
	}
	if got := c.Decode(data); !reflect.DeepEqual(got, args) {
		t.Errorf("Decode(Encode(%q)) = %q, want the arguments back", args, got)
	}
	if got := c.Decode([]byte{tagSource, 0}); !reflect.DeepEqual(got, []any{""}) {
		t.Errorf("Decode(the missing source) = %q, want an empty string", got)
	}
}

func TestCodecCommandCasePending(t *testing.T) {
	c := NewCodec(testPins, map[script]string{scriptA: sourceA, scriptB: sourceB})
	names := []string{"evalsha", "EVAL"}
	got := c.CommandCase(names, 0, 0x01, 2, 3|ErrPending, c.Encode("job:1"))
	want := registry.Command{Name: "evalsha", Args: []any{"Evalsha", "job:1"}, Pending: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CommandCase(pending) = %+v, want %+v: no reply, no error", got, want)
	}
	if got := c.CommandCase(names, 0, 0, 2, 3, nil); got.Pending || got.Reply != int64(1) || got.Err == nil {
		t.Errorf("CommandCase(not pending) = %+v, want reply 1 and an error", got)
	}
}

// fakeT records CheckClassify's failures; Fatalf ends the check as
// testing.T's does.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// checkFails runs CheckClassify of classify on c in a goroutine of its own
// and returns its failure, "" when there is none.
func checkFails(classify func(registry.Command) registry.Action, c registry.Command) string {
	f := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		CheckClassify(f, classify, c)
	}()
	<-done
	return f.failed
}

// withErr returns c answered with err and no reply.
func withErr(c registry.Command, err error) registry.Command {
	c.Reply, c.Err = nil, err
	return c
}

func TestCheckClassify(t *testing.T) {
	evalsha := registry.Command{Name: "evalsha", Args: []any{"evalsha", "sha", 2, "k", "l", "v", "1000"}, Reply: "OK"}
	pending := evalsha
	pending.Reply, pending.Pending = nil, true
	keys := []string{"k", "l"}
	act := func(a registry.Action) func(registry.Command) registry.Action {
		return func(registry.Command) registry.Action {
			a.Keys = slices.Clone(a.Keys)
			return a
		}
	}
	tests := []struct {
		name     string
		c        registry.Command
		classify func(registry.Command) registry.Action
		fails    string // a part of the failure; "" when none
	}{
		{"none", evalsha, act(registry.Action{}), ""},
		{"refresh", evalsha, act(registry.Action{Op: registry.OpRefresh, Key: "k", Keys: keys, Value: "v", TTL: time.Second}), ""},
		{"pending refresh", pending, act(registry.Action{Op: registry.OpRefresh, Key: "k", Value: "v", TTL: time.Second}), ""},
		{"pending not-held", pending, act(registry.Action{Op: registry.OpNotHeld, Key: "k", Value: "v"}), "no not-held before the reply"},
		{"not-held on a nil reply", withErr(evalsha, redis.Nil), act(registry.Action{Op: registry.OpNotHeld, Key: "k", Value: "v"}), ""},
		{"not-held on an error", withErr(evalsha, errors.New("i/o timeout")), act(registry.Action{Op: registry.OpNotHeld, Key: "k", Value: "v"}), "no not-held from a failed command"},
		{"refresh on a nil reply", withErr(evalsha, redis.Nil), act(registry.Action{Op: registry.OpRefresh, Key: "k", Value: "v", TTL: time.Second}), "positive TTL and no error"},
		{"obtain without TTL", evalsha, act(registry.Action{Op: registry.OpObtain, Key: "k", Value: "v"}), "positive TTL"},
		{"one key in Keys", evalsha, act(registry.Action{Op: registry.OpRelease, Key: "k", Keys: []string{"k"}, Value: "v"}), "want Keys nil"},
		{"Keys not starting with Key", evalsha, act(registry.Action{Op: registry.OpRelease, Key: "k", Keys: []string{"l", "k"}, Value: "v"}), "want Keys nil"},
		{"empty Keys", evalsha, act(registry.Action{Op: registry.OpRelease, Key: "k", Keys: []string{}, Value: "v"}), "want Keys nil"},
		{"none with keys", evalsha, act(registry.Action{Keys: keys}), "want Keys nil"},
		{"shared Keys", evalsha, func(registry.Command) registry.Action {
			return registry.Action{Op: registry.OpRelease, Key: "k", Keys: keys, Value: "v"}
		}, "the same Keys slice"},
		{"changes its args", evalsha, func(c registry.Command) registry.Action { c.Args[3] = "x"; return registry.Action{} }, "changed its command"},
		{"not a lock command", registry.Command{Name: "get", Args: []any{"get", "k", "v"}}, act(registry.Action{Op: registry.OpRelease, Key: "k", Value: "v"}), "no lock command"},
	}
	for _, tt := range tests {
		c := tt.c
		c.Args = slices.Clone(c.Args)
		got := checkFails(tt.classify, c)
		if (tt.fails == "") != (got == "") || !strings.Contains(got, tt.fails) {
			t.Errorf("CheckClassify(%s) failed with %q, want a failure containing %q", tt.name, got, tt.fails)
		}
	}
}

func TestPinnedScript(t *testing.T) {
	shaB := testPins[1].SHA1
	tests := []struct {
		name string
		args []any
		want script
	}{
		{"evalsha", []any{"evalsha", shaB, 1}, scriptB},
		{"evalsha", []any{"EVALSHA", strings.ToUpper(shaB)}, scriptB},
		{"evalsha", []any{"evalsha", []byte(shaB)}, scriptB},
		{"eval", []any{"eval", sourceA}, scriptA},
		{"eval", []any{"eval", shaB}, scriptUnknown},
		{"evalsha", []any{"evalsha", sourceA}, scriptUnknown},
		{"evalsha", []any{"evalsha", 42}, scriptUnknown},
		{"evalsha", []any{"evalsha"}, scriptUnknown},
		{"set", []any{"set", shaB}, scriptUnknown},
	}
	for _, tt := range tests {
		if got := PinnedScript(testPins, tt.name, tt.args); got != tt.want {
			t.Errorf("PinnedScript(%s, %v) = %v, want %v", tt.name, tt.args, got, tt.want)
		}
	}
}

func TestWithout(t *testing.T) {
	if got := Without(testPins, testPins[0].SHA1); !reflect.DeepEqual(got, testPins[1:]) {
		t.Errorf("Without(first) = %v, want %v", got, testPins[1:])
	}
	if got := Without(testPins, "unknown"); !reflect.DeepEqual(got, testPins) {
		t.Errorf("Without(unknown) = %v, want %v", got, testPins)
	}
}

// setAdapter tracks every SET key value PX|EX n NX that succeeded.
type setAdapter struct{}

func (setAdapter) Name() string                { return "set" }
func (setAdapter) Probe(context.Context) error { return nil }
func (setAdapter) Classify(c registry.Command) registry.Action {
	if c.Name != "set" || c.Err != nil || len(c.Args) != 6 {
		return registry.Action{}
	}
	n, _ := adapterkit.Integer(c.Args[4])
	unit := time.Millisecond
	if c.Args[3] == "ex" {
		unit = time.Second
	}
	return registry.Action{Op: registry.OpObtain, Key: Text(c.Args[1]), Value: Text(c.Args[2]), TTL: time.Duration(n) * unit}
}

func TestWatched(t *testing.T) {
	ctx := Context(t)
	if _, ok := ctx.Deadline(); !ok {
		t.Errorf("Context() has no deadline, want one")
	}
	reg, rdb, m := Watched(t, setAdapter{})
	WantLocks(t, "nothing", reg)
	if err := rdb.SetNX(ctx, "job:1", "v1", 1500*time.Millisecond).Err(); err != nil {
		t.Fatalf("SetNX() = %v, want nil", err)
	}
	if err := rdb.SetNX(ctx, "job:2", "v2", 2*time.Second).Err(); err != nil {
		t.Fatalf("SetNX() = %v, want nil", err)
	}
	if got, _ := m.Get("job:1"); got != "v1" {
		t.Errorf("GET job:1 in miniredis = %q, want v1", got)
	}
	WantLocks(t, "two SETs", reg, Tracked("job:2", "v2", "set", 2*time.Second), Tracked("job:1", "v1", "set", 1500*time.Millisecond))
	if got := Locks(reg); len(got) != 2 {
		t.Errorf("Locks() = %v, want 2 locks", got)
	}
}

func TestRedisError(t *testing.T) {
	var err error = RedisError("NOSCRIPT No matching script")
	var reply interface{ RedisError() }
	if !errors.As(err, &reply) || err.Error() != "NOSCRIPT No matching script" {
		t.Errorf("RedisError = %v, want an error reply with its text", err)
	}
}

func TestText(t *testing.T) {
	if got := Text([]byte("tok")); got != "tok" {
		t.Errorf("Text([]byte(tok)) = %q, want tok", got)
	}
	if got := Text(42); got != "" {
		t.Errorf("Text(42) = %q, want empty", got)
	}
}
