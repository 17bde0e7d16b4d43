package bsmredislock

import (
	"strings"
	"testing"

	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
)

var fuzzNames = []string{"evalsha", "eval", "set", "EVALSHA", ""}

func FuzzClassify(f *testing.F) {
	src := upstreamSources(f)
	c := adaptertest.NewCodec(pins, src)
	seeds := []struct {
		name       uint8
		reply, err uint8
		args       []any
	}{
		{0, 1, 0, []any{obtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{1, 1, 0, []any{src[scriptObtain], 1, "job:1", "tokmeta", 3, "10000"}},
		{0, 0, 1, []any{obtainSHA1, 1, "job:1", "tok", 3, "10000"}},
		{0, 2, 0, []any{refreshSHA1, 1, "job:1", "tok", "20000"}},
		{1, 3, 0, []any{src[scriptRefresh], 1, "job:1", "tok", "0"}},
		{0, 0, 2, []any{releaseSHA1, 1, "job:1", "tok"}},
		{1, 2, 0, []any{src[scriptRelease], 1, "job:1", []byte("tok")}},
		{0, 2, 0, []any{pttlSHA1, 1, "job:1", "tok"}},
		{0, 1, 0, []any{strings.ToUpper(obtainSHA1), 1.0, "job:1", nil, uint64(3), 1e4}},
		{2, 5, 0, []any{"job:1", "tok", "px", 10000, "nx"}},
	}
	for _, s := range seeds {
		f.Add(s.name, s.reply, s.err, c.Encode(s.args...))
	}
	a := New()
	f.Fuzz(func(t *testing.T, nameSel, replySel, errSel uint8, data []byte) {
		cmd := c.Command(fuzzNames, nameSel, replySel, errSel, data)
		args := cmd.Args
		got := a.Classify(cmd)
		s := adaptertest.PinnedScript(pins, cmd.Name, args)
		switch {
		case got.Op == registry.OpNone:
		case s == scriptUnknown || s == scriptPTTL:
			t.Fatalf("Classify(%v) = %+v for an unpinned or TTL script, want OpNone", args, got)
		case got.Op == registry.OpObtain && (s != scriptObtain || cmd.Err != nil || got.TTL <= 0):
			t.Fatalf("Classify(%v, err %v) = %+v, want no obtain", args, cmd.Err, got)
		case got.Op == registry.OpRefresh && (s != scriptRefresh || cmd.Err != nil || got.TTL <= 0):
			t.Fatalf("Classify(%v, err %v) = %+v, want no refresh", args, cmd.Err, got)
		case got.Op == registry.OpNotHeld && s != scriptRefresh:
			t.Fatalf("Classify(%v) = %+v, want no not-held", args, got)
		case got.Op == registry.OpRelease && s != scriptRelease && s != scriptRefresh:
			t.Fatalf("Classify(%v) = %+v, want no release", args, got)
		case got.Key != adaptertest.Text(args[3]) || got.Value != adaptertest.Text(args[4]):
			t.Fatalf("Classify(%v) = %+v, want key and value from the arguments", args, got)
		}
	})
}
