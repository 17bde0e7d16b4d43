package goredsync

import (
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
)

var fuzzNames = []string{"evalsha", "eval", "set", "SET", ""}

func FuzzClassify(f *testing.F) {
	src := upstreamSources(f)
	c := adaptertest.NewCodec(pins, src)
	seeds := []struct {
		name, reply, err uint8
		args             []any
	}{
		{2, 5, 0, []any{"job:1", "v1", "ex", 8, "nx"}},
		{2, 5, 0, []any{"job:1", "v1", "px", 2500, "nx"}},
		{3, 1, 0, []any{"job:1", "v1", "NX", "PX", "1000"}},
		{2, 6, 0, []any{"job:1", "v1", "px", 2500, "nx"}},
		{0, 2, 0, []any{deleteSHA1, 1, "job:1", "v1"}},
		{1, 4, 0, []any{src[scriptDelete], 1, "job:1", "v1"}},
		{0, 0, 2, []any{touchSHA1, 1, "job:1", "v1", 8000}},
		{1, 2, 0, []any{src[scriptTouch], 1, "job:1", "v1", 8000}},
		{0, 3, 0, []any{touchWithSetNXSHA1, 1, "job:1", []byte("v1"), "2500"}},
		{1, 2, 0, []any{src[scriptTouchWithSetNX], 1.0, "job:1", nil, uint64(8000)}},
	}
	for _, s := range seeds {
		f.Add(s.name, s.reply, s.err, c.Encode(s.args...))
	}
	a := New()
	f.Fuzz(func(t *testing.T, nameSel, replySel, errSel uint8, data []byte) {
		cmd := c.Command(fuzzNames, nameSel, replySel, errSel, data)
		cmd.Name = strings.ToLower(cmd.Name) // as the registry hook hands it over
		args := cmd.Args
		got := a.Classify(cmd)
		s := adaptertest.PinnedScript(pins, cmd.Name, args)
		switch {
		case got.Op == registry.OpNone:
		case cmd.Name == "set":
			t.Fatalf("Classify(%v) from a test = %+v, want OpNone: only redsync's SET NX is a lock", args, got)
		case s == scriptUnknown:
			t.Fatalf("Classify(%v) = %+v for an unpinned script, want OpNone", args, got)
		case got.Op == registry.OpObtain:
			t.Fatalf("Classify(%v) = %+v, want no obtain from a script", args, got)
		case got.Op == registry.OpRefresh && (s == scriptDelete || cmd.Err != nil || got.TTL <= 0):
			t.Fatalf("Classify(%v, err %v) = %+v, want no refresh", args, cmd.Err, got)
		case got.Op == registry.OpNotHeld && (s == scriptDelete || cmd.Err != nil):
			t.Fatalf("Classify(%v, err %v) = %+v, want no not-held", args, cmd.Err, got)
		case got.Key != adaptertest.Text(args[3]) || got.Value != adaptertest.Text(args[4]):
			t.Fatalf("Classify(%v) = %+v, want key and value from the arguments", args, got)
		}
		// What Classify would make of a SET sent by redsync.
		if key, value, ttl, ok := parseSet(args); ok {
			if ttl <= 0 || ttl%time.Millisecond != 0 || key != adaptertest.Text(args[1]) || value != adaptertest.Text(args[2]) {
				t.Fatalf("parseSet(%v) = %q, %q, %v, want the key, value and a positive TTL from the arguments", args, key, value, ttl)
			}
		}
	})
}
