package adaptertest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
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
